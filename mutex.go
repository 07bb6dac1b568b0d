package fairlock

import (
	"context"
	"time"

	"github.com/fairlock/fairlock/internal/core"
)

// Mutex is a handle on a fair (fair.New) or reentrant (reentrant.New) lock,
// safe for concurrent use; a call re-enters only with a ctx carrying a hold.
// A handle holds for whichever of its goroutines took the lock, as a
// sync.Mutex does: Token, Lost and HoldContext are that hold's, whoever
// reads them (read them after your own Lock returns, or use the context
// LockContext returns), and any of its goroutines may Unlock it. A
// goroutine that calls Lock again with a ctx that does not carry the hold
// waits behind it, as another goroutine would.
type Mutex struct {
	core *core.Mutex
}

// Lock waits until the lock is this call's, and keeps it until Unlock. ctx
// bounds only the wait; if it ends first, the error wraps ctx's.
func (m *Mutex) Lock(ctx context.Context) error {
	_, err := m.acquire(ctx, core.LockAttempt(m.impl().Config()))
	return err
}

// LockContext is Lock, returning the context to do the work in: it carries
// the hold (Lock given it re-enters) and ends when the hold ends or ctx ends,
// whichever is first. ctx's end ends the context, not the hold: Unlock it.
func (m *Mutex) LockContext(ctx context.Context) (context.Context, error) {
	e, err := m.acquire(ctx, core.LockAttempt(m.impl().Config()))
	if err != nil {
		return nil, err
	}
	return core.Bind(ctx, e), nil
}

// Do runs fn holding the lock, with the context LockContext returns (ended
// if the hold ends or ctx ends), then releases it when fn returns. It
// returns fn's error, joined with the release's (ErrLockLost if lost).
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

// TryLock is Lock for up to wait (0: one attempt), with a fixed lease if
// lease > 0 (at least 10 ms, as WithLease). It returns false, nil when the
// wait elapsed (a Semaphore's TryAcquire, which has no bool, returns
// fair.ErrNotAcquired). One attempt (wait 0) may take up to 200 ms: a
// server that lost its data, or a fresh one, grants nothing for that long
// after its first acquisition (docs/presence.md), and a try that meets the
// pause waits it out, then tries once more.
func (m *Mutex) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	a, err := core.TryAttempt(m.impl().Config(), wait, lease)
	if err != nil {
		return false, m.impl().Wrap(ctx, err)
	}
	e, err := m.acquire(ctx, a)
	return e != nil, err
}

func (m *Mutex) acquire(ctx context.Context, a core.Attempt) (*core.End, error) {
	return m.impl().Acquire(ctx, a, func(t *core.Turn) (*core.Grant, error) {
		return t.Waiter().Acquire(t.Context(), t.Attempt())
	})
}

// Unlock undoes one Lock; the last frees the lock for the next waiter. An
// error wraps ErrNotHeld (nothing held), ErrLockLost (the hold was lost),
// ErrClosed (the owner's Close ended it), or ErrPending (the release goes on).
//
// Given the context LockContext returned (or one derived from it), Unlock
// releases exactly that hold. Given any other, it releases the handle's
// current hold: on a handle that goroutines share, that may be another
// goroutine's, taken after this one's was lost, as a sync.Mutex's Unlock
// may be called by any goroutine. Goroutines that share a handle and may
// lose a hold pass the hold's context to Unlock.
func (m *Mutex) Unlock(ctx context.Context) error { return m.impl().Unlock(ctx) }

// Extend makes the current hold's lease d from now, never shorter.
func (m *Mutex) Extend(ctx context.Context, d time.Duration) error { return m.impl().Extend(ctx, d) }

// ForceUnlock ends whoever holds the lock (an operator's tool), and reports
// whether it was held. The holder it forced out is not told at once: it
// learns at its next renewal (within a third of its lease: 10 s with the
// default lease), its Unlock, or when another handle of its own owner is
// granted the lock, and meanwhile the next holder may already hold. Code
// that must not overlap checks fencing tokens (docs/reliability.md).
func (m *Mutex) ForceUnlock(ctx context.Context) (bool, error) { return m.impl().ForceUnlock(ctx) }

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.impl().Name() }

// IsLocked reports whether any handle holds the lock.
func (m *Mutex) IsLocked(ctx context.Context) (bool, error) { return m.impl().IsLocked(ctx) }

// HoldCount returns how many times this handle holds the lock: 0 if not.
func (m *Mutex) HoldCount(ctx context.Context) (int, error) { return m.impl().HoldCount(ctx) }

// TTL returns the remaining lease of whoever holds the lock; 0 if free.
func (m *Mutex) TTL(ctx context.Context) (time.Duration, error) { return m.impl().TTL(ctx) }

// Token returns the current hold's fencing token (growing), 0 if none.
func (m *Mutex) Token() int64 { return m.impl().Token() }

// Lost returns a channel closed if the current hold is lost: taken from it,
// never at Unlock or the owner's Close (HoldContext ends then, with the cause).
func (m *Mutex) Lost() <-chan struct{} { return m.impl().Lost() }

// HoldContext returns the current hold's context: it carries the hold and
// ends when the hold ends (Unlock, loss, Close: context.Cause says which).
func (m *Mutex) HoldContext() context.Context { return m.impl().HoldContext() }

func (m *Mutex) impl() *core.Mutex {
	if m == nil {
		return nil
	}
	return m.core
}
