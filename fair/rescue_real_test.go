package fair_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// No rescues without faults (guarantee 9): workers take one lock in turn,
// in the shapes deployments give them, on go-redis's default client and
// fairlock's default options (so a lost message would cost a heartbeat,
// 3.3 s), each repetition on a fresh lock and fresh clients, as a fresh
// process finds them; every hand-off must reach its waiter by message.
// Before the fix of the first-contention stall, one to four repetitions in
// twenty of "handles per goroutine" lost their first hand-off, and nobody
// held the lock for 3.3 s; the shared handle, the cluster client, the
// semaphore and the fresh processes stalled too, now and then.
func TestRealNoRescuesWithoutFaults(t *testing.T) {
	const workers, rep = 8, 200 * time.Millisecond
	// mutexes makes a handle per worker, on the clients in turn.
	mutexes := func(rescues *redistest.Rescues, name string, clients ...redis.UniversalClient) []redistest.Turn {
		return redistest.LockTurns(t, workers, clients, func(c redis.UniversalClient) (redistest.Locker, error) {
			return fair.New(redistest.Owner(c), name, fairlock.WithObserver(rescues))
		})
	}
	shapes := []struct {
		name  string
		d     redistest.Deployment
		reps  int
		turns func(t *testing.T, rescues *redistest.Rescues, name string) []redistest.Turn
	}{
		{"handles per goroutine, one client", redistest.Single, 20, func(t *testing.T, r *redistest.Rescues, name string) []redistest.Turn {
			return mutexes(r, name, redistest.DefaultClient(t, redistest.Single))
		}},
		{"handles per goroutine, one cluster client", redistest.Cluster1, 5, func(t *testing.T, r *redistest.Rescues, name string) []redistest.Turn {
			return mutexes(r, name, redistest.DefaultClient(t, redistest.Cluster1))
		}},
		{"one handle shared by goroutines", redistest.Single, 5, func(t *testing.T, r *redistest.Rescues, name string) []redistest.Turn {
			m, err := fair.New(redistest.Owner(redistest.DefaultClient(t, redistest.Single)), name, fairlock.WithObserver(r))
			if err != nil {
				t.Fatal(err)
			}
			turns := make([]redistest.Turn, workers)
			for i := range turns {
				turns[i] = func(ctx context.Context) (func(context.Context) error, error) {
					ctx, err := m.LockContext(ctx)
					return func(context.Context) error { return m.Unlock(ctx) }, err
				}
			}
			return turns
		}},
		{"a handle per client", redistest.Single, 5, func(t *testing.T, r *redistest.Rescues, name string) []redistest.Turn {
			clients := make([]redis.UniversalClient, workers)
			for i := range clients {
				clients[i] = redistest.DefaultClient(t, redistest.Single)
			}
			return mutexes(r, name, clients...)
		}},
		{"semaphore of 2, handles per goroutine", redistest.Single, 10, func(t *testing.T, r *redistest.Rescues, name string) []redistest.Turn {
			client := redistest.DefaultClient(t, redistest.Single)
			turns := make([]redistest.Turn, workers)
			for i := range turns {
				s, err := fair.NewSemaphore(redistest.Owner(client), name, 2, fairlock.WithObserver(r))
				if err != nil {
					t.Fatal(err)
				}
				turns[i] = func(ctx context.Context) (func(context.Context) error, error) {
					p, err := s.Acquire(ctx, 1)
					if err != nil {
						return nil, err
					}
					return p.Release, nil
				}
			}
			return turns
		}},
		{"read-write lock, handles per goroutine", redistest.Single, 10, func(t *testing.T, r *redistest.Rescues, name string) []redistest.Turn {
			client := redistest.DefaultClient(t, redistest.Single)
			turns := make([]redistest.Turn, workers)
			for i := range turns {
				rw, err := fair.NewRWMutex(redistest.Owner(client), name, fairlock.WithObserver(r))
				if err != nil {
					t.Fatal(err)
				}
				write := i%2 == 0
				turns[i] = func(ctx context.Context) (func(context.Context) error, error) {
					if write {
						return rw.Unlock, rw.Lock(ctx)
					}
					return rw.RUnlock, rw.RLock(ctx)
				}
			}
			return turns
		}},
	}
	for _, shape := range shapes {
		t.Run(shape.name, func(t *testing.T) {
			redistest.NoRescues(t, shape.name, shape.reps, rep, func(t *testing.T, r *redistest.Rescues) []redistest.Turn {
				return shape.turns(t, r, redistest.Name(t))
			})
		})
	}
	t.Run("fresh processes", func(t *testing.T) {
		addr := redistest.Addrs(t, redistest.Single)[0]
		const procs = 4
		var all redistest.Turns
		rescues := 0
		for i := range procs {
			cmd, stdin, stdout := redistest.StartChild(t, "^TestNoRescuesChild$", rescueChildEnv+"="+addr+" "+redistest.Name(t))
			_ = stdin.Close()
			var got redistest.Turns
			var n int
			found := false
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				var gap int64
				if _, err := fmt.Sscanf(sc.Text(), "turns %d %d %d", &got.Acquisitions, &gap, &n); err == nil {
					got.LongestGap, found = time.Duration(gap), true
				}
			}
			_, _ = io.Copy(io.Discard, stdout)
			err := cmd.Wait()
			if !found {
				t.Fatalf("process %d said nothing: %v", i, err)
			}
			all.Add(got)
			rescues += n
			if err != nil {
				t.Errorf("process %d failed (%v): longest gap %v, %d rescues", i, err, got.LongestGap, n)
			}
		}
		t.Logf("fresh processes: %d processes, %v, %d rescues", procs, all, rescues)
		if all.LongestGap > redistest.GapBound || rescues != 0 {
			t.Errorf("fresh processes: longest gap %v (at most %v), %d rescues (want 0)", all.LongestGap, redistest.GapBound, rescues)
		}
	})
}

// rescueChildEnv makes TestNoRescuesChild run: "<addr> <lock name>".
const rescueChildEnv = "FAIRLOCK_RESCUE_CHILD"

// TestNoRescuesChild is one fresh process of TestRealNoRescuesWithoutFaults:
// eight handles of one fresh client take a fresh lock in turn, from its
// first contention on, and it says what it saw on stdout.
func TestNoRescuesChild(t *testing.T) {
	spec := os.Getenv(rescueChildEnv)
	if spec == "" {
		t.Skip("run by TestRealNoRescuesWithoutFaults only")
	}
	addr, name, _ := strings.Cut(spec, " ")
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = client.Close() }()
	var rescues redistest.Rescues
	turns := make([]redistest.Turn, 8)
	for i := range turns {
		m, err := fair.New(redistest.Owner(client), name, fairlock.WithObserver(&rescues))
		if err != nil {
			t.Fatal(err)
		}
		turns[i] = func(ctx context.Context) (func(context.Context) error, error) { return m.Unlock, m.Lock(ctx) }
	}
	s := redistest.TakeTurns(t, 200*time.Millisecond, turns)
	fmt.Printf("turns %d %d %d\n", s.Acquisitions, int64(s.LongestGap), rescues.Count())
}
