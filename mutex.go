package fairlock

import (
	"context"
	"time"
)

// MutexHandle is what a handle of either kind of mutex does: *fair.Mutex
// (fair.New) and *reentrant.Mutex (reentrant.New) implement it, each method
// as its kind's doc says. Code that works with either takes a MutexHandle.
//
// Goroutines that share a handle and may lose a hold take it with
// LockContext and pass the context it returns to Unlock: Unlock given
// another context releases the handle's current hold, which may be
// another goroutine's.
type MutexHandle interface {
	// Lock waits until the lock is this call's, and keeps it until Unlock.
	Lock(ctx context.Context) error
	// LockContext is Lock, returning the context to do the work in.
	LockContext(ctx context.Context) (context.Context, error)
	// Do runs fn holding the lock, then releases it.
	Do(ctx context.Context, fn func(ctx context.Context) error) error
	// TryLock is Lock for up to wait, with a fixed lease if lease > 0.
	TryLock(ctx context.Context, wait, lease time.Duration) (bool, error)
	// Unlock undoes one Lock; the last frees the lock.
	Unlock(ctx context.Context) error
	// Extend makes the current hold's lease d from now, never shorter.
	Extend(ctx context.Context, d time.Duration) error
	// ForceUnlock ends whoever holds the lock, and reports whether it was held.
	ForceUnlock(ctx context.Context) (bool, error)
	// Name returns the lock's name.
	Name() string
	// IsLocked reports whether any handle holds the lock.
	IsLocked(ctx context.Context) (bool, error)
	// HoldCount returns how many times this handle holds the lock (its
	// re-entries); ctx bounds only the call.
	HoldCount(ctx context.Context) (int, error)
	// TTL returns the remaining lease of whoever holds the lock.
	TTL(ctx context.Context) (time.Duration, error)
	// Token returns the current hold's fencing token, 0 if none.
	Token() int64
	// Lost returns a channel closed if the current hold is lost.
	Lost() <-chan struct{}
	// HoldContext returns the current hold's context.
	HoldContext() context.Context
}
