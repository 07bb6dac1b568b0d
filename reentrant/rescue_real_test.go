package reentrant_test

import (
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/redis/go-redis/v9"
)

// No rescues without faults: every release's wake-up reaches a waiter of
// each client, and no waiter finds the lock released by its fallback timer
// (the hold's lease, 30 s by default) rather than by the wake-up. Workers
// take one lock in turn on go-redis's default client, each repetition on a
// fresh lock and fresh clients.
func TestRealNoRescuesWithoutFaults(t *testing.T) {
	const workers, rep = 8, 200 * time.Millisecond
	for _, shape := range []struct {
		name    string
		reps    int
		clients int
	}{
		{"handles per goroutine, one client", 10, 1},
		{"a handle per client", 5, workers},
	} {
		t.Run(shape.name, func(t *testing.T) {
			redistest.NoRescues(t, shape.name, shape.reps, rep, func(t *testing.T, r *redistest.Rescues) []redistest.Turn {
				clients := make([]redis.UniversalClient, shape.clients)
				for j := range clients {
					clients[j] = redistest.DefaultClient(t, redistest.Single)
				}
				name := redistest.Name(t)
				return redistest.LockTurns(t, workers, clients, func(c redis.UniversalClient) (redistest.Locker, error) {
					return reentrant.New(redistest.Owner(c), name, fairlock.WithObserver(r))
				})
			})
		})
	}
}
