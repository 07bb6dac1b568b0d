package reentrant_test

import (
	"fmt"
	"testing"
	"time"

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
			redistest.NoLeaks(t)
			var rescues redistest.Rescues
			var all redistest.Turns
			for i := range shape.reps {
				t.Run(fmt.Sprint(i), func(t *testing.T) {
					clients := make([]redis.UniversalClient, shape.clients)
					for j := range clients {
						clients[j] = redistest.DefaultClient(t, redistest.Single)
					}
					name := redistest.Name(t)
					all.Add(redistest.TakeTurns(t, rep, redistest.LockTurns(t, workers, clients,
						func(c redis.UniversalClient) (redistest.Locker, error) {
							return reentrant.New(c, name, reentrant.WithObserver(&rescues))
						})))
				})
			}
			t.Logf("%s: %d reps, %v, %d rescues", shape.name, shape.reps, all, rescues.Count())
			if n := rescues.Count(); n != 0 {
				t.Errorf("%d rescues in a run without faults: a waiter found the lock released by its timer, not its wake-up", n)
			}
		})
	}
}
