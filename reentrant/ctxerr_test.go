package reentrant_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/redistest"
)

// A Lock whose ctx ends while it waits returns ctx's error wrapped with the
// lock's name, what it was doing and when Redis last answered it.
func TestAWaitsContextErrorNamesTheLock(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	holder, waiter := e.handle(), e.handle()
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Unlock(ctx) }()
	short, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(short) }()
	redistest.Quiet(t, "the waiter is asleep", func() bool { return redistest.Asleep() == 1 })
	e.clk.Advance(40 * time.Millisecond) // no timer of the waiter's is due
	cancel()
	err := <-got
	want := `fairlock: reentrant lock "jobs": waiting for the lock, Redis last answered 40ms earlier: context canceled`
	if !errors.Is(err, context.Canceled) || err.Error() != want {
		t.Errorf("Lock = %v, want %q", err, want)
	}
}
