package fair_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
)

// A semaphore of 3 permits, 16 handles over 4 clients asking for 1 or 2
// permits: the permits its holders believe they hold never add up to more
// than 3, and every request is served.
func TestRealSemaphoreNeverOverGrants(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			redistest.NoLeaks(t)
			clients := redistest.Clients(t, kind.cluster, 4)
			name := redistest.Name(t)
			ctx := context.Background()
			const k, handles, rounds = 3, 16, 40
			var inUse, most, served atomic.Int64
			var wg sync.WaitGroup
			for i := 0; i < handles; i++ {
				s, err := fair.NewSemaphore(clients[i%4], name, k, fair.WithLabel(fmt.Sprint(i)))
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
		t.Run(kind.name, func(t *testing.T) {
			redistest.NoLeaks(t)
			clients := redistest.Clients(t, kind.cluster, 4)
			name := redistest.Name(t)
			ctx := context.Background()
			first, err := fair.NewSemaphore(clients[0], name, 3)
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
				s, err := fair.NewSemaphore(clients[i%4], name, 3)
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
	s, err := fair.NewSemaphore(redistest.Real(b), redistest.Name(b), 4)
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
