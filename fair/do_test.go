package fair_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
)

// Do runs the function holding the lock, with the hold's context: a Lock
// given it re-enters, and the lock is free again once Do returns.
func TestDoRunsTheFunctionUnderTheLock(t *testing.T) {
	e := newEnv(t)
	m := e.named("a")
	err := m.Do(context.Background(), func(ctx context.Context) error {
		if err := m.Lock(ctx); err != nil { // a re-entry
			return err
		}
		if n, err := m.HoldCount(ctx); n != 2 || err != nil {
			t.Errorf("HoldCount inside Do after a re-entry = %d, %v; want 2", n, err)
		}
		return m.Unlock(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if locked, _ := m.IsLocked(context.Background()); locked {
		t.Fatal("still held after Do returned")
	}
}

// The function's error comes back as it is; a hold lost while it ran comes
// back too, joined, and the function's context says so.
func TestDoReportsTheFunctionsErrorAndALostHold(t *testing.T) {
	e := newEnv(t)
	m := e.named("a", fairlock.WithLease(3*time.Second))
	boom := errors.New("boom")
	if err := m.Do(context.Background(), func(context.Context) error { return boom }); err != boom {
		t.Fatalf("Do = %v, want the function's error itself", err)
	}
	err := m.Do(context.Background(), func(ctx context.Context) error {
		if _, err := e.named("operator").ForceUnlock(context.Background()); err != nil {
			return err
		}
		e.clk.Advance(time.Second) // the watchdog's next renewal finds it gone
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), fairlock.ErrLockLost) {
			t.Errorf("the function's context ended with cause %v, want ErrLockLost", context.Cause(ctx))
		}
		return boom
	})
	if !errors.Is(err, boom) || !errors.Is(err, fairlock.ErrLockLost) {
		t.Fatalf("Do whose hold was lost = %v; want both the function's error and ErrLockLost", err)
	}
}

// Careless input gets an error, never a panic; errors name the lock.
func TestNilContextsAndNamedErrors(t *testing.T) {
	e := newEnv(t)
	m := e.named("a")
	if err := m.Lock(nil); !errors.Is(err, fairlock.ErrInvalidArgument) { //nolint:staticcheck
		t.Fatalf("Lock(nil) = %v, want ErrInvalidArgument", err)
	}
	if err := m.Unlock(nil); !errors.Is(err, fairlock.ErrInvalidArgument) { //nolint:staticcheck
		t.Fatalf("Unlock(nil) = %v, want ErrInvalidArgument", err)
	}
	if _, err := fair.Inspect(nil, e.client, lockName); !errors.Is(err, fairlock.ErrInvalidArgument) { //nolint:staticcheck
		t.Fatalf("Inspect(nil) = %v, want ErrInvalidArgument", err)
	}
	if _, err := e.semaphore(2).SetPermits(nil, 3); !errors.Is(err, fairlock.ErrInvalidArgument) { //nolint:staticcheck
		t.Fatalf("SetPermits(nil) = %v, want ErrInvalidArgument", err)
	}
	if _, err := e.semaphore(2).Acquire(nil, 1); !errors.Is(err, fairlock.ErrInvalidArgument) { //nolint:staticcheck
		t.Fatalf("Acquire(nil) = %v, want ErrInvalidArgument", err)
	}
	if err := m.Do(context.Background(), nil); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Fatalf("Do with a nil function = %v, want ErrInvalidArgument", err)
	}
	err := m.Unlock(context.Background())
	if !errors.Is(err, fairlock.ErrNotHeld) || err.Error() != `fairlock: fair lock "`+lockNameOf(m)+`": lock not held` {
		t.Fatalf("Unlock of a lock not held = %q; want ErrNotHeld naming the lock", err)
	}
	rw := e.rw("rw")
	if err := rw.RLock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := rw.Unlock(context.Background()); !errors.Is(err, fairlock.ErrNotHeld) || !strings.Contains(err.Error(), "use RUnlock") {
		t.Fatalf("Unlock of an RWMutex holding the read lock = %v; want ErrNotHeld saying to use RUnlock", err)
	}
	if err := rw.RUnlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func lockNameOf(m *fair.Mutex) string { return m.Name() }

// The semaphore's and the RW lock's Do forms, and a Permit's TTL and
// Extend.
func TestDoFormsAndPermitLeases(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.semaphore(3)
	err := s.Do(ctx, 2, func(ctx context.Context) error {
		if n := available(t, s); n != 1 {
			t.Errorf("Available inside Do(2) of 3 = %d", n)
		}
		return nil
	})
	if err != nil || available(t, s) != 3 {
		t.Fatalf("Semaphore.Do = %v, Available after %d", err, available(t, s))
	}
	p, err := s.TryAcquire(ctx, 1, 0, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ttl, err := p.TTL(ctx); ttl != 10*time.Second || err != nil {
		t.Fatalf("TTL of a fresh 10 s permit hold = %v, %v", ttl, err)
	}
	if err := p.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl, _ := p.TTL(ctx); ttl != time.Minute {
		t.Fatalf("TTL after Extend(1m) = %v", ttl)
	}
	release(t, p)
	rw := e.rw("rw")
	for _, do := range []func(context.Context, func(context.Context) error) error{rw.Do, rw.RDo} {
		if err := do(ctx, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if st := e.rwState(); st.InUse != 0 {
		t.Fatalf("the RW lock is held after Do and RDo: %+v", st)
	}
}
