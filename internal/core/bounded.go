package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fairlock/fairlock/internal/transport"
)

// Grace is how long a call waits, once its ctx has ended, for the Redis
// call it still has to make (a release, or leaving the queue): about one
// slow round trip. A call that needs longer goes on in the background.
const Grace = 50 * time.Millisecond

// Bounded runs call, a request the caller must see made even if its ctx
// ends (a release, leaving the queue, undoing a grant). It waits for it
// while ctx lasts, and for Grace more once ctx has ended (the clean-ups of
// one call share that grace). call runs on ctx's values without its
// cancellation, bounded by the cleanup timeout, so that it finishes or
// fails as one piece, also after Bounded returned (its error is then
// logged). If call is not done in time, Bounded returns an error wrapping
// ErrPending and ctx's error.
//
// call runs in the caller's goroutine unless ctx has ended, or has a
// deadline that neither go-redis nor a view of the client ends the call
// by (transport.EndsInTime, transport.Finishing); a call still unanswered
// then is made again on a goroutine of its own. A goroutine and its two
// hand-offs between threads cost more than the call on a machine with
// idle cores (docs/performance.md).
func (ag Agent) Bounded(ctx context.Context, what string, call func(context.Context) error) error {
	if ctx.Done() == nil {
		ag.afterAbandoned(ctx)
		return call(ctx)
	}
	if ctx.Err() == nil && transport.EndsInTime(ctx, ag.Client) {
		here := transport.Detached(context.WithoutCancel(ctx))
		ag.afterAbandoned(here)
		return call(here)
	}
	if here := ag.finishing(ctx, what); here != nil {
		return pending(what, call(here))
	}
	b := &bounded{done: make(chan struct{})}
	ag.background(ctx, func(bg context.Context) {
		ag.afterAbandoned(bg) // what it cleans up reaches Redis first
		err := call(bg)
		b.mu.Lock()
		b.err = err
		left := b.left
		b.mu.Unlock()
		close(b.done)
		if left {
			ag.logOutcome(what, err)
		}
	})
	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
	}
	// One grace per deadline: the clean-ups of a call whose deadline
	// passed share it, rather than each wait for one of its own.
	wait := Grace
	if d, ok := ctx.Deadline(); ok && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		wait = max(time.Until(d.Add(Grace)), 0)
	}
	graced := make(chan struct{})
	t := ag.Config.Clock.AfterFunc(wait, func() { close(graced) })
	defer t.Stop()
	select {
	case <-b.done:
		return b.err
	case <-graced:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.done:
		return b.err
	default:
	}
	b.left = true
	return fmt.Errorf("%w: %s: %w", ErrPending, what, ctx.Err())
}

// background runs call on a goroutine that Close waits for, on a context
// with ctx's values, bounded by the cleanup timeout.
func (ag Agent) background(ctx context.Context, call func(context.Context)) {
	bg, cancel := context.WithTimeout(transport.Detached(context.WithoutCancel(ctx)), ag.Config.CleanupTimeout)
	ag.Owner.hubs.ProbeBackground(1)
	ag.Owner.cleanups.add(nil) // Close waits for it
	go func() {
		defer ag.Owner.hubs.ProbeBackground(-1)
		defer ag.Owner.cleanups.done()
		defer cancel()
		call(bg)
	}()
}

// finishing returns the ctx a clean-up call runs on in its caller's
// goroutine when ctx has a deadline go-redis would not keep: ended at the
// deadline and Grace by a view of the client or by go-redis, and made again
// in the background if Redis has not answered by then
// (transport.Finishing); nil if it cannot be, and the call needs a
// goroutine of its own.
func (ag Agent) finishing(ctx context.Context, what string) context.Context {
	until, ok := ag.finishingUntil(ctx)
	if !ok {
		return nil
	}
	return transport.Finishing(ctx, ag.Mode(), ag.Client, until, what, ag.args.finish)
}

// finishingUntil is when a clean-up on ctx must be done in its caller's
// goroutine, ctx's deadline and Grace; false when ctx has no deadline, has
// ended, or an abandoned call must be waited for first.
func (ag Agent) finishingUntil(ctx context.Context) (time.Time, bool) {
	d, ok := ctx.Deadline()
	if !ok || ctx.Err() != nil || ag.args == nil || ag.abandonedPending() {
		return time.Time{}, false
	}
	return d.Add(Grace), true
}

// pending is the error of a clean-up that ran on a ctx from finishing: a
// call Redis did not answer in time goes on in the background (ErrPending).
func pending(what string, err error) error {
	if err == nil {
		return nil // before a, which escapes: no allocation for a release that succeeded
	}
	var a *transport.Abandoned
	if errors.As(err, &a) {
		return fmt.Errorf("%w: %s: %w", ErrPending, what, a.Cause)
	}
	return err
}

// finisher makes a handle's clean-ups again in the background
// (transport.Finisher).
type finisher struct{ ag Agent }

func (f *finisher) GoOn(ctx context.Context, what string, call func(context.Context) error) {
	f.ag.background(ctx, func(bg context.Context) { f.ag.logOutcome(what, call(bg)) })
}

// logOutcome logs how a clean-up its caller stopped waiting for ended.
func (ag Agent) logOutcome(what string, err error) {
	if err != nil {
		ag.logWarn(what+" failed after its caller stopped waiting", err)
	} else {
		ag.Info(what + " succeeded after its caller stopped waiting")
	}
}

// bounded is one call of Bounded: its outcome, and whether its caller left
// before it (then the call logs its outcome itself).
type bounded struct {
	mu   sync.Mutex
	done chan struct{}
	err  error
	left bool
}

// CheckContext rejects a nil context with an error, where a call on it
// would panic deep inside.
func CheckContext(ctx context.Context) error {
	if ctx == nil {
		return Invalid("ctx must not be nil; use context.Background() or context.TODO()")
	}
	return nil
}
