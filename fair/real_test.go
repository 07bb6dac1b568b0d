package fair_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
)

var kinds = []struct {
	name    string
	cluster bool
}{{"single", false}, {"cluster", true}}

// Twelve handles join one after another, each only once Inspect shows the
// previous one queued: they must get the lock in exactly that order.
func TestRealStrictJoinOrder(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			redistest.NoLeaks(t)
			clients := redistest.Clients(t, kind.cluster, 4)
			name := redistest.Name(t)
			ctx := context.Background()
			first, err := fair.New(clients[0], name)
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
				m, err := fair.New(clients[i%4], name, fair.WithLabel(fmt.Sprint(i)))
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
		t.Run(kind.name, func(t *testing.T) {
			redistest.NoLeaks(t)
			name := redistest.Name(t)
			redistest.MutualExclusion(t, redistest.Clients(t, kind.cluster, 4), 16, 2000,
				func(c redis.UniversalClient) (redistest.Locker, error) { return fair.New(c, name) })
		})
	}
}

func BenchmarkUncontendedLockUnlock(b *testing.B) {
	m, err := fair.New(redistest.Real(b), redistest.Name(b))
	if err != nil {
		b.Fatal(err)
	}
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

// Holds that end by their lease, with nobody unlocking (issue 11's
// scenario: six handles take turns with TryLock(wait 10 s, lease 500 ms),
// joining 100 ms apart; and the same with holders whose process died): the
// next waiter in line must take over right after each lease, so that the
// sixth holds the lock about 2.5 s after the first, not a heartbeat later
// per turn.
func TestRealHoldsEndingByLeasePassTheLockOn(t *testing.T) {
	redistest.HoldsEndingByLease(t, true, func(c redis.UniversalClient, name string, i int, lease time.Duration) (redistest.TurnLocker, error) {
		opts := []fair.Option{fair.WithLabel(fmt.Sprint(i))}
		if lease > 0 {
			opts = append(opts, fair.WithLease(lease))
		}
		return fair.New(c, name, opts...)
	})
}
