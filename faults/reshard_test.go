package faults

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The slot of a live fair lock moves to another master (CLUSTER SETSLOT
// IMPORTING/MIGRATING, MIGRATE of its keys, SETSLOT NODE) while one handle
// holds it and two wait. The holder keeps its hold (its renewals follow the
// MOVED reply, and the scripts' library is loaded on the new master by the
// first call that misses it), the waiters' subscriptions follow the slot to
// the new master (the old one drops the channel with a SUNSUBSCRIBE), so
// they are served in their order by the hand-off's message, and every
// token rises.
func TestMovingALiveLocksSlot(t *testing.T) {
	g := redistest.NewClusterGroup(t)
	newClient := func() *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: g.Nodes})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	probe := newClient()
	ctx := context.Background()
	name := lockName(t)
	key := holdKey("fair", name)
	mv := newSlotMove(t, probe, key)
	dstC := mv.dstC

	const wait = 3 * time.Second // heartbeat every second
	a, err := fair.New(redistest.Owner(newClient()), name, fairlock.WithLease(failLease), fair.WithLabel("a"))
	must(t, err)
	must(t, a.Lock(ctx))
	tokA := a.Token()
	type waiter struct {
		m    *fair.Mutex
		done <-chan result
	}
	var ws []waiter
	for i, label := range []string{"b", "c"} {
		m, err := fair.New(redistest.Owner(newClient()), name, fairlock.WithWaitTimeout(wait), fair.WithLabel(label))
		must(t, err)
		ws = append(ws, waiter{m, acquired(m.Lock, 30*time.Second)})
		eventually(t, 5*time.Second, label+" is queued", func() bool { return len(queueOf(t, probe, name)) == i+1 })
	}

	// Move the slot, keys and all: the hold, the queue and the deadlines.
	mv.run(3)

	// The holder keeps its hold through two renewals on the new master.
	time.Sleep(failLease / 3 * 2)
	if isClosed(a.Lost()) {
		t.Fatal("the holder lost its hold when the slot moved")
	}
	if n, err := dstC.Exists(ctx, key).Result(); err != nil || n != 1 {
		t.Fatalf("the hold is not on the new master: %v, %v", n, err)
	}
	libs, err := dstC.FunctionList(ctx, redis.FunctionListQuery{}).Result()
	must(t, err)
	if len(libs) == 0 {
		t.Fatal("the scripts' library was not loaded on the new master")
	}

	// The waiters are served in their order, with rising tokens.
	unlocked := time.Now()
	must(t, a.Unlock(ctx))
	last := tokA
	for i, w := range ws {
		select {
		case r := <-w.done:
			if r.err != nil {
				t.Fatalf("waiter %d: %v", i, r.err)
			}
			took := r.at.Sub(unlocked)
			t.Logf("waiter %d got the lock %v after the previous Unlock", i, took.Round(time.Millisecond))
			// Woken by the hand-off's message on the new master, not by
			// its heartbeat (every second): its subscription followed the
			// slot.
			if took > 500*time.Millisecond {
				t.Fatalf("waiter %d got the lock %v after the Unlock: its hand-off message was lost", i, took)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("waiter %d was not served after the slot moved", i)
		}
		if tok := w.m.Token(); tok <= last {
			t.Fatalf("waiter %d's token %d is not above %d", i, tok, last)
		}
		if i+1 < len(ws) {
			select {
			case r := <-ws[i+1].done:
				if r.err != nil {
					t.Fatalf("waiter %d's Lock failed: %v", i+1, r.err)
				}
				t.Fatalf("waiter %d was served before waiter %d unlocked", i+1, i)
			default:
			}
		}
		last = w.m.Token()
		unlocked = time.Now()
		must(t, w.m.Unlock(ctx))
	}
}

// The first call after a lock's slot moved to a master without the scripts'
// library loads it there, even though the client's map of the cluster still
// names the old master for a moment (go-redis follows the MOVED reply at
// once, and reloads its map later): the library goes to every master, not
// to the one that map names.
func TestFirstCallAfterASlotMoveLoadsTheLibrary(t *testing.T) {
	g := redistest.NewClusterGroup(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: g.Nodes})
	defer c.Close()
	ctx := context.Background()
	name := lockName(t)
	m, err := fair.New(redistest.Owner(c), name)
	must(t, err)
	mv := newSlotMove(t, c, holdKey("fair", name))
	for round := range 3 {
		ok, err := m.TryLock(ctx, 0, time.Minute) // a hold whose keys move
		if err != nil || !ok {
			t.Fatalf("round %d: TryLock before the move: %v, %v", round, ok, err)
		}
		// Only the master that has the lock's slot has the library (the
		// TryLock loaded it there).
		_, code, err := redistest.LoadedLibrary(ctx, mv.srcC)
		must(t, err)
		must(t, c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return n.FunctionFlush(ctx).Err()
		}))
		must(t, mv.srcC.FunctionLoadReplace(ctx, code).Err())
		mv.run(1)
		if err := m.Unlock(ctx); err != nil {
			t.Fatalf("round %d: Unlock on the new master, the first call there: %v", round, err)
		}
		mv = mv.onward()
	}
}

// slotMove moves one key's slot, keys and all, to another master: CLUSTER
// SETSLOT IMPORTING/MIGRATING, MIGRATE of its keys (want of them), SETSLOT
// NODE on every master.
type slotMove struct {
	t          *testing.T
	slot       int64
	src, dst   string
	srcC, dstC *redis.Client
	masters    []string
}

func newSlotMove(t *testing.T, probe *redis.ClusterClient, key string) *slotMove {
	ctx := context.Background()
	slot, err := probe.ClusterKeySlot(ctx, key).Result()
	must(t, err)
	src, _ := shardOf(t, probe, key)
	var mu sync.Mutex
	var masters []string
	must(t, probe.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		mu.Lock() // the masters are asked at once
		masters = append(masters, m.Options().Addr)
		mu.Unlock()
		return nil
	}))
	mv := &slotMove{t: t, slot: slot, src: src, masters: masters}
	for _, m := range masters {
		if m != src {
			mv.dst = m
			break
		}
	}
	mv.srcC, mv.dstC = mv.node(src), mv.node(mv.dst)
	return mv
}

// onward is the next move of the same slot: from where this one took it to
// another master.
func (mv *slotMove) onward() *slotMove {
	next := &slotMove{t: mv.t, slot: mv.slot, src: mv.dst, srcC: mv.dstC, masters: mv.masters}
	for _, m := range mv.masters {
		if m != next.src && m != mv.src {
			next.dst = m
			break
		}
	}
	if next.dst == "" {
		next.dst = mv.src
	}
	next.dstC = next.node(next.dst)
	return next
}

func (mv *slotMove) node(addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	mv.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (mv *slotMove) run(want int) {
	t := mv.t
	ctx := context.Background()
	srcID, err := mv.srcC.Do(ctx, "CLUSTER", "MYID").Text()
	must(t, err)
	dstID, err := mv.dstC.Do(ctx, "CLUSTER", "MYID").Text()
	must(t, err)
	start := time.Now()
	must(t, mv.dstC.Do(ctx, "CLUSTER", "SETSLOT", mv.slot, "IMPORTING", srcID).Err())
	must(t, mv.srcC.Do(ctx, "CLUSTER", "SETSLOT", mv.slot, "MIGRATING", dstID).Err())
	keys, err := mv.srcC.Do(ctx, "CLUSTER", "GETKEYSINSLOT", mv.slot, 100).StringSlice()
	must(t, err)
	if len(keys) != want {
		t.Fatalf("keys in the lock's slot: %v, want %d", keys, want)
	}
	host, port, _ := strings.Cut(mv.dst, ":")
	args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	must(t, mv.srcC.Do(ctx, args...).Err())
	for _, m := range append([]string{mv.dst, mv.src}, mv.masters...) {
		must(t, mv.node(m).Do(ctx, "CLUSTER", "SETSLOT", mv.slot, "NODE", dstID).Err())
	}
	t.Logf("slot %d moved from %s to %s in %v", mv.slot, mv.src, mv.dst, time.Since(start).Round(time.Millisecond))
}
