package core

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Held runs fn under a hold its caller has just taken, whose context is
// hctx, and then releases it with release: fn gets hctx, and release runs
// when fn returns (or panics), on a context that keeps hctx's values but not
// its cancellation, bounded by cleanup. It returns fn's error, joined with
// the release's if that failed (ErrLockLost when the hold was lost while fn
// ran). The primitive takes the hold itself and hands it down: core never
// calls a primitive back.
func Held(hctx context.Context, release func(context.Context) error, cleanup time.Duration, fn func(ctx context.Context) error) (err error) {
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(hctx), cleanup)
		defer cancel()
		uerr := release(uctx)
		if errors.Is(uerr, ErrLockLost) {
			uerr = fmt.Errorf("the hold ended before the function returned: %w", uerr)
		}
		if uerr != nil {
			err = errors.Join(err, uerr)
		}
	}()
	return fn(hctx)
}

// CheckFunc rejects a nil function for Do, before anything is taken.
func CheckFunc(fn func(ctx context.Context) error) error {
	if fn == nil {
		return Invalid("fn must not be nil")
	}
	return nil
}
