package fairlock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// drainRig is a lock "d" held by a handle of the owner being drained, a
// waiter of that owner queued behind it, and a waiter of another process
// queued behind that one.
type drainRig struct {
	owner            *fairlock.Owner
	held, same       *fair.Mutex
	hctx             context.Context
	sameGot, nextGot chan error
	next             *fair.Mutex
}

func newDrainRig(t *testing.T) *drainRig {
	t.Helper()
	mr, clk, c := redistest.Mini(t)
	owner, err := redistest.NewOwner(c, clk)
	if err != nil {
		t.Fatal(err)
	}
	r := &drainRig{owner: owner, sameGot: make(chan error, 1), nextGot: make(chan error, 1)}
	if r.held, err = fair.New(owner, "d"); err != nil {
		t.Fatal(err)
	}
	if r.same, err = fair.New(owner, "d"); err != nil {
		t.Fatal(err)
	}
	oc := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = oc.Close() })
	other, err := redistest.NewOwner(oc, clk)
	if err != nil {
		t.Fatal(err)
	}
	if r.next, err = fair.New(other, "d"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if r.hctx, err = r.held.LockContext(ctx); err != nil {
		t.Fatal(err)
	}
	go func() { r.sameGot <- r.same.Lock(ctx) }()
	waitFor(t, "the owner's own waiter to queue", func() bool { return redistest.Asleep() == 1 })
	go func() { r.nextGot <- r.next.Lock(ctx) }()
	waitFor(t, "the other process's waiter to queue", func() bool { return redistest.Asleep() == 2 })
	return r
}

// Drain, the rolling deploy's shutdown: the owner's waiters leave at once
// (ErrClosed) and it takes no new lock, while its running hold goes on,
// re-entries included, until its Unlock; then the lock goes to the next in
// line and the owner closes.
func TestDrainLetsRunningHoldsFinishThenCloses(t *testing.T) {
	redistest.NoLeaks(t)
	r := newDrainRig(t)
	ctx := context.Background()
	drained := make(chan error, 1)
	go func() { drained <- r.owner.Drain(ctx) }()
	if err := <-r.sameGot; !errors.Is(err, fairlock.ErrClosed) {
		t.Fatalf("the draining owner's waiter: Lock = %v, want ErrClosed", err)
	}
	if ok, err := r.same.TryLock(ctx, 0, 0); ok || !errors.Is(err, fairlock.ErrClosed) {
		t.Fatalf("a new acquisition while draining: TryLock = %v, %v; want false, ErrClosed", ok, err)
	}
	// The running job re-enters, as its call chain would.
	if err := r.held.Lock(r.hctx); err != nil {
		t.Fatalf("a re-entry of a running hold while draining: %v", err)
	}
	if err := r.held.Unlock(r.hctx); err != nil {
		t.Fatal(err)
	}
	if r.hctx.Err() != nil {
		t.Fatalf("the running hold's context ended while draining: %v", context.Cause(r.hctx))
	}
	select {
	case err := <-drained:
		t.Fatalf("Drain returned (%v) while a hold still ran", err)
	case err := <-r.nextGot:
		t.Fatalf("the next in line got the lock (%v) while the draining owner's hold ran", err)
	default:
	}
	if err := r.held.Unlock(r.hctx); err != nil {
		t.Fatalf("the running hold's Unlock while draining: %v", err)
	}
	if err := <-r.nextGot; err != nil {
		t.Fatalf("the next in line after the drained hold's Unlock: %v", err)
	}
	if err := <-drained; err != nil {
		t.Fatalf("Drain = %v", err)
	}
	if err := r.held.Lock(ctx); !errors.Is(err, fairlock.ErrClosed) {
		t.Fatalf("Lock after Drain = %v, want ErrClosed", err)
	}
	if err := r.next.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// When Drain's ctx ends before the holds do, Close's behaviour follows: the
// hold left ends (its context with cause ErrClosed; Lost, which is for
// loss, stays open), it goes to the next in line, and Drain returns ctx's
// error.
func TestDrainWhoseCtxEndsCloses(t *testing.T) {
	redistest.NoLeaks(t)
	r := newDrainRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	drained := make(chan error, 1)
	go func() { drained <- r.owner.Drain(ctx) }()
	if err := <-r.sameGot; !errors.Is(err, fairlock.ErrClosed) {
		t.Fatalf("the draining owner's waiter: Lock = %v, want ErrClosed", err)
	}
	cancel()
	if err := <-drained; !errors.Is(err, context.Canceled) {
		t.Fatalf("Drain whose ctx ended = %v, want context.Canceled", err)
	}
	// The holder stopped believing before Drain returned: its release in
	// Redis may still be on its way, its context has ended.
	if err := r.hctx.Err(); err == nil {
		t.Fatal("Drain returned ctx's error while the hold's context still lasts")
	}
	if err := <-r.nextGot; err != nil {
		t.Fatalf("the next in line after the drain's ctx ended: %v", err)
	}
	<-r.hctx.Done()
	if cause := context.Cause(r.hctx); !errors.Is(cause, fairlock.ErrClosed) {
		t.Fatalf("the hold's context ended with %v, want ErrClosed", cause)
	}
	if isClosed(r.held.Lost()) {
		t.Fatal("Lost closed at Close: it is for a lost hold")
	}
	if err := r.held.Unlock(r.hctx); !errors.Is(err, fairlock.ErrClosed) || errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("Unlock after Close = %v, want ErrClosed (not ErrNotHeld)", err)
	}
	if err := r.held.Unlock(context.Background()); !errors.Is(err, fairlock.ErrClosed) {
		t.Fatalf("Unlock (no hold's context) after Close = %v, want ErrClosed", err)
	}
	if err := r.next.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}
