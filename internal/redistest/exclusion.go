package redistest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Locker is what MutualExclusion needs of a lock handle.
type Locker interface {
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
	Token() int64
}

// MutualExclusion runs workers goroutines, each with its own handle made by
// newHandle on one of clients in turn, for total acquisitions in all, each
// incrementing a plain counter inside the lock. It fails the test if two
// holders overlap, an increment is lost, or a holder's fencing token is not
// above the previous holder's.
func MutualExclusion(t *testing.T, clients []redis.UniversalClient, workers, total int,
	newHandle func(redis.UniversalClient) (Locker, error)) {
	t.Helper()
	var (
		counter int   // plain: only the lock protects it
		last    int64 // the previous holder's token, written only inside the lock
		inside  atomic.Int32
		next    atomic.Int64
		wg      sync.WaitGroup
	)
	for w := 0; w < workers; w++ {
		m, err := newHandle(clients[w%len(clients)])
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for next.Add(1) <= int64(total) {
				if err := m.Lock(ctx); err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					t.Error("two holders inside the lock at once")
				}
				counter++
				if tok := m.Token(); tok <= last {
					t.Errorf("token %d not above the previous holder's %d: tokens must grow in acquisition order", tok, last)
				} else {
					last = tok
				}
				inside.Add(-1)
				if err := m.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if counter != total {
		t.Fatalf("counter = %d after %d locked increments: an update was lost", counter, total)
	}
}
