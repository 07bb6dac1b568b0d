package fair_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A Lock or Acquire whose ctx ends while it waits returns ctx's error
// wrapped with the primitive, the lock's name, what it was doing and that
// Redis was in reach: errors.Is still finds ctx's error.
func TestAWaitsContextErrorNamesTheLock(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	holder, waiter := e.handleOn(e.process()), e.handleOn(e.process())
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Unlock(ctx) }()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err := waiter.Lock(short)
	want := `fairlock: fair lock "` + waiter.Name() + `": waiting in the queue, Redis reachable: context deadline exceeded`
	if !errors.Is(err, context.DeadlineExceeded) || err.Error() != want {
		t.Errorf("Lock = %v, want %q", err, want)
	}

	sem, other := e.semaphore(1), e.semaphore(1)
	p, err := sem.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Release(ctx) }()
	cancelled, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	_, err = other.Acquire(cancelled, 1)
	if !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), `fairlock: semaphore "`+other.Name()+`": `) ||
		!strings.Contains(err.Error(), "Redis reachable") {
		t.Errorf("Acquire = %v, want ctx's error naming the semaphore and saying Redis was in reach", err)
	}
}
