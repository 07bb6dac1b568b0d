package docs_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
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

// runInOrder runs each job of jobs under the lock "jobs", one at a time
// across every process that runs it, in the order the calls came.
func runInOrder(ctx context.Context, owner *fairlock.Owner, jobs <-chan Job) error {
	m, err := fair.New(owner, "jobs", fair.WithLabel("job runner"))
	if err != nil {
		return err
	}
	for job := range jobs {
		if err := m.Lock(ctx); err != nil { // waits its turn in the queue
			return err
		}
		err := job.Work(m.HoldContext()) // ends if the hold is lost
		if uerr := m.Unlock(context.Background()); err == nil {
			err = uerr
		}
		if err != nil {
			log.Printf("job %d: %v", job.ID, err)
		}
	}
	return nil
}

// startWorkers starts n workers, each with a handle of its own.
func startWorkers(ctx context.Context, owner *fairlock.Owner, n int, jobs <-chan Job) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := runInOrder(ctx, owner, jobs); err != nil {
				log.Print(err)
			}
		}()
	}
	return &wg
}

// runKAtATime runs the jobs at most k at a time, in the order they came.
func runKAtATime(ctx context.Context, owner *fairlock.Owner, k int, jobs <-chan Job) error {
	s, err := fair.NewSemaphore(owner, "exports", k)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for job := range jobs {
		p, err := s.Acquire(ctx, 1) // one permit; waits its turn
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer p.Release(context.Background())
			if err := job.Work(p.HoldContext()); err != nil {
				log.Printf("job %d: %v", job.ID, err)
			}
		}()
	}
	return nil
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
	if errors.Is(context.Cause(m.HoldContext()), fairlock.ErrLockLost) {
		return "lost: another holder may have the lock now"
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
