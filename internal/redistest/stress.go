package redistest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock/observe"
	"github.com/redis/go-redis/v9"
)

// The no-rescue stress: workers take one lock in turn as deployments do
// (a worker pool with a handle per goroutine on one client, one handle
// shared by goroutines, a handle per client, fresh processes), with go-redis's
// and fairlock's default options, and the run counts the rescues
// (observe.Rescued): in a run without faults there must be none, and no
// gap between two acquisitions as long as a fallback (a heartbeat is a
// third of the default 10 s wait timeout).

// Rescues is an observer that counts rescues (observe.Rescued).
type Rescues struct {
	observe.Nop
	n atomic.Int64
}

// ObserveQueue counts e if it is a rescue.
func (r *Rescues) ObserveQueue(e observe.QueueEvent) {
	if e.Kind == observe.Rescued {
		r.n.Add(1)
	}
}

// Count returns the rescues counted so far.
func (r *Rescues) Count() int { return int(r.n.Load()) }

// Turn is one worker's turn: it takes the lock (or its permits) and returns
// how to give it back.
type Turn func(ctx context.Context) (release func(context.Context) error, err error)

// LockTurns makes n turns of Lock and Unlock, each with a handle of its own
// that newLock makes on clients in turn.
func LockTurns(t testing.TB, n int, clients []redis.UniversalClient, newLock func(redis.UniversalClient) (Locker, error)) []Turn {
	t.Helper()
	turns := make([]Turn, n)
	for i := range turns {
		m, err := newLock(clients[i%len(clients)])
		if err != nil {
			t.Fatal(err)
		}
		turns[i] = func(ctx context.Context) (func(context.Context) error, error) { return m.Unlock, m.Lock(ctx) }
	}
	return turns
}

// NoRescues runs reps repetitions of TakeTurns for d, each a subtest with
// the turns that makeTurns makes (on a fresh lock and fresh clients, with r
// as their observer), logs what they saw, and fails on any rescue. It
// checks that no goroutine outlives the repetitions.
func NoRescues(t *testing.T, shape string, reps int, d time.Duration, makeTurns func(t *testing.T, r *Rescues) []Turn) {
	t.Helper()
	NoLeaks(t)
	var rescues Rescues
	var all Turns
	for i := range reps {
		t.Run(fmt.Sprint(i), func(t *testing.T) { all.Add(TakeTurns(t, d, makeTurns(t, &rescues))) })
	}
	t.Logf("%s: %d reps, %v, %d rescues", shape, reps, all, rescues.Count())
	if n := rescues.Count(); n != 0 {
		t.Errorf("%s: %d rescues in a run without faults: a waiter learned of its turn from a fallback, not its message", shape, n)
	}
}

// Turns is what one run of TakeTurns saw.
type Turns struct {
	Acquisitions int
	// LongestGap is the longest time between two acquisitions returning
	// (from the run's start for the first).
	LongestGap time.Duration
}

// Add adds o's figures to s.
func (s *Turns) Add(o Turns) {
	s.Acquisitions += o.Acquisitions
	s.LongestGap = max(s.LongestGap, o.LongestGap)
}

func (s Turns) String() string {
	return fmt.Sprintf("%d acquisitions, longest gap %v", s.Acquisitions, s.LongestGap.Round(time.Microsecond))
}

// GapBound is the longest gap between two acquisitions TakeTurns allows: far
// above a hand-off's milliseconds on a loaded 2-core machine under -race,
// far below a heartbeat (3.3 s with the default wait timeout), the delay
// of a lost message.
const GapBound = time.Second

// cutOff is how long after the run a call still waiting is cut off by its
// context: past a heartbeat with the default wait timeout (3.3 s), so that
// a lost message shows as the rescue and the gap it causes.
const cutOff = 5 * time.Second

// TakeTurns runs one worker per turns[i], each taking its turn again and
// again for d, then giving it back. A gap between two acquisitions longer
// than GapBound fails the test, as does a call still waiting cutOff after d.
func TakeTurns(t testing.TB, d time.Duration, turns []Turn) Turns {
	t.Helper()
	start := time.Now()
	stop := start.Add(d)
	ctx, cancel := context.WithDeadline(context.Background(), stop.Add(cutOff))
	defer cancel()
	var mu sync.Mutex
	last, s := start, Turns{}
	var wg sync.WaitGroup
	errs := make(chan error, len(turns))
	for _, turn := range turns {
		wg.Go(func() {
			for time.Now().Before(stop) {
				release, err := turn(ctx)
				if err != nil {
					errs <- fmt.Errorf("after %v: %w", time.Since(start).Round(time.Millisecond), err)
					return
				}
				mu.Lock()
				now := time.Now()
				s.Acquisitions++
				s.LongestGap = max(s.LongestGap, now.Sub(last))
				last = now
				mu.Unlock()
				if err := release(context.Background()); err != nil {
					errs <- fmt.Errorf("releasing: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a worker stopped: %v", err)
	}
	if s.LongestGap > GapBound {
		t.Errorf("%v between two acquisitions: more than %v (a hand-off was lost?)", s.LongestGap, GapBound)
	}
	return s
}
