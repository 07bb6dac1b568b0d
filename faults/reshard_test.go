package faults

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

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
	slot, err := probe.ClusterKeySlot(ctx, key).Result()
	must(t, err)
	src, _ := shardOf(t, probe, key)
	var dst string
	var mu sync.Mutex
	var masters []string
	must(t, probe.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		mu.Lock() // the masters are asked at once
		masters = append(masters, m.Options().Addr)
		mu.Unlock()
		return nil
	}))
	for _, m := range masters {
		if m != src {
			dst = m
			break
		}
	}
	node := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	srcC, dstC := node(src), node(dst)
	srcID, err := srcC.Do(ctx, "CLUSTER", "MYID").Text()
	must(t, err)
	dstID, err := dstC.Do(ctx, "CLUSTER", "MYID").Text()
	must(t, err)

	const wait = 3 * time.Second // heartbeat every second
	a, err := fair.New(newClient(), name, fair.WithLease(failLease), fair.WithLabel("a"))
	must(t, err)
	must(t, a.Lock(ctx))
	tokA := a.Token()
	type waiter struct {
		m    *fair.Mutex
		done <-chan result
	}
	var ws []waiter
	for i, label := range []string{"b", "c"} {
		m, err := fair.New(newClient(), name, fair.WithWaitTimeout(wait), fair.WithLabel(label))
		must(t, err)
		ws = append(ws, waiter{m, acquired(m.Lock, 30*time.Second)})
		eventually(t, 5*time.Second, label+" is queued", func() bool { return len(queueOf(t, probe, name)) == i+1 })
	}

	// Move the slot, keys and all.
	start := time.Now()
	must(t, dstC.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	must(t, srcC.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	keys, err := srcC.Do(ctx, "CLUSTER", "GETKEYSINSLOT", slot, 100).StringSlice()
	must(t, err)
	if len(keys) != 3 {
		t.Fatalf("keys in the lock's slot: %v, want the hold, the queue and the deadlines", keys)
	}
	host, port, _ := strings.Cut(dst, ":")
	args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	must(t, srcC.Do(ctx, args...).Err())
	for _, m := range append([]string{dst, src}, masters...) {
		must(t, node(m).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
	}
	t.Logf("slot %d moved from %s to %s in %v", slot, src, dst, time.Since(start).Round(time.Millisecond))

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
			case <-ws[i+1].done:
				t.Fatalf("waiter %d was served before waiter %d unlocked", i+1, i)
			default:
			}
		}
		last = w.m.Token()
		unlocked = time.Now()
		must(t, w.m.Unlock(ctx))
	}
}
