package waiting

import (
	"context"
	"fmt"
	"time"

	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/transport"
)

// Waiter is what one kind of wait tells the loop (Loop): what to try, what
// news means, and how to undo its wait. The loop calls it from the waiting
// goroutine only.
type Waiter interface {
	// Try makes an attempt (or several: a reply may ask for another at
	// once). It returns done when the wait is over, with the error that
	// ends it (nil with a grant, which the waiter keeps). Not done, err is
	// the error of an attempt that failed, for the loop to ride out while
	// Redis cannot be reached (Loop.Failed), or nil: sleep on.
	Try(ctx context.Context) (done bool, err error)
	// News handles a wake that is not the loop's own: a hub message for
	// the waiter (transport.Message) or news of its own machinery
	// (transport.Notice). It returns done, or err (final: the wait is over), or
	// whether to try again at once.
	News(ctx context.Context, wk transport.Wake) (done, try bool, err error)
	// Leave undoes what the wait left in Redis (its queue entry) when it
	// ends without a grant: it elapsed, ctx ended, or an error ended it.
	Leave(ctx context.Context)
}

// Loop is one wait: it owns the timers, the backoff and the order of
// wakes; its Waiter says what to try and what news means.
type Loop struct {
	h    core.Agent
	a    core.Attempt
	what string // what the waiter does, for errors: "waiting in the queue"

	w   *transport.Sleeper
	sub *transport.Sub
	k   Waiter

	timeout  clock.Timer // the wait's end; nil: it waits forever
	fallback clock.Timer // the primitive's own timer (FallBackAt)
	retry    clock.Timer // the next try after one that failed
	outage   outage
	fellBack bool // the wake before this try was a timer's, not a message's
	// answered is when Redis last answered this waiter: the reply before
	// New, then each try's.
	answered time.Time

	// place, if set, is when the waiter's place in Redis runs out: a try
	// while Redis is out of reach is bounded by it (Bound), and the backoff
	// makes one last try before it.
	place func() time.Time
}

// New starts a wait of a, by h, for what ("waiting in the queue"), that
// elapses at end unless a waits forever; the caller has just had a reply
// from Redis (its first try). Close it when the call returns.
func New(h core.Agent, a core.Attempt, what string, end time.Time) *Loop {
	w := &Loop{h: h, a: a, what: what, w: core.Inbox(h.Owner).NewSleeper(), answered: h.Config.Clock.Now()}
	if !a.Forever {
		w.timeout = w.w.At(h.Config.Clock, end, transport.Timeout)
	}
	return w
}

// Listen makes sub the subscription whose messages wake the wait.
func (w *Loop) Listen(sub *transport.Sub) { w.sub = sub }

// KeepPlace says when the waiter's place in Redis runs out (place): see
// Loop.place.
func (w *Loop) KeepPlace(place func() time.Time) { w.place = place }

// Sleeper is what the primitive's own machinery fires its notices on.
func (w *Loop) Sleeper() *transport.Sleeper { return w.w }

// Close stops the wait's timers, and makes later notices return at once.
func (w *Loop) Close() {
	for _, t := range []clock.Timer{w.timeout, w.fallback, w.retry} {
		if t != nil {
			t.Stop()
		}
	}
	w.w.Close()
}

// Run waits until k is done, the wait elapses (nil) or ctx ends; try says
// to try first. It returns k's error, the error of a try that Redis
// answered with a refusal, or ctx's (wrapped with the outage's cause while
// Redis was out of reach); every way out without a grant has left (Leave).
func (w *Loop) Run(ctx context.Context, k Waiter, try bool) error {
	w.k = k
	for {
		if try {
			if w.sub != nil {
				w.sub.Settle() // confirmed already: this try covers what came before
			}
			sent := w.Clock().Now()
			done, err := k.Try(ctx)
			w.fellBack = false
			if done {
				return err
			}
			if err != nil {
				if err = w.failed(ctx, err, sent); err != nil {
					return err
				}
			} else {
				w.answered = w.Clock().Now()
				w.outage.end()
				w.h.Waited()
			}
		}
		var done bool
		var err error
		wk := w.w.Next(ctx, w.sub)
		switch wk.Reason {
		case transport.Ready:
			try = true
		case transport.Retry:
			try, w.fellBack = true, true
		case transport.Message, transport.Notice:
			done, try, err = k.News(ctx, wk)
		case transport.Timeout:
			k.Leave(ctx)
			return nil
		case transport.Cancelled:
			err := w.ended(ctx, time.Time{})
			k.Leave(ctx)
			return err
		}
		if done || err != nil {
			return err
		}
	}
}

// Clock is the clock the loop's timers run on: its agent's.
func (w *Loop) Clock() clock.Clock { return w.h.Config.Clock }

// FellBack reports whether the try under way follows a timer's wake (a
// fallback, the backoff, a reconnect's "look again"), not a message or the
// subscription's confirmation: news it finds may be a rescue (Delivered).
func (w *Loop) FellBack() bool { return w.fellBack }

// FallBackAt arms the fallback timer for t, replacing the one before: a
// try then, for news that sends no message (a lease that runs out).
func (w *Loop) FallBackAt(t time.Time) {
	w.StopFallback()
	w.fallback = w.w.At(w.h.Config.Clock, t, transport.Retry)
}

// FallingBack reports whether the fallback timer is armed.
func (w *Loop) FallingBack() bool { return w.fallback != nil }

// StopFallback disarms the fallback timer.
func (w *Loop) StopFallback() {
	if w.fallback != nil {
		w.fallback.Stop()
		w.fallback = nil
	}
}

// OutOfReach reports whether Redis is out of reach: the last try failed.
func (w *Loop) OutOfReach() bool { return w.outage.active() }

// Bound is ctx for one try: while Redis is out of reach, bounded (go-redis's
// own retries take seconds) by MaxPause, or by the end of the waiter's place
// while that lasts longer.
func (w *Loop) Bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if !w.outage.active() {
		return ctx, func() {}
	}
	d := MaxPause
	if w.place != nil {
		d = max(w.place().Sub(w.h.Config.Clock.Now()), MaxPause)
	}
	return context.WithTimeout(ctx, d)
}

// Failed handles news that failed with err. An error not about reaching
// Redis, or ctx's end, ends the wait, having left; otherwise the waiter
// tries again after a jittered backoff, and nil is returned.
func (w *Loop) Failed(ctx context.Context, err error) error { return w.failed(ctx, err, time.Time{}) }

// failed is Failed for a try sent at sent (zero for news): a ctx that ended
// while it had no answer says so.
func (w *Loop) failed(ctx context.Context, err error, sent time.Time) error {
	if ctx.Err() != nil {
		err := w.ended(ctx, sent)
		w.k.Leave(ctx)
		return err
	}
	if !transient(err) {
		w.k.Leave(ctx)
		if w.outage.active() {
			return w.outage.ended(w.h.Config.Clock.Now(), w.what, err)
		}
		return core.Step(w.what, err)
	}
	clk := w.h.Config.Clock
	now := clk.Now()
	began, pause := w.outage.failed(now, err)
	if began {
		w.h.Info("Redis cannot be reached; the waiter tries again", "while", w.what, "error", err)
	}
	if w.place != nil {
		if place := w.place(); now.Before(place) {
			pause = min(pause, place.Sub(now)) // one last try before it runs out
		}
	}
	if w.retry != nil {
		w.retry.Stop()
	}
	w.retry = w.w.After(clk, pause, transport.Retry)
	return nil
}

// ended is the error of a wait whose ctx ended, ctx's own wrapped with
// what is known of Redis: "waiting in the queue, Redis last answered 1.2s
// earlier: context deadline exceeded".
func (w *Loop) ended(ctx context.Context, sent time.Time) error {
	now := w.Clock().Now()
	if w.outage.active() {
		return w.outage.ended(now, w.what, ctx.Err())
	}
	last := now.Sub(w.answered).Round(time.Millisecond)
	if !sent.IsZero() {
		return fmt.Errorf("%s, no answer from Redis to a call sent %v earlier (its last answer %v earlier): %w",
			w.what, now.Sub(sent).Round(time.Millisecond), last, ctx.Err())
	}
	return fmt.Errorf("%s, Redis last answered %v earlier: %w", w.what, last, ctx.Err())
}
