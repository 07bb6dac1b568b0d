package fair_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/reentrant"
)

// Close ends everything of its owner and nothing of another: its holds
// (re-entered ones in full) end with cause ErrClosed and go to the next in
// line at once; its waiters leave the queue with ErrClosed; later calls
// get ErrClosed; a second Close returns nil; no goroutine is left.
func TestCloseEndsTheOwnersHoldsAndWaits(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	closing, err := redistest.NewOwner(e.process(), e.clk)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := redistest.NewOwner(e.process(), e.clk)
	defer func() { _ = other.Close(ctx) }()
	handle := func(o *fairlock.Owner, name string) *fair.Mutex {
		m, err := fair.New(o, name)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}

	// The closing owner holds "jobs", twice over, and waits for "other"
	// behind another owner's hold; the other owner waits for "jobs".
	held := handle(closing, lockName)
	holdCtx, err := held.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := held.Lock(holdCtx); err != nil {
		t.Fatal(err)
	}
	next := e.enqueue(handle(other, lockName), 1)
	blocker := handle(other, "other")
	mustLock(t, blocker)
	waiting := tryLockAsync(handle(closing, "other"), ctx, time.Hour, 0)
	redistest.Quiet(t, "the waiters are asleep", func() bool { return redistest.Asleep() == 2 })
	rh, _ := reentrant.New(closing, "plain")
	if err := rh.Lock(ctx); err != nil {
		t.Fatal(err)
	}

	if err := closing.Close(ctx); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if cause := context.Cause(holdCtx); !errors.Is(cause, fairlock.ErrClosed) {
		t.Errorf("the hold's context ended with %v, want ErrClosed", cause)
	}
	if isClosed(held.Lost()) || isClosed(rh.Lost()) {
		t.Error("Lost is closed after Close ended the holds: it is for a lost hold alone")
	}
	if err := held.Unlock(holdCtx); !errors.Is(err, fairlock.ErrClosed) {
		t.Errorf("Unlock after Close = %v, want ErrClosed", err)
	}
	if err := rh.Unlock(ctx); !errors.Is(err, fairlock.ErrClosed) {
		t.Errorf("the reentrant lock's Unlock after Close = %v, want ErrClosed", err)
	}
	if r := await(t, next); !r.ok || r.err != nil {
		t.Errorf("the next in line got %v, %v; want the lock", r.ok, r.err)
	}
	if r := await(t, waiting); r.ok || !errors.Is(r.err, fairlock.ErrClosed) {
		t.Errorf("a waiter of the closed owner got %v, %v; want ErrClosed", r.ok, r.err)
	}
	st, err := fair.Inspect(ctx, e.client, "other")
	if err != nil || len(st.Queue) != 0 {
		t.Errorf("queue of other after Close = %+v, %v; want empty", st.Queue, err)
	}
	if locked, _ := rh.IsLocked(ctx); locked {
		t.Error("IsLocked on a closed owner's handle answered")
	}
	for what, err := range map[string]error{
		"Lock":      held.Lock(ctx),
		"Unlock":    held.Unlock(holdCtx),
		"IsLocked":  func() error { _, err := held.IsLocked(ctx); return err }(),
		"New":       func() error { _, err := fair.New(closing, lockName); return err }(),
		"Semaphore": func() error { _, err := fair.NewSemaphore(closing, "s", 2); return err }(),
		"Close":     closing.Close(ctx),
	} {
		if what == "Close" {
			if err != nil {
				t.Errorf("a second Close = %v, want nil", err)
			}
			continue
		}
		if !errors.Is(err, fairlock.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", what, err)
		}
	}
	if locked, err := blocker.IsLocked(ctx); !locked || err != nil {
		t.Errorf("the other owner's hold: locked %v, %v; want held", locked, err)
	}
	mustUnlock(t, blocker)
}

// Close gives a re-entered hold back in full even when a release gets no
// answer (its connection broke, on a client that retries nothing): that
// release is sent again, and the next in line has the lock at once rather
// than at the lease's end.
func TestCloseGivesTheLockBackWhenAReleaseGetsNoAnswer(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.process()
	lost := &redistest.LostReply{}
	c.AddHook(lost)
	closing, err := redistest.NewOwner(c, e.clk)
	if err != nil {
		t.Fatal(err)
	}
	held, err := fair.New(closing, lockName)
	if err != nil {
		t.Fatal(err)
	}
	mustLock(t, held)
	mustReenter(t, held)
	next := e.enqueue(e.handleOn(e.process()), 1)

	lost.Armed.Store(true) // the first release runs; its reply is lost
	if err := closing.Close(ctx); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if lost.Armed.Load() {
		t.Fatal("Close sent no release")
	}
	if r := await(t, next); !r.ok || r.err != nil {
		t.Errorf("the next in line got %v, %v; want the lock", r.ok, r.err)
	}
}

// An owner needs a client, and a handle an owner.
func TestOwnerRefusesBadInput(t *testing.T) {
	if _, err := fairlock.NewOwner(nil); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Errorf("NewOwner(nil) = %v", err)
	}
	if _, err := fair.New(nil, "x"); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Errorf("New(nil owner) = %v", err)
	}
	var o *fairlock.Owner
	if err := o.Close(context.Background()); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Errorf("Close of a nil owner = %v", err)
	}
}

// Close in the middle of a busy worker pool (a handle per goroutine on one
// owner, and goroutines sharing one handle): every call ends, with the lock
// or ErrClosed, nothing of the owner is left in the queue or holding, and
// another owner's waiter gets the lock.
func TestCloseDuringABusyPool(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	closing, _ := redistest.NewOwner(e.process(), e.clk)
	other, _ := redistest.NewOwner(e.process(), e.clk)
	defer func() { _ = other.Close(ctx) }()
	shared, _ := fair.New(closing, lockName)
	done := make(chan error, 16)
	for i := range 16 {
		m := shared
		if i%2 == 0 {
			m, _ = fair.New(closing, lockName)
		}
		go func() {
			for {
				hctx, err := m.LockContext(ctx)
				if err != nil {
					done <- err
					return
				}
				if err := m.Unlock(hctx); err != nil && !errors.Is(err, fairlock.ErrClosed) {
					done <- err
					return
				}
			}
		}()
	}
	waitUntil(t, "the pool queues", func() bool { return len(e.queued()) >= 4 })
	if err := closing.Close(ctx); err != nil {
		t.Fatalf("Close = %v", err)
	}
	for range 16 {
		if err := <-done; !errors.Is(err, fairlock.ErrClosed) {
			t.Errorf("a worker ended with %v, want ErrClosed", err)
		}
	}
	if st := e.inspect(); st.Holder != nil || len(st.Queue) != 0 {
		t.Fatalf("after Close: holder %+v, queue %+v; want none", st.Holder, st.Queue)
	}
	next, _ := fair.New(other, lockName)
	if ok, err := next.TryLock(ctx, 0, 0); !ok || err != nil {
		t.Fatalf("another owner's TryLock after Close = %v, %v; want the lock", ok, err)
	}
	mustUnlock(t, next)
}

// Close ends a semaphore's permit holds and waits, and an RW lock's read
// hold, as it does a mutex's: the other owner's waiters go on at once.
func TestCloseEndsPermitsAndReadHolds(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	closing, _ := redistest.NewOwner(e.process(), e.clk)
	other, _ := redistest.NewOwner(e.process(), e.clk)
	defer func() { _ = other.Close(ctx) }()

	sem, _ := fair.NewSemaphore(closing, "encoders", 2)
	held, err := sem.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() { _, err := sem.Acquire(ctx, 1); waiting <- err }()
	otherSem, _ := fair.NewSemaphore(other, "encoders", 2)
	served := make(chan error, 1)
	go func() {
		p, err := otherSem.Acquire(ctx, 2)
		if err == nil {
			err = p.Release(ctx)
		}
		served <- err
	}()
	rw, _ := fair.NewRWMutex(closing, "catalog")
	if err := rw.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	writer, _ := fair.NewRWMutex(other, "catalog")
	wrote := make(chan error, 1)
	go func() {
		err := writer.Lock(ctx)
		if err == nil {
			err = writer.Unlock(ctx)
		}
		wrote <- err
	}()
	redistest.Quiet(t, "the waiters are asleep", func() bool { return redistest.Asleep() >= 3 })

	if err := closing.Close(ctx); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if isClosed(held.Lost()) || !errors.Is(context.Cause(held.HoldContext()), fairlock.ErrClosed) {
		t.Error("the permit hold did not end with ErrClosed alone (Lost is for loss)")
	}
	for what, c := range map[string]chan error{"the closed owner's Acquire": waiting} {
		select {
		case err := <-c:
			if !errors.Is(err, fairlock.ErrClosed) {
				t.Errorf("%s = %v, want ErrClosed", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not return", what)
		}
	}
	for what, c := range map[string]chan error{"the other owner's Acquire": served, "the other owner's write Lock": wrote} {
		select {
		case err := <-c:
			if err != nil {
				t.Errorf("%s = %v, want the hold", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not get its turn after Close", what)
		}
	}
}

// After Close, an RW lock's Unlock and RUnlock say ErrClosed, as a mutex's
// Unlock does, with the hold's context or a plain one: Close is not loss,
// and never "not held". (They said ErrLockLost and ErrNotHeld.)
func TestRWMutexUnlockAfterCloseSaysErrClosed(t *testing.T) {
	ctx := context.Background()
	for _, write := range []bool{true, false} {
		for _, carried := range []bool{true, false} {
			t.Run(fmt.Sprintf("write %v, the hold's context %v", write, carried), func(t *testing.T) {
				e := newEnv(t)
				owner, _ := redistest.NewOwner(e.process(), e.clk)
				rw, _ := fair.NewRWMutex(owner, "catalog")
				lock, unlock := rw.RLockContext, rw.RUnlock
				if write {
					lock, unlock = rw.LockContext, rw.Unlock
				}
				hctx, err := lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := owner.Close(ctx); err != nil {
					t.Fatal(err)
				}
				if isClosed(rw.Lost()) {
					t.Error("Lost closed at Close (it is for loss)")
				}
				uctx := ctx
				if carried {
					uctx = hctx
				}
				if err := unlock(uctx); !errors.Is(err, fairlock.ErrClosed) || errors.Is(err, fairlock.ErrLockLost) {
					t.Errorf("unlock after Close = %v, want ErrClosed", err)
				}
			})
		}
	}
}
