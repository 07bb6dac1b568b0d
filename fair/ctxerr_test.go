package fair_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A Lock or Acquire whose ctx ends while it waits returns ctx's error
// wrapped with the primitive, the lock's name, what it was doing and when
// Redis last answered it, no more (it cannot know whether Redis is in
// reach now): errors.Is still finds ctx's error.
func TestAWaitsContextErrorNamesTheLock(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	holder, waiter := e.handleOn(e.process()), e.handleOn(e.process())
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Unlock(ctx) }()
	short, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(short) }()
	e.settle(1)
	e.clk.Advance(40 * time.Millisecond) // no timer of the waiter's is due
	cancel()
	err := <-got
	want := `fairlock: fair lock "` + waiter.Name() + `": waiting in the queue, Redis last answered 40ms earlier: context canceled`
	if !errors.Is(err, context.Canceled) || err.Error() != want {
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
		!strings.Contains(err.Error(), "Redis last answered") {
		t.Errorf("Acquire = %v, want ctx's error naming the semaphore and saying when Redis last answered", err)
	}
}
