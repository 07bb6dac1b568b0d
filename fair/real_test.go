package fair_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/fairlock/fairlock/observe"
	"github.com/redis/go-redis/v9"
)

// kinds are the deployments every real test runs on.
var kinds = redistest.Deployments

// Twelve handles join one after another, each only once Inspect shows the
// previous one queued: they must get the lock in exactly that order.
func TestRealStrictJoinOrder(t *testing.T) {
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			redistest.NoLeaks(t)
			clients := redistest.Clients(t, kind, 4)
			name := redistest.Name(t)
			ctx := context.Background()
			first, err := fair.New(redistest.Owner(clients[0]), name)
			if err != nil {
				t.Fatal(err)
			}
			if err := first.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			const n = 12
			var mu sync.Mutex
			var order []int
			var wg sync.WaitGroup
			for i := 0; i < n; i++ {
				m, err := fair.New(redistest.Owner(clients[i%4]), name, fair.WithLabel(fmt.Sprint(i)))
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := m.Lock(ctx); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					if err := m.Unlock(ctx); err != nil {
						t.Error(err)
					}
				}()
				waitUntil(t, fmt.Sprintf("waiter %d is queued", i), func() bool {
					st, err := fair.Inspect(ctx, clients[0], name)
					if err != nil {
						t.Fatal(err)
					}
					return len(st.Queue) == i+1
				})
			}
			if err := first.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			for i, got := range order {
				if got != i {
					t.Fatalf("acquisition order %v, want 0..%d in join order", order, n-1)
				}
			}
			if len(order) != n {
				t.Fatalf("%d of %d waiters got the lock", len(order), n)
			}
		})
	}
}

func TestRealMutualExclusion(t *testing.T) {
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			redistest.NoLeaks(t)
			name := redistest.Name(t)
			redistest.MutualExclusion(t, redistest.Clients(t, kind, 4), 16, 2000,
				func(c redis.UniversalClient) (redistest.Locker, error) { return fair.New(redistest.Owner(c), name) })
		})
	}
}

// Goroutines that share a handle exclude each other, and each of their
// Lock calls takes its turn in the queue with everyone else's: 16
// goroutines, four to each of four handles (one per client), under -race;
// then a handle of another client, joining while the four goroutines of one
// shared handle take the lock in turn, waits for at most the four turns
// queued before it (plus one that may start as it joins), not for as many
// as the goroutines can take.
func TestRealGoroutinesSharingAHandleTakeTurnsWithEveryone(t *testing.T) {
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			redistest.NoLeaks(t)
			clients := redistest.Clients(t, kind, 4)
			name := redistest.Name(t)
			shared := map[redis.UniversalClient]*fair.Mutex{}
			redistest.MutualExclusion(t, clients, 16, 1000,
				func(c redis.UniversalClient) (redistest.Locker, error) {
					if m := shared[c]; m != nil {
						return m, nil
					}
					m, err := fair.New(redistest.Owner(c), name)
					shared[c] = m
					return m, err
				})

			ctx := context.Background()
			busy, other := shared[clients[0]], shared[clients[1]]
			var turns atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						if err := busy.Lock(ctx); err != nil {
							t.Error(err)
							return
						}
						turns.Add(1)
						time.Sleep(time.Millisecond)
						if err := busy.Unlock(ctx); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			for range 5 {
				before := turns.Load()
				if err := other.Lock(ctx); err != nil {
					t.Fatal(err)
				}
				if waited := turns.Load() - before; waited > 5 {
					t.Errorf("a handle of another client waited through %d turns of four goroutines sharing a handle; the queue allows at most 5", waited)
				}
				if err := other.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				time.Sleep(2 * time.Millisecond)
			}
			close(stop)
			wg.Wait()
		})
	}
}

func BenchmarkUncontendedLockUnlock(b *testing.B) { benchUncontended(b) }

// BenchmarkUncontendedLockUnlockObserved is the same with an observer of
// every capability that does nothing (observe.Nop): the hook's own cost,
// beside the no-observer figure above.
func BenchmarkUncontendedLockUnlockObserved(b *testing.B) {
	benchUncontended(b, fairlock.WithObserver(observe.Nop{}))
}

// BenchmarkUncontendedLockUnlockWithDeadline is the pair with a ctx that
// has a deadline, as a request's has: one ctx for the whole run, so that
// what it reports is the library's own work. On a client with go-redis's
// default options (ContextTimeoutEnabled false) each call must still end
// by that deadline, which go-redis would not do by itself; the figures
// beside BenchmarkUncontendedLockUnlock's (context.Background) say what that
// costs. The goal is nothing: the same allocations, no goroutine.
func BenchmarkUncontendedLockUnlockWithDeadline(b *testing.B) {
	for _, bounds := range []bool{false, true} {
		b.Run(map[bool]string{false: "default-options", true: "ContextTimeoutEnabled"}[bounds], func(b *testing.B) {
			c := redis.NewClient(&redis.Options{Addr: redistest.Addrs(b, redistest.Single)[0], ContextTimeoutEnabled: bounds})
			defer func() { _ = c.Close() }()
			m, err := fair.New(redistest.Owner(c), redistest.Name(b))
			if err != nil {
				b.Fatal(err)
			}
			// A request's deadline: sooner than go-redis's own bound of a
			// call with its default options (about 2 minutes), so the
			// library must keep it itself.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			b.ReportAllocs()
			before := goroutinesCreated(b)
			for b.Loop() {
				if err := m.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := m.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(goroutinesCreated(b)-before)/float64(b.N), "goroutines/op")
		})
	}
}

// BenchmarkUncontendedLockUnlockWithPresence is the pair on an owner made
// as fairlock.NewOwner makes it by default, with a presence, beside one
// made fairlock.WithoutPresence: the goal is nothing more than without it
// (the owner's subscription is made once, before its first acquisition). It
// reports the script calls per pair beside the allocations.
func BenchmarkUncontendedLockUnlockWithPresence(b *testing.B) {
	for _, presence := range []bool{false, true} {
		b.Run(map[bool]string{false: "without", true: "with"}[presence], func(b *testing.B) {
			c := redis.NewClient(&redis.Options{Addr: redistest.Addrs(b, redistest.Single)[0]})
			defer func() { _ = c.Close() }()
			var opts []fairlock.OwnerOption
			if !presence {
				opts = append(opts, fairlock.WithoutPresence())
			}
			owner, err := fairlock.NewOwner(c, opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = owner.Close(context.Background()) }()
			if owner.KeepsPresence() != presence {
				b.Fatalf("KeepsPresence() = %v, want %v", owner.KeepsPresence(), presence)
			}
			m, err := fair.New(owner, redistest.Name(b))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if err := m.Lock(ctx); err != nil { // the presence's subscription, once
				b.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			counter := &redistest.ScriptCounter{}
			c.AddHook(counter)
			pairs(b, m)
			b.ReportMetric(float64(counter.Scripts.Load())/float64(b.N), "calls/op")
		})
	}
}

func benchUncontended(b *testing.B, opts ...fair.MutexOption) {
	m, err := fair.New(redistest.Owner(redistest.Real(b)), redistest.Name(b), opts...)
	if err != nil {
		b.Fatal(err)
	}
	pairs(b, m)
}

// pairs times m's Lock and Unlock on context.Background, with allocations.
func pairs(b *testing.B, m fairlock.MutexHandle) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandOff times one hand-off on a quiet machine: from the holder's
// Unlock being called to the Lock of the one waiter queued behind it (on a
// client of its own, asleep) returning. ns/op is the mean. The metrics are
// in units of the median PING round trip, sampled once per hand-off (this
// machine's speed drifts): p50-RTT and p99-RTT for the hand-off, unlock-RTT
// for the releaser's Unlock call (median), and pubsub-RTT (median) for the
// floor of any wake-up by pub/sub, a PUBLISH sent on one client until
// go-redis delivers it to a subscriber on another, also sampled once per
// hand-off. (bench/'s contended scenario measures hand-offs among 8 busy
// clients instead.)
func BenchmarkHandOff(b *testing.B) {
	clients := redistest.Clients(b, redistest.Single, 2)
	name := redistest.Name(b)
	ctx := context.Background()
	floor := newPubSubProbe(b, clients[0], clients[1])
	handles := make([]*fair.Mutex, 2)
	for i, c := range clients {
		m, err := fair.New(redistest.Owner(c), name)
		if err != nil {
			b.Fatal(err)
		}
		handles[i] = m
	}
	if err := handles[0].Lock(ctx); err != nil {
		b.Fatal(err)
	}
	type result struct {
		at  time.Time
		err error
	}
	var took, unlocks, pings, pubsubs []time.Duration
	holder := 0
	for b.Loop() {
		b.StopTimer()
		ping, pubsub := floor.sample(b)
		pings, pubsubs = append(pings, ping), append(pubsubs, pubsub)
		waiter := handles[1-holder]
		done := make(chan result, 1)
		go func() {
			err := waiter.Lock(ctx)
			done <- result{time.Now(), err}
		}()
		redistest.Quiet(b, "the waiter is queued and asleep", func() bool {
			st, err := fair.Inspect(ctx, clients[0], name)
			return err == nil && len(st.Queue) == 1 && redistest.Asleep() == 1
		})
		b.StartTimer()
		start := time.Now()
		if err := handles[holder].Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		unlocks = append(unlocks, time.Since(start))
		r := <-done
		if r.err != nil {
			b.Fatal(r.err)
		}
		took = append(took, r.at.Sub(start))
		holder = 1 - holder
	}
	b.StopTimer()
	if err := handles[holder].Unlock(ctx); err != nil {
		b.Fatal(err)
	}
	floor.close()
	rtt := float64(median(pings))
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2])/rtt, "p50-RTT")
	b.ReportMetric(float64(took[len(took)*99/100])/rtt, "p99-RTT")
	b.ReportMetric(float64(median(unlocks))/rtt, "unlock-RTT")
	b.ReportMetric(float64(median(pubsubs))/rtt, "pubsub-RTT")
}

// pubSubProbe samples the two floors a hand-off is measured against: a PING
// round trip, and a PUBLISH on one client until go-redis hands the message
// to a subscriber on another.
type pubSubProbe struct {
	from    redis.UniversalClient
	ps      *redis.PubSub
	channel string
	got     chan time.Time
}

func newPubSubProbe(b *testing.B, from, to redis.UniversalClient) *pubSubProbe {
	ctx := context.Background()
	p := &pubSubProbe{from: from, channel: redistest.Name(b) + ":probe", got: make(chan time.Time, 1)}
	p.ps = to.Subscribe(ctx, p.channel)
	if _, err := p.ps.Receive(ctx); err != nil {
		b.Fatal(err)
	}
	go func() {
		for {
			if _, err := p.ps.ReceiveMessage(ctx); err != nil {
				return // closed
			}
			p.got <- time.Now()
		}
	}()
	return p
}

func (p *pubSubProbe) sample(b *testing.B) (ping, pubsub time.Duration) {
	ctx := context.Background()
	t := time.Now()
	if err := p.from.Ping(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	ping = time.Since(t)
	t = time.Now()
	if err := p.from.Publish(ctx, p.channel, "x").Err(); err != nil {
		b.Fatal(err)
	}
	return ping, (<-p.got).Sub(t)
}

func (p *pubSubProbe) close() { _ = p.ps.Close() }

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// Holds that end by their lease, with nobody unlocking (issue 11's
// scenario: six handles take turns with TryLock(wait 10 s, lease 500 ms),
// joining 100 ms apart; and the same with holders whose process died): the
// next waiter in line must take over right after each lease, so that the
// sixth holds the lock about 2.5 s after the first, not a heartbeat later
// per turn.
func TestRealHoldsEndingByLeasePassTheLockOn(t *testing.T) {
	redistest.HoldsEndingByLease(t, true, func(c redis.UniversalClient, name string, i int, lease time.Duration) (redistest.TurnLocker, error) {
		opts := []fair.MutexOption{fair.WithLabel(fmt.Sprint(i))}
		if lease > 0 {
			opts = append(opts, fairlock.WithLease(lease))
		}
		return fair.New(redistest.Owner(c), name, opts...)
	})
}

// On a cluster of 3 masters, lock names spread over every master, and one
// client's waiters share one sharded pub/sub connection per master in use,
// subscribed on the master that owns each lock's slot (SSUBSCRIBE), not one
// connection per lock. Every waiter is woken by its release there.
func TestRealCluster3SpreadsLocksAndSharesPubSub(t *testing.T) {
	redistest.NoLeaks(t)
	holders := redistest.Client(t, redistest.Cluster3).(*redis.ClusterClient)
	// The waiters' client is named, to count its connections alone: other
	// test binaries may share the cluster.
	opts := *holders.Options()
	opts.ClientName = fmt.Sprintf("waiters-%d", time.Now().UnixNano())
	waiters := redis.NewClusterClient(&opts)
	t.Cleanup(func() { _ = waiters.Close() })
	// Cancelled when the test ends, so a failure leaves no waiter behind.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	// Masters by address, and the slots each serves.
	shards, err := holders.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	owner := map[int64]string{} // first slot of each range -> master
	type span struct{ from, to int64 }
	var spans []span
	var masters []string
	for _, sh := range shards {
		for _, n := range sh.Nodes {
			if n.Role != "master" {
				continue
			}
			addr := fmt.Sprintf("%s:%d", n.IP, n.Port)
			masters = append(masters, addr)
			for _, r := range sh.Slots {
				spans = append(spans, span{r.Start, r.End})
				owner[r.Start] = addr
			}
		}
	}
	if len(masters) != 3 {
		t.Fatalf("%d masters: %v", len(masters), masters)
	}
	masterOf := func(slot int64) string {
		for _, s := range spans {
			if slot >= s.from && slot <= s.to {
				return owner[s.from]
			}
		}
		return ""
	}
	// Lock names until every master serves two.
	base := redistest.Name(t)
	perMaster := map[string][]string{}
	var names []string
	for i := 0; len(names) < 100; i++ {
		name := fmt.Sprintf("%s-%d", base, i)
		slot, err := holders.ClusterKeySlot(ctx, "fairlock:f:{"+name+"}").Result()
		if err != nil {
			t.Fatal(err)
		}
		m := masterOf(slot)
		if len(perMaster[m]) < 2 {
			perMaster[m] = append(perMaster[m], name)
			names = append(names, name)
		}
		if len(names) == 6 {
			break
		}
	}
	if len(perMaster) != 3 || len(names) != 6 {
		t.Fatalf("names by master: %v", perMaster)
	}

	var held []*fair.Mutex
	var waiting []<-chan result
	var ws []*fair.Mutex
	for _, name := range names {
		h, err := fair.New(redistest.Owner(holders), name)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		held = append(held, h)
		w, err := fair.New(redistest.Owner(waiters), name)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
		waiting = append(waiting, tryLockAsync(w, ctx, time.Minute, 0))
	}
	waitUntil(t, "every waiter is queued", func() bool {
		for _, name := range names {
			st, err := fair.Inspect(ctx, holders, name)
			if err != nil || len(st.Queue) != 1 {
				return false
			}
		}
		return true
	})

	st, err := fair.Inspect(ctx, holders, names[0])
	if err != nil {
		t.Fatal(err)
	}
	client := transport.ClientOf(st.Queue[0].Owner) // the waiters' owner's client id

	// Each master carries the waiters' client's inboxes of its own locks
	// (transport.Inbox), on one pub/sub connection: three in all, for six locks. A waiter joins the queue
	// before its subscription is confirmed, so this is awaited, not read once.
	var last error
	var conns atomic.Int32 // the masters are asked at once
	settled := func() bool {
		conns.Store(0)
		last = holders.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			chans, err := m.PubSubShardChannels(ctx, "fairlock:f:*").Result()
			if err != nil {
				return err
			}
			want := map[string]bool{}
			for _, name := range perMaster[m.Options().Addr] {
				want[transport.Inbox(transport.Channel(transport.FairBase(name)), client)] = true
			}
			got := map[string]bool{}
			for _, c := range chans {
				if strings.Contains(c, base) {
					got[c] = true
				}
			}
			if !maps.Equal(got, want) {
				return fmt.Errorf("master %s carries %v, want %v", m.Options().Addr, got, want)
			}
			list, err := m.ClientList(ctx).Result()
			if err != nil {
				return err
			}
			for _, line := range strings.Split(list, "\n") {
				if strings.Contains(line, "name="+opts.ClientName+" ") && !strings.Contains(line, " ssub=0 ") {
					conns.Add(1)
				}
			}
			return nil
		})
		if last == nil && conns.Load() != 3 {
			last = fmt.Errorf("%d sharded pub/sub connections for 6 locks on 3 masters, want 3", conns.Load())
		}
		return last == nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for !settled() {
		if time.Now().After(deadline) {
			t.Fatal(last)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("6 locks on 3 masters: %v; %d sharded pub/sub connections", perMaster, conns.Load())

	for i, h := range held {
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if r := await(t, waiting[i]); !r.ok || r.err != nil {
			t.Fatalf("waiter on %s: %v, %v", names[i], r.ok, r.err)
		}
		if err := ws[i].Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
