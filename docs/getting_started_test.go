package docs_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/fairlocktest"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The code of getting-started.md, compiled: every ```go block of the page
// stands in this file as it is (TestGettingStartedCodeIsCompiled), and
// Example runs the page's job runner.

// newOwner makes the process's owner of lock handles; main defers
// owner.Close(ctx) before the client's Close.
func newOwner(addr string) (*fairlock.Owner, *redis.Client, error) {
	client := redis.NewClient(&redis.Options{Addr: addr})
	owner, err := fairlock.NewOwner(client)
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	return owner, client, nil
}

// Job is a unit of work of the page's job runner.
type Job struct {
	ID   int
	Work func(ctx context.Context) error
}

// Store is where the jobs write; it takes a fencing token with each write.
type Store interface {
	Write(ctx context.Context, token int64, key, value string) error
}

// runInOrder runs the jobs of jobs under the lock "jobs", one at a time
// across every process that runs it, in the order jobs gives them. The
// workers of a process share next and jobs (startWorkers, below).
func runInOrder(ctx context.Context, owner *fairlock.Owner, next *sync.Mutex, jobs <-chan Job) error {
	m, err := fair.New(owner, "jobs", fair.WithLabel("job runner"))
	if err != nil {
		return err
	}
	for {
		next.Lock() // this worker alone takes a job and waits for its turn
		var job Job
		ok := false
		select {
		case job, ok = <-jobs:
		case <-ctx.Done():
		}
		if ok {
			err = m.Lock(ctx) // waits its turn in the queue
		}
		next.Unlock()
		if !ok {
			return ctx.Err() // nil: jobs was closed
		}
		if err != nil {
			return fmt.Errorf("job %d not run: %w", job.ID, err)
		}
		err = job.Work(m.HoldContext()) // ends if the hold is lost
		if uerr := m.Unlock(context.Background()); err == nil {
			err = uerr
		}
		if err != nil {
			log.Printf("job %d: %v", job.ID, err)
		}
	}
}

// startWorkers starts n workers on jobs, each with a handle of its own.
func startWorkers(ctx context.Context, owner *fairlock.Owner, n int, jobs <-chan Job) *sync.WaitGroup {
	var wg sync.WaitGroup
	var next sync.Mutex // one worker at a time takes a job and joins the queue
	for range n {
		wg.Go(func() {
			if err := runInOrder(ctx, owner, &next, jobs); err != nil {
				log.Print(err)
			}
		})
	}
	return &wg
}

// runKAtATime runs the jobs at most k at a time, in the order they came.
// Run one per process: it must be the only reader of jobs.
func runKAtATime(ctx context.Context, owner *fairlock.Owner, k int, jobs <-chan Job) error {
	s, err := fair.NewSemaphore(owner, "exports", k)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		var job Job
		ok := false
		select {
		case job, ok = <-jobs:
		case <-ctx.Done():
		}
		if !ok {
			return ctx.Err() // nil: jobs was closed
		}
		p, err := s.Acquire(ctx, 1) // one permit; waits its turn
		if err != nil {
			return fmt.Errorf("job %d not run: %w", job.ID, err)
		}
		wg.Go(func() {
			defer p.Release(context.Background())
			if err := job.Work(p.HoldContext()); err != nil {
				log.Printf("job %d: %v", job.ID, err)
			}
		})
	}
}

// tryForAMinute waits at most a minute for its turn.
func tryForAMinute(ctx context.Context, m *fair.Mutex) error {
	ok, err := m.TryLock(ctx, time.Minute, 0) // 0: the watchdog keeps the lease
	switch {
	case err != nil:
		return err // ctx ended, or Redis failed
	case !ok:
		return errors.New("not our turn within a minute; we left the queue")
	}
	defer m.Unlock(context.Background()) // runs even if ctx has ended
	return nil
}

// whyItEnded tells a lost hold from a released one.
func whyItEnded(m *fair.Mutex) string {
	<-m.HoldContext().Done()
	switch cause := context.Cause(m.HoldContext()); {
	case errors.Is(cause, fairlock.ErrLockLost):
		return "lost: another holder may have the lock now"
	case errors.Is(cause, fairlock.ErrClosed):
		return "closed: the owner shut down, and gave the lock on"
	}
	return "released"
}

// writeFenced writes under the lock with its fencing token: the store
// refuses a write whose token is below one it has seen.
func writeFenced(ctx context.Context, m *fair.Mutex, store Store) error {
	if err := m.Lock(ctx); err != nil {
		return err
	}
	defer m.Unlock(context.Background())
	return store.Write(m.HoldContext(), m.Token(), "report", "done")
}

// newTuned makes a handle for jobs that take minutes, on a network where a
// waiter may be silent for a while.
func newTuned(owner *fairlock.Owner) (*fair.Mutex, error) {
	return fair.New(owner, "jobs",
		fairlock.WithLease(time.Minute),          // renewed every 20 s while held
		fairlock.WithWaitTimeout(30*time.Second), // a waiter silent for 30 s loses its place
		fair.WithLabel("nightly jobs"),           // shown by Inspect and fairlock inspect
	)
}

// The page's functions that no test calls are compiled all the same; this
// says so to the linters.
var _ = []any{newOwner, runKAtATime, tryForAMinute, whyItEnded, writeFenced, newTuned}

// Example runs the page's ordered job runner: three workers on one lock.
func Example_gettingStarted() {
	s, err := fairlocktest.New() // an embedded Redis: docs/testing.md
	if err != nil {
		panic(err)
	}
	defer s.Close()
	owner, ctx := s.Owner, context.Background()

	jobs := make(chan Job)
	var mu sync.Mutex
	var running, most, done int
	wg := startWorkers(ctx, owner, 3, jobs)
	for id := range 6 {
		jobs <- Job{ID: id, Work: func(context.Context) error {
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			running--
			done++
			mu.Unlock()
			return nil
		}}
	}
	close(jobs)
	wg.Wait()
	fmt.Println("jobs done:", done, "at most at once:", most)
	// Output: jobs done: 6 at most at once: 1
}

// Every ```go block of getting-started.md stands in this file as it is.
func TestGettingStartedCodeIsCompiled(t *testing.T) {
	redistest.CodeBlocksIn(t, "getting-started.md", "getting_started_test.go", 6)
}

// onEachRedis runs test on a real Redis (skipped without one, as the
// election test is) with n jobs, and on an embedded one with fewer: its
// scripts run slowly under -race.
func onEachRedis(t *testing.T, test func(t *testing.T, owner *fairlock.Owner, n int)) {
	t.Run("redis-server", func(t *testing.T) {
		redistest.NoLeaks(t)
		client := redis.NewClient(&redis.Options{Addr: redistest.Addrs(t, redistest.Single)[0]})
		defer client.Close()
		owner, err := fairlock.NewOwner(client)
		if err != nil {
			t.Fatal(err)
		}
		defer owner.Close(context.Background())
		test(t, owner, 300)
	})
	t.Run("miniredis", func(t *testing.T) {
		redistest.NoLeaks(t)
		test(t, fairlocktest.Start(t).Owner, 60)
	})
}

// outOfOrder counts the jobs of started that started after a job submitted
// behind them.
func outOfOrder(started []int) int {
	n, latest := 0, -1
	for _, id := range started {
		if id < latest {
			n++
		}
		latest = max(latest, id)
	}
	return n
}

// checkRanOnce fails the test unless each of the n jobs ran exactly once.
func checkRanOnce(t *testing.T, run int, started []int, n int) {
	t.Helper()
	ran := make([]int, n)
	for _, id := range started {
		ran[id]++
	}
	for id, times := range ran {
		if times != 1 {
			t.Errorf("run %d: job %d ran %d times, want once", run, id, times)
		}
	}
}

// startWorkers as printed: 4 workers, 300 jobs (60 on the embedded Redis)
// submitted in order; each job records its start under the lock. No job may start before one submitted
// ahead of it, and each runs once.
func TestGettingStartedWorkersRunJobsInOrder(t *testing.T) {
	onEachRedis(t, func(t *testing.T, owner *fairlock.Owner, n int) {
		const workers = 4
		for run, buffer := range []int{0, n, 7} { // unbuffered, all queued up front, some
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			jobs := make(chan Job, buffer)
			var mu sync.Mutex
			var started []int
			var running, most int
			wg := startWorkers(ctx, owner, workers, jobs)
			for id := range n {
				job := Job{ID: id, Work: func(context.Context) error {
					mu.Lock()
					started = append(started, id)
					running++
					most = max(most, running)
					mu.Unlock()
					runtime.Gosched()
					mu.Lock()
					running--
					mu.Unlock()
					return nil
				}}
				select {
				case jobs <- job:
				case <-ctx.Done(): // the workers stopped: the checks below say why
				}
			}
			close(jobs)
			wg.Wait()
			cancel()
			if bad := outOfOrder(started); bad > 0 {
				t.Errorf("run %d (buffer %d): %d of %d jobs started out of submission order; first 20: %v",
					run, buffer, bad, len(started), started[:min(20, len(started))])
			}
			if most != 1 {
				t.Errorf("run %d: %d jobs ran at once, want 1", run, most)
			}
			checkRanOnce(t, run, started, n)
		}
	})
}

// runKAtATime as printed, k = 3, 300 jobs (60 on the embedded Redis)
// submitted in order. Each job
// records its start and runs until the test lets it end, so that permits
// free one at a time: once the first k have started, each job that ends must
// let exactly the next job in submission order start. The first k get their
// permits one after another, but run side by side from then on, so which of
// them records its start first is the Go scheduler's choice: for them the
// test asks only that they be the first k.
func TestGettingStartedKAtATimeStartsJobsInOrder(t *testing.T) {
	onEachRedis(t, func(t *testing.T, owner *fairlock.Owner, n int) {
		const k = 3
		for run := range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			jobs := make(chan Job)
			starts := make(chan int, n)
			end := make([]chan struct{}, n)
			for id := range end {
				end[id] = make(chan struct{})
			}
			var mu sync.Mutex
			var running, most int
			go func() {
				defer close(jobs)
				for id := range n {
					job := Job{ID: id, Work: func(context.Context) error {
						mu.Lock()
						running++
						most = max(most, running)
						mu.Unlock()
						starts <- id
						<-end[id]
						mu.Lock()
						running--
						mu.Unlock()
						return nil
					}}
					select {
					case jobs <- job:
					case <-ctx.Done():
						return
					}
				}
			}()
			done := make(chan error, 1)
			go func() { done <- runKAtATime(ctx, owner, k, jobs) }()

			var started, live []int // live: started, not let end
			ended := make([]bool, n)
			finish := func() { // lets every job end, and waits for the runner
				for id := range end {
					if !ended[id] {
						close(end[id])
					}
				}
				if err := <-done; err != nil {
					t.Errorf("run %d: runKAtATime: %v", run, err)
				}
				cancel()
			}
			next := func() (int, bool) {
				select {
				case id := <-starts:
					started = append(started, id)
					live = append(live, id)
					return id, true
				case <-time.After(10 * time.Second):
					t.Errorf("run %d: no job started within 10 s after %d started", run, len(started))
					return 0, false
				}
			}
			ok := true
			for range k {
				if _, ok = next(); !ok {
					break
				}
			}
			if first := slices.Sorted(slices.Values(started)); ok && (first[0] != 0 || first[k-1] != k-1) {
				t.Errorf("run %d: the first %d jobs to start were %v, want 0 to %d", run, k, started, k-1)
			}
			wrong := 0
			for want := k; ok && want < n; want++ {
				i := []int{0, len(live) - 1, want % len(live)}[run] // the oldest, the newest, either
				close(end[live[i]])
				ended[live[i]] = true
				live = slices.Delete(live, i, i+1)
				var id int
				if id, ok = next(); ok && id != want {
					if wrong == 0 {
						t.Errorf("run %d: job %d started when one permit came free, want job %d", run, id, want)
					}
					wrong++
				}
			}
			finish()
			if bad := outOfOrder(started[k:]); bad > 0 {
				t.Errorf("run %d: %d jobs started out of submission order; first 20: %v", run, bad, started[:min(20, len(started))])
			}
			if most > k {
				t.Errorf("run %d: %d jobs ran at once, want at most %d", run, most, k)
			}
			checkRanOnce(t, run, started, n)
		}
	})
}

// The runners stop when their ctx ends: while they wait for a job, and
// while one waits for its turn (the job it took is not run).
func TestGettingStartedRunnersStopWithTheirContext(t *testing.T) {
	redistest.NoLeaks(t)
	owner := fairlocktest.Start(t).Owner
	other, err := fair.New(owner, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Lock(context.Background()); err != nil { // the lock is taken
		t.Fatal(err)
	}
	defer other.Unlock(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	jobs := make(chan Job)
	wg := startWorkers(ctx, owner, 4, jobs)
	ran := make(chan int, 1)
	jobs <- Job{ID: 1, Work: func(context.Context) error { ran <- 1; return nil }}
	cancel()
	wg.Wait()

	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runKAtATime(ctx, owner, 3, jobs) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("runKAtATime after its ctx ended: %v, want context.Canceled", err)
	}
	if len(ran) != 0 {
		t.Error("a job ran while another held the lock")
	}
}

// shutdown ends a worker process on SIGTERM: the jobs that hold the lock
// finish and unlock, no new turn is taken, and after grace whatever still
// runs is cut off.
func shutdown(owner *fairlock.Owner, grace time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := owner.Drain(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil // drained, or cut off at grace
}

// The rolling deploy's recipe, run: a process's workers run the guide's
// job runner while another process waits for the same lock; shutdown while
// a job runs lets that job finish (its context lasts) and unlock, starts no
// further job, hands the lock to the other process, and closes the owner.
func TestGettingStartedRollingDeployDrainsTheRunningJob(t *testing.T) {
	redistest.NoLeaks(t)
	f := fairlocktest.Start(t)
	owner := f.Owner
	oc := redis.NewClient(&redis.Options{Addr: f.Addr()})
	defer oc.Close()
	otherOwner, err := fairlock.NewOwner(oc)
	if err != nil {
		t.Fatal(err)
	}
	defer otherOwner.Close(context.Background())
	other, err := fair.New(otherOwner, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	jobs := make(chan Job, 10)
	running, finish := make(chan struct{}), make(chan struct{})
	var jobErr error
	var after atomic.Int32
	jobs <- Job{ID: 1, Work: func(ctx context.Context) error {
		close(running)
		<-finish
		jobErr = ctx.Err() // the job ran to its end with the lock
		return nil
	}}
	for id := 2; id <= 5; id++ {
		jobs <- Job{ID: id, Work: func(context.Context) error { after.Add(1); return nil }}
	}
	wg := startWorkers(context.Background(), owner, 4, jobs)
	<-running
	otherGot := make(chan error, 1)
	go func() { otherGot <- other.Lock(context.Background()) }()
	done := make(chan error, 1)
	go func() { done <- shutdown(owner, time.Minute) }()
	select {
	case err := <-otherGot:
		t.Fatalf("the other process got the lock (%v) while the drained job still ran", err)
	case err := <-done:
		t.Fatalf("shutdown returned (%v) while a job still ran", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatalf("shutdown = %v", err)
	}
	wg.Wait()
	if jobErr != nil {
		t.Errorf("the running job's context ended (%v) during the drain", jobErr)
	}
	if n := after.Load(); n != 0 {
		t.Errorf("%d jobs started after the drain began", n)
	}
	if err := <-otherGot; err != nil {
		t.Fatalf("the other process after the drain: %v", err)
	}
	if err := other.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}
