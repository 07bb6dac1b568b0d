package reentrant_test

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A Lock whose ctx ends while it waits returns ctx's error wrapped with the
// lock's name, what it was doing and that Redis was in reach.
func TestAWaitsContextErrorNamesTheLock(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	holder, waiter := e.handle(), e.handle()
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Unlock(ctx) }()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err := waiter.Lock(short)
	want := `fairlock: reentrant lock "jobs": waiting for the lock, Redis reachable: context deadline exceeded`
	if !errors.Is(err, context.DeadlineExceeded) || err.Error() != want {
		t.Errorf("Lock = %v, want %q", err, want)
	}
}
