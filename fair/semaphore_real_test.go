package fair_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A semaphore of 3 permits, 16 handles over 4 clients asking for 1 or 2
// permits: the permits its holders believe they hold never add up to more
// than 3, and every request is served.
func TestRealSemaphoreNeverOverGrants(t *testing.T) {
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			redistest.NoLeaks(t)
			clients := redistest.Clients(t, kind, 4)
			name := redistest.Name(t)
			ctx := context.Background()
			const k, handles, rounds = 3, 16, 40
			var inUse, most, served atomic.Int64
			var wg sync.WaitGroup
			for i := 0; i < handles; i++ {
				s, err := fair.NewSemaphore(redistest.Owner(clients[i%4]), name, k, fair.WithLabel(fmt.Sprint(i)))
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for r := 0; r < rounds; r++ {
						n := 1 + rand.IntN(2)
						p, err := s.Acquire(ctx, n)
						if err != nil {
							t.Error(err)
							return
						}
						now := inUse.Add(int64(n))
						for old := most.Load(); now > old && !most.CompareAndSwap(old, now); old = most.Load() {
						}
						time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
						inUse.Add(-int64(n))
						if err := p.Release(ctx); err != nil {
							t.Error(err)
							return
						}
						served.Add(1)
					}
				}()
			}
			wg.Wait()
			if m := most.Load(); m > k {
				t.Fatalf("%d permits held at once, of %d", m, k)
			}
			if got := served.Load(); got != handles*rounds {
				t.Fatalf("%d of %d requests served", got, handles*rounds)
			}
			st, err := fair.InspectSemaphore(ctx, clients[0], name)
			if err != nil {
				t.Fatal(err)
			}
			if st.InUse != 0 || len(st.Queue) != 0 {
				t.Fatalf("left behind: %+v", st)
			}
			t.Logf("at most %d of %d permits in use; %d requests", most.Load(), k, served.Load())
		})
	}
}

// Waiters join one after another, alternating big and small requests: they
// are served in exactly that order.
func TestRealSemaphoreStrictJoinOrder(t *testing.T) {
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			redistest.NoLeaks(t)
			clients := redistest.Clients(t, kind, 4)
			name := redistest.Name(t)
			ctx := context.Background()
			first, err := fair.NewSemaphore(redistest.Owner(clients[0]), name, 3)
			if err != nil {
				t.Fatal(err)
			}
			all, err := first.Acquire(ctx, 3)
			if err != nil {
				t.Fatal(err)
			}
			const n = 10
			var mu sync.Mutex
			var order []int
			var wg sync.WaitGroup
			for i := 0; i < n; i++ {
				s, err := fair.NewSemaphore(redistest.Owner(clients[i%4]), name, 3)
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					p, err := s.Acquire(ctx, 3-i%2*2) // 3, 1, 3, 1, ...
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					if err := p.Release(ctx); err != nil {
						t.Error(err)
					}
				}()
				waitUntil(t, fmt.Sprintf("waiter %d is queued", i), func() bool {
					st, err := fair.InspectSemaphore(ctx, clients[0], name)
					if err != nil {
						t.Fatal(err)
					}
					return len(st.Queue) == i+1
				})
			}
			if err := all.Release(ctx); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if len(order) != n {
				t.Fatalf("%d of %d waiters served", len(order), n)
			}
			for i, got := range order {
				if got != i {
					t.Fatalf("served in order %v, want join order", order)
				}
			}
		})
	}
}

func BenchmarkUncontendedSemaphoreAcquireRelease(b *testing.B) {
	s, err := fair.NewSemaphore(redistest.Owner(redistest.Real(b)), redistest.Name(b), 4)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		p, err := s.Acquire(ctx, 1)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// A note that serves permits can be lost with the connection that carries
// it. The readers it served find out once they reconnect: the gate's holder
// by its next attempt; a reader queued behind it finds its entry gone from
// the gate's queue and asks the semaphore (mode "check"), or, if the gate
// was given on first and is free, takes the gate and finds its permits
// there. Either way each gets the very hold it was served, no new one.
func TestRealServedNoteLost(t *testing.T) {
	redistest.NoLeaks(t)
	admin := redistest.Real(t)
	name := redistest.Name(t)
	ctx := context.Background()
	cut := &redistest.Partition{}
	checks := &argCounter{arg: "check"}
	readers, readersName := redistest.Named(t, admin)
	readers.AddHook(cut)
	readers.AddHook(checks)

	w, err := fair.NewRWMutex(redistest.Owner(admin), name)
	if err != nil {
		t.Fatal(err)
	}
	ok(t, w.Lock(ctx), "Lock")
	const n = 3
	rs := make([]*fair.RWMutex, n)
	reading := make([]<-chan error, n)
	for i := range rs {
		if rs[i], err = fair.NewRWMutex(redistest.Owner(readers), name); err != nil {
			t.Fatal(err)
		}
		r := rs[i]
		reading[i] = async(func() error { return r.RLock(ctx) })
		waitUntil(t, fmt.Sprintf("reader %d is queued", i), func() bool {
			st, err := fair.InspectRWMutex(ctx, admin, name)
			return err == nil && len(st.Queue) == i+1
		})
	}

	// A waiter is queued before its subscription is confirmed, and tries
	// once more when it is: only once all of them sleep may the cut come, or
	// that try fails with it.
	redistest.Quiet(t, "the readers are queued, subscribed and asleep", func() bool {
		return redistest.Asleep() == n
	})

	// The readers' client loses its connections, and cannot dial, while the
	// writer's Unlock serves them: the note is published to nobody.
	cut.On.Store(true)
	killed, err := redistest.KillPubSub(ctx, admin, readersName)
	if err != nil {
		t.Fatal(err)
	}
	if killed == 0 {
		t.Fatal("the readers have no pub/sub connection to cut")
	}
	ok(t, w.Unlock(ctx), "Unlock")
	st, err := fair.InspectRWMutex(ctx, admin, name)
	if err != nil {
		t.Fatal(err)
	}
	if st.InUse != n || len(st.Queue) != 1 { // the first reader still holds the gate
		t.Fatalf("after the Unlock that served the readers: %+v", st)
	}
	served := map[int64]bool{}
	for _, h := range st.Holders {
		served[h.Token] = true
	}
	cut.On.Store(false)
	for i, c := range reading {
		done(t, c, fmt.Sprintf("reader %d, after reconnecting", i))
	}
	t.Logf("%d queued readers asked the semaphore (mode check)", checks.n.Load())
	st, err = fair.InspectRWMutex(ctx, admin, name)
	if err != nil {
		t.Fatal(err)
	}
	if st.InUse != n {
		t.Fatalf("after reconnecting: %+v", st)
	}
	for i, r := range rs {
		if !served[r.Token()] {
			t.Fatalf("reader %d holds token %d, not one of the holds it was served: %+v", i, r.Token(), st.Holders)
		}
		ok(t, r.RUnlock(ctx), "RUnlock")
	}
}

// argCounter is a go-redis hook counting the commands with a given argument.
type argCounter struct {
	arg string
	n   atomic.Int64
}

func (c *argCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *argCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if slices.Contains(cmd.Args(), any(c.arg)) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *argCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// BenchmarkRWMutexReaderRun times a writer's turn ending: from the writer's
// Unlock to the moment the last of 8 readers queued behind it holds the read
// lock (ns/op is per run of readers).
func BenchmarkRWMutexReaderRun(b *testing.B) {
	const readers = 8
	admin := redistest.Real(b)
	clients := redistest.Clients(b, redistest.Single, 4)
	name := redistest.Name(b)
	ctx := context.Background()
	w, err := fair.NewRWMutex(redistest.Owner(admin), name)
	if err != nil {
		b.Fatal(err)
	}
	rs := make([]*fair.RWMutex, readers)
	for i := range rs {
		if rs[i], err = fair.NewRWMutex(redistest.Owner(clients[i%4]), name); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		b.StopTimer()
		if err := w.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		for _, r := range rs {
			wg.Go(func() {
				if err := r.RLock(ctx); err != nil {
					b.Error(err)
				}
			})
		}
		for {
			st, err := fair.InspectRWMutex(ctx, admin, name)
			if err != nil {
				b.Fatal(err)
			}
			if len(st.Queue) == readers {
				break
			}
			time.Sleep(time.Millisecond)
		}
		b.StartTimer()
		if err := w.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		wg.Wait()
		b.StopTimer()
		for _, r := range rs {
			if err := r.RUnlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
}
