package core

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Holder is a handle that Do can run a function under: a Mutex, or a
// primitive's own form (a semaphore's permits, an RW lock's sides).
type Holder interface {
	// LockContext takes the lock and returns the hold's context (Bind).
	LockContext(ctx context.Context) (context.Context, error)
	// Unlock releases the hold the context carries.
	Unlock(ctx context.Context) error
}

// Do runs fn under a hold that h takes with ctx: fn gets the hold's
// context, and the hold is released when fn returns (or panics), on a
// context that keeps the hold's values but not its cancellation, bounded by
// cleanup. It returns fn's error, joined with the release's if that failed
// (ErrLockLost when the hold was lost while fn ran).
func Do(ctx context.Context, h Holder, cleanup time.Duration, fn func(ctx context.Context) error) (err error) {
	if fn == nil {
		return Invalid("fn must not be nil")
	}
	hctx, err := h.LockContext(ctx)
	if err != nil {
		return err
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(hctx), cleanup)
		defer cancel()
		uerr := h.Unlock(uctx)
		if errors.Is(uerr, ErrLockLost) {
			uerr = fmt.Errorf("the hold ended before the function returned: %w", uerr)
		}
		if uerr != nil {
			err = errors.Join(err, uerr)
		}
	}()
	return fn(hctx)
}

// Do runs fn holding m's lock (the package function Do).
func (m *Mutex) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return Do(ctx, m, m.h.Config.CleanupTimeout, fn)
}
