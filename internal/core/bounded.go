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
// ends (a release, leaving the queue, undoing a grant), and waits for it
// while ctx lasts, and for Grace more once ctx has ended (past its
// deadline, if it had one: the clean-ups of one call share that grace): a
// call keeps its caller's deadline. call runs on a context that keeps ctx's values but not
// its cancellation, bounded by the cleanup timeout, so that it finishes, or
// fails, as one piece, also after Bounded returned; then its error is
// logged as what failing. If call is not done in time, Bounded returns an
// error wrapping ErrPending and ctx's error.
//
// call runs in the caller's goroutine when ctx can never end
// (context.Background), and when ctx has not ended and go-redis ends the
// call by itself before ctx's deadline, if any (transport.EndsInTime: no
// deadline, or one farther than go-redis's own bound): then it runs on
// ctx's values without its cancellation, a cancellation while it runs is
// seen when it returns, as for every script call, and the call is made
// whole. A goroutine of its own, and the two hand-offs between threads it
// takes, cost more than the call itself on a machine with idle cores: an
// uncontended Lock+Unlock on a cancellable ctx used 60 to 90 µs more CPU
// than on context.Background (docs/performance.md).
func (h Agent) Bounded(ctx context.Context, what string, call func(context.Context) error) error {
	if ctx.Done() == nil {
		h.afterAbandoned(ctx)
		return call(ctx)
	}
	if ctx.Err() == nil && transport.EndsInTime(ctx, h.Client) {
		here := transport.Detached(context.WithoutCancel(ctx))
		h.afterAbandoned(here)
		return call(here)
	}
	bg, cancel := context.WithTimeout(transport.Detached(context.WithoutCancel(ctx)), h.Config.CleanupTimeout)
	b := &bounded{done: make(chan struct{})}
	h.Owner.hubs.ProbeBackground(1)
	h.Owner.cleanups.add(nil) // Close waits for it
	go func() {
		defer h.Owner.hubs.ProbeBackground(-1)
		defer h.Owner.cleanups.done()
		defer cancel()
		h.afterAbandoned(bg) // what it cleans up reaches Redis first
		err := call(bg)
		b.mu.Lock()
		b.err = err
		left := b.left
		b.mu.Unlock()
		close(b.done)
		if left {
			if err != nil {
				h.logWarn(what+" failed after its caller stopped waiting", err)
			} else {
				h.Info(what + " succeeded after its caller stopped waiting")
			}
		}
	}()
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
	t := h.Config.Clock.AfterFunc(wait, func() { close(graced) })
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
