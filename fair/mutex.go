package fair

import (
	"context"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/core"
)

// Mutex is a handle on a fair lock (New): each Lock takes its turn in the
// lock's queue, in arrival order with every other waiter of any process.
//
// A handle is safe for concurrent use. It holds for whichever of its
// goroutines took the lock, as a sync.Mutex does: Token, Lost and
// HoldContext are that hold's, whoever reads them (read them after your
// own Lock returns, or use the context LockContext returns), and any of its
// goroutines may Unlock it. A call re-enters only with a ctx carrying the
// hold; a goroutine that calls Lock again with a ctx that does not carry
// it waits its turn behind it, as another goroutine would.
type Mutex struct{ c *core.Mutex }

var _ fairlock.MutexHandle = (*Mutex)(nil)

func (m *Mutex) core() *core.Mutex {
	if m == nil {
		return nil
	}
	return m.c
}

// Lock joins the lock's queue and waits until the lock is handed to this
// call, and keeps it until Unlock. ctx bounds only the wait; if it ends
// first, the call leaves the queue and the error wraps ctx's. Goroutines
// that share the handle and may lose a hold use LockContext instead, and
// pass its context to Unlock (see Unlock).
func (m *Mutex) Lock(ctx context.Context) error { return m.core().Lock(ctx) }

// LockContext is Lock, returning the context to do the work in: it carries
// the hold (Lock given it re-enters) and ends when the hold ends or ctx ends,
// whichever is first. ctx's end ends the context, not the hold: Unlock it.
func (m *Mutex) LockContext(ctx context.Context) (context.Context, error) {
	return m.core().LockContext(ctx)
}

// Do runs fn holding the lock, with the context LockContext returns (ended
// if the hold ends or ctx ends), then releases it when fn returns. It
// returns fn's error, joined with the release's (fairlock.ErrLockLost if
// lost).
func (m *Mutex) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return m.core().Do(ctx, fn)
}

// TryLock is Lock for up to wait, with a fixed lease if lease > 0 (at least
// 10 ms, as fairlock.WithLease). With wait 0 it never joins the queue: it
// succeeds only if the lock is free and no live waiter is queued (or ctx
// carries the hold). It returns false, nil when the wait elapsed, having
// left the queue. One attempt may take up to 200 ms: a server that lost
// its data, or a fresh one, grants nothing for that long after its first
// acquisition (docs/presence.md), and a try that meets the pause waits it
// out, then tries once more.
func (m *Mutex) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	return m.core().TryLock(ctx, wait, lease)
}

// Unlock undoes one Lock; the last hands the lock straight to the first
// live waiter in the queue, or frees it. An error wraps fairlock.ErrNotHeld
// (nothing held), fairlock.ErrLockLost (the hold was lost),
// fairlock.ErrClosed (the owner's Close ended it), or fairlock.ErrPending
// (the release goes on).
//
// Given the context LockContext returned (or one derived from it), Unlock
// releases exactly that hold. Given any other, it releases the handle's
// current hold: on a handle that goroutines share, that may be another
// goroutine's, taken after this one's was lost, as a sync.Mutex's Unlock
// may be called by any goroutine. Goroutines that share a handle and may
// lose a hold pass the hold's context to Unlock.
func (m *Mutex) Unlock(ctx context.Context) error { return m.core().Unlock(ctx) }

// Extend makes the current hold's lease d from now, never shorter.
func (m *Mutex) Extend(ctx context.Context, d time.Duration) error { return m.core().Extend(ctx, d) }

// ForceUnlock ends whoever holds the lock (an operator's tool), hands it to
// the first live waiter, and reports whether it was held. The holder it
// forced out is not told at once: it learns at its next renewal (within a
// third of its lease: 10 s with the default lease), its Unlock, or when
// another handle of its own owner is granted the lock, and meanwhile the
// next holder may already hold. Code that must not overlap checks fencing
// tokens (docs/reliability.md).
func (m *Mutex) ForceUnlock(ctx context.Context) (bool, error) { return m.core().ForceUnlock(ctx) }

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.core().Name() }

// IsLocked reports whether any handle holds the lock.
func (m *Mutex) IsLocked(ctx context.Context) (bool, error) { return m.core().IsLocked(ctx) }

// HoldCount returns how many times this handle holds the lock (its
// re-entries), 0 if not; ctx bounds only the call.
func (m *Mutex) HoldCount(ctx context.Context) (int, error) { return m.core().HoldCount(ctx) }

// TTL returns the remaining lease of whoever holds the lock; 0 if free.
func (m *Mutex) TTL(ctx context.Context) (time.Duration, error) { return m.core().TTL(ctx) }

// Token returns the current hold's fencing token (growing), 0 if none.
func (m *Mutex) Token() int64 { return m.core().Token() }

// Lost returns a channel closed if the current hold is lost: taken from it,
// never at Unlock or the owner's Close (HoldContext ends then, with the
// cause).
func (m *Mutex) Lost() <-chan struct{} { return m.core().Lost() }

// HoldContext returns the current hold's context: it carries the hold and
// ends when the hold ends (Unlock, loss, Close: context.Cause says which).
func (m *Mutex) HoldContext() context.Context { return m.core().HoldContext() }
