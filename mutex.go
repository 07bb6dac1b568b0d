package fairlock

import (
	"context"
	"time"

	"github.com/fairlock/fairlock/internal/core"
)

// Mutex is one handle on a lock: a fair one (fair.New), whose waiters take
// the lock in arrival order, or a plain reentrant one (reentrant.New). Its
// methods are safe for concurrent use, and goroutines sharing a handle
// exclude each other as with sync.Mutex. A call re-enters the hold only
// when its ctx carries it: the context LockContext returns, the one Do
// passes, HoldContext, or one derived from them.
type Mutex struct {
	core *core.Mutex
	wait core.Wait // how this kind of lock waits for its turn
}

// Lock waits until the lock is this call's and keeps its lease alive until
// Unlock; with a ctx that carries this handle's hold, it re-enters the hold
// at once. ctx bounds only the wait. When ctx ends first, Lock gives up its
// place and returns an error wrapping ctx's (test it with errors.Is).
func (m *Mutex) Lock(ctx context.Context) error {
	_, err := m.acquire(ctx, core.LockAttempt(m.impl().Config()))
	return err
}

// LockContext is Lock, and returns the context to work in: it has ctx's
// values and deadline, ends also when the hold ends (its cause ErrLockLost
// or ErrReleased), and carries the hold, so Lock re-enters and Unlock
// releases exactly this hold:
//
//	ctx, err := m.LockContext(ctx)
//	if err != nil {
//		return err
//	}
//	defer m.Unlock(ctx)
func (m *Mutex) LockContext(ctx context.Context) (context.Context, error) {
	e, err := m.acquire(ctx, core.LockAttempt(m.impl().Config()))
	if err != nil {
		return nil, err
	}
	return core.Bind(ctx, e), nil
}

// Do runs fn holding the lock, with the hold's context, and releases the
// hold when fn returns. It returns fn's error, joined with ErrLockLost if
// the hold was lost meanwhile or with the release's error. If the lock
// could not be taken, fn does not run.
func (m *Mutex) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	if err := core.CheckFunc(fn); err != nil {
		return err
	}
	hctx, err := m.LockContext(ctx)
	if err != nil {
		return err
	}
	return core.Held(hctx, m.Unlock, m.impl().Config().CleanupTimeout, fn)
}

// TryLock tries to take the lock for up to wait (0: one attempt, which a
// fair lock makes without queueing), or re-enters the hold ctx carries.
// Lease 0 keeps the lease alive until Unlock; a positive lease holds the
// lock that long, without renewal. It returns (false, nil) when the wait
// elapsed.
func (m *Mutex) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	a, err := core.TryAttempt(m.impl().Config(), wait, lease)
	if err != nil {
		return false, m.impl().Wrap(ctx, err)
	}
	e, err := m.acquire(ctx, a)
	return e != nil, err
}

// acquire is one Lock or TryLock: a turn of the handle, which the lock's
// kind waits out, and whose grant the handle keeps.
func (m *Mutex) acquire(ctx context.Context, a core.Attempt) (*core.End, error) {
	t, err := m.impl().Begin(ctx, a)
	if err != nil {
		return nil, err
	}
	g, err := m.wait(t)
	return m.impl().Keep(t, g, err)
}

// Unlock undoes one Lock or successful TryLock; the last one frees the
// lock, handing it to the next waiter. With a ctx that carries a hold it
// releases that hold, otherwise the handle's current one. A handle that
// holds nothing gets ErrNotHeld, a lost hold ErrLockLost. If Redis has not
// answered by ctx's end (plus 50 ms under a ctx already ended, as in a
// defer), the release goes on in the background and the error wraps
// ErrPending.
func (m *Mutex) Unlock(ctx context.Context) error { return m.impl().Unlock(ctx) }

// Extend makes the current hold's lease d from now, never shorter, keeping
// its lease mode. It returns ErrNotHeld if the handle holds nothing, and
// ErrLockLost if Redis no longer has the hold.
func (m *Mutex) Extend(ctx context.Context, d time.Duration) error { return m.impl().Extend(ctx, d) }

// ForceUnlock ends whoever holds the lock, at any hold count, and hands it
// to the next waiter; it reports whether the lock was held. It is for an
// operator clearing a stuck lock: the holder learns at its next renewal.
func (m *Mutex) ForceUnlock(ctx context.Context) (bool, error) { return m.impl().ForceUnlock(ctx) }

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.impl().Name() }

// IsLocked reports whether any handle holds the lock.
func (m *Mutex) IsLocked(ctx context.Context) (bool, error) { return m.impl().IsLocked(ctx) }

// HoldCount returns how many times this handle holds the lock: 0 if not.
func (m *Mutex) HoldCount(ctx context.Context) (int, error) { return m.impl().HoldCount(ctx) }

// TTL returns the remaining lease of the current hold, whoever holds it;
// 0 when the lock is free.
func (m *Mutex) TTL(ctx context.Context) (time.Duration, error) { return m.impl().TTL(ctx) }

// Token returns the fencing token of this handle's current hold, 0 if
// none. Tokens grow from one fresh acquisition to the next.
func (m *Mutex) Token() int64 { return m.impl().Token() }

// Lost returns a channel closed if the current hold is lost (never by
// Unlock). Before the first hold it is never closed.
func (m *Mutex) Lost() <-chan struct{} { return m.impl().Lost() }

// HoldContext returns a context that ends with the current hold, and
// carries it; context.Cause tells ErrLockLost from ErrReleased. Before the
// first hold it has ended already, with cause ErrNotHeld.
func (m *Mutex) HoldContext() context.Context { return m.impl().HoldContext() }

// impl is m's core; nil for a zero or nil Mutex, whose methods then return
// an error wrapping ErrInvalidArgument, or zero values.
func (m *Mutex) impl() *core.Mutex {
	if m == nil {
		return nil
	}
	return m.core
}
