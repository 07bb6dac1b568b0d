package waiting

import (
	"context"
	"fmt"
	"time"

	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/transport"
)

// Steps is what one kind of wait tells the loop (Loop): what to try, what
// news means, and how to undo its wait. The loop calls it from the waiting
// goroutine only.
type Steps interface {
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
// wakes; its Steps say what to try and what news means.
type Loop struct {
	agent core.Agent
	a     core.Attempt
	what  string // what the waiter does, for errors: "waiting in the queue"

	sleeper *transport.Sleeper
	sub     *transport.Sub
	steps   Steps

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
	l := &Loop{agent: h, a: a, what: what, sleeper: core.HubsOf(h.Owner).NewSleeper(), answered: h.Config.Clock.Now()}
	if !a.Forever {
		l.timeout = l.sleeper.At(h.Config.Clock, end, transport.Timeout)
	}
	return l
}

// Listen makes sub the subscription whose messages wake the wait.
func (l *Loop) Listen(sub *transport.Sub) { l.sub = sub }

// KeepPlace says when the waiter's place in Redis runs out (place): see
// Loop.place.
func (l *Loop) KeepPlace(place func() time.Time) { l.place = place }

// Sleeper is what the primitive's own machinery fires its notices on.
func (l *Loop) Sleeper() *transport.Sleeper { return l.sleeper }

// Close stops the wait's timers, and makes later notices return at once.
func (l *Loop) Close() {
	for _, t := range []clock.Timer{l.timeout, l.fallback, l.retry} {
		if t != nil {
			t.Stop()
		}
	}
	l.sleeper.Close()
}

// Run waits until steps are done, the wait elapses (nil) or ctx ends; try says
// to try first. It returns their error, the error of a try that Redis
// answered with a refusal, or ctx's (wrapped with the outage's cause while
// Redis was out of reach); every way out without a grant has left (Leave).
func (l *Loop) Run(ctx context.Context, steps Steps, try bool) error {
	l.steps = steps
	for {
		if try {
			if l.sub != nil {
				l.sub.Settle() // confirmed already: this try covers what came before
			}
			sent := l.Clock().Now()
			done, err := steps.Try(ctx)
			l.fellBack = false
			if done {
				return err
			}
			if err != nil {
				if err = l.failed(ctx, err, sent); err != nil {
					return err
				}
			} else {
				l.answered = l.Clock().Now()
				l.outage.end()
				l.agent.Waited()
			}
		}
		var done bool
		var err error
		wk := l.sleeper.Next(ctx, l.sub)
		switch wk.Reason {
		case transport.Ready:
			try = true
		case transport.Retry:
			try, l.fellBack = true, true
		case transport.Message, transport.Notice:
			done, try, err = steps.News(ctx, wk)
		case transport.Timeout:
			steps.Leave(ctx)
			return nil
		case transport.Cancelled:
			err := l.ended(ctx, time.Time{})
			steps.Leave(ctx)
			return err
		}
		if done || err != nil {
			return err
		}
	}
}

// Clock is the clock the loop's timers run on: its agent's.
func (l *Loop) Clock() clock.Clock { return l.agent.Config.Clock }

// FellBack reports whether the try under way follows a timer's wake (a
// fallback, the backoff, a reconnect's "look again"), not a message or the
// subscription's confirmation: news it finds may be a rescue (Delivered).
func (l *Loop) FellBack() bool { return l.fellBack }

// FallBackAt arms the fallback timer for t, replacing the one before: a
// try then, for news that sends no message (a lease that runs out).
func (l *Loop) FallBackAt(t time.Time) {
	l.StopFallback()
	l.fallback = l.sleeper.At(l.agent.Config.Clock, t, transport.Retry)
}

// FallingBack reports whether the fallback timer is armed.
func (l *Loop) FallingBack() bool { return l.fallback != nil }

// StopFallback disarms the fallback timer.
func (l *Loop) StopFallback() {
	if l.fallback != nil {
		l.fallback.Stop()
		l.fallback = nil
	}
}

// OutOfReach reports whether Redis is out of reach: the last try failed.
func (l *Loop) OutOfReach() bool { return l.outage.active() }

// Bound is ctx for one try: while Redis is out of reach, bounded (go-redis's
// own retries take seconds) by MaxPause, or by the end of the waiter's place
// while that lasts longer.
func (l *Loop) Bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if !l.outage.active() {
		return ctx, func() {}
	}
	d := MaxPause
	if l.place != nil {
		d = max(l.place().Sub(l.agent.Config.Clock.Now()), MaxPause)
	}
	return context.WithTimeout(ctx, d)
}

// Failed handles news that failed with err. An error not about reaching
// Redis, or ctx's end, ends the wait, having left; otherwise the waiter
// tries again after a jittered backoff, and nil is returned.
func (l *Loop) Failed(ctx context.Context, err error) error { return l.failed(ctx, err, time.Time{}) }

// failed is Failed for a try sent at sent (zero for news): a ctx that ended
// while it had no answer says so.
func (l *Loop) failed(ctx context.Context, err error, sent time.Time) error {
	if ctx.Err() != nil {
		err := l.ended(ctx, sent)
		l.steps.Leave(ctx)
		return err
	}
	if !transient(err) {
		l.steps.Leave(ctx)
		if l.outage.active() {
			return l.outage.ended(l.agent.Config.Clock.Now(), l.what, err)
		}
		return core.Step(l.what, err)
	}
	clk := l.agent.Config.Clock
	now := clk.Now()
	began, pause := l.outage.failed(now, err)
	if began {
		l.agent.Info("Redis cannot be reached; the waiter tries again", "while", l.what, "error", err)
	}
	if l.place != nil {
		if place := l.place(); now.Before(place) {
			pause = min(pause, place.Sub(now)) // one last try before it runs out
		}
	}
	if l.retry != nil {
		l.retry.Stop()
	}
	l.retry = l.sleeper.After(clk, pause, transport.Retry)
	return nil
}

// ended is the error of a wait whose ctx ended, ctx's own wrapped with
// what is known of Redis: "waiting in the queue, Redis last answered 1.2s
// earlier: context deadline exceeded".
func (l *Loop) ended(ctx context.Context, sent time.Time) error {
	now := l.Clock().Now()
	if l.outage.active() {
		return l.outage.ended(now, l.what, ctx.Err())
	}
	last := now.Sub(l.answered).Round(time.Millisecond)
	if !sent.IsZero() {
		return fmt.Errorf("%s, no answer from Redis to a call sent %v earlier (its last answer %v earlier): %w",
			l.what, now.Sub(sent).Round(time.Millisecond), last, ctx.Err())
	}
	return fmt.Errorf("%s, Redis last answered %v earlier: %w", l.what, last, ctx.Err())
}
