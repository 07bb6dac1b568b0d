package core

import (
	"context"
	"sync"
	"time"

	"github.com/fairlock/fairlock/internal/clock"
)

// End is how one hold ends, shared by every primitive: once, by release
// (ErrReleased), by loss (ErrLockLost) or by its owner's Close (ErrClosed).
// Its context is the primary signal, cancelled with the cause; Lost is
// derived from it, a channel closed when the hold was taken from its
// holder (takenAway: lost; never at Unlock or Close). Both are made when
// first asked for: most holds are never asked, and end without them. End also owns the
// hold's watchdog timer (RenewLocked), which ending stops.
//
// Its mutex guards the hold built on it too (LockState, UnlockState): a
// round of renewal and the end never interleave.
type End struct {
	mu     sync.Mutex
	ended  bool
	cause  error
	lost   chan struct{}
	ctx    context.Context
	cancel context.CancelCauseFunc
	renew  clock.Timer // the watchdog's next round
	stops  []func() bool
	// key and val, if key is not nil, are a value its context carries
	// (carry).
	key, val any
}

// carry makes the hold's context, and those Bind derives, carry val under
// key. It is called before anyone can ask for the context.
func (e *End) carry(key, val any) { e.key, e.val = key, val }

// LockState and UnlockState guard End's state in memory, and the hold
// built on it (not the lock in Redis).
func (e *End) LockState()   { e.mu.Lock() }
func (e *End) UnlockState() { e.mu.Unlock() }

// Finish ends the hold with cause, once: it stops the watchdog and the
// watchers (OnEnd), cancels the context, and, for ErrLockLost, closes Lost.
// It reports whether this call ended it.
func (e *End) Finish(cause error) bool { return e.FinishAfter(cause, nil, nil) }

// FinishAfter is Finish, running first and then say (each if not nil, and
// only if this call ends the hold) before anything can tell that the hold
// ended: whatever first records is in place, and whatever say logs is
// written, for whoever reacts to the context or Lost, even one that asks
// for them only now. first runs with End's lock held: it must be quick and
// must not take that lock; say runs without it.
func (e *End) FinishAfter(cause error, first, say func()) bool {
	e.mu.Lock()
	if e.ended {
		e.mu.Unlock()
		return false
	}
	if first != nil {
		first()
	}
	e.ended, e.cause = true, cause
	if e.renew != nil {
		e.renew.Stop()
	}
	stops := e.stops
	e.stops = nil
	lost, cancel := e.lost, e.cancel // those made later are made ended
	e.mu.Unlock()
	if say != nil {
		say()
	}
	for _, stop := range stops {
		stop()
	}
	// The cause before Lost: whoever sees Lost closed finds the context
	// already ended, with ErrLockLost.
	if cancel != nil {
		cancel(cause)
	}
	if takenAway(cause) && lost != nil {
		close(lost)
	}
	return true
}

// takenAway reports whether a hold ended by cause was taken from its holder
// (lost) rather than ended by it: by Unlock, or by its owner's Close. Lost
// closes for these alone.
func takenAway(cause error) bool { return cause == ErrLockLost }

// EndedLocked reports, with the lock held, whether the hold has ended.
func (e *End) EndedLocked() bool { return e.ended }

// IsEnded reports whether the hold has ended.
func (e *End) IsEnded() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ended
}

// EndedErr is what a call on the hold gets once it ended: ErrLockLost if
// it was lost, ErrClosed if its owner's Close ended it, ErrNotHeld
// otherwise.
func (e *End) EndedErr() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.ended && e.cause == ErrLockLost:
		return ErrLockLost
	case e.ended && e.cause == ErrClosed:
		return ErrClosed
	}
	return ErrNotHeld
}

// Bind returns a context for work done under the hold e: ctx's values and
// deadline, also cancelled when the hold ends (with its cause), before the
// call that ends it returns, and carrying what e's own context carries (a
// proof that the call chain holds it).
func Bind(ctx context.Context, e *End) context.Context {
	c, cancel := context.WithCancelCause(ctx)
	e.OnEnd(func() bool {
		cancel(e.Cause())
		return true
	})
	if e.key != nil {
		return context.WithValue(c, e.key, e.val)
	}
	return c
}

// Cause is why the hold ended (ErrReleased, ErrLockLost or ErrClosed), nil
// while it lasts.
func (e *End) Cause() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cause
}

// IsLost reports whether the hold ended by loss.
func (e *End) IsLost() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ended && e.cause == ErrLockLost
}

// Context is cancelled, with the cause, once the hold ends.
func (e *End) Context() context.Context {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ctx == nil {
		parent := context.Background()
		if e.key != nil {
			parent = context.WithValue(parent, e.key, e.val)
		}
		e.ctx, e.cancel = context.WithCancelCause(parent)
		if e.ended {
			e.cancel(e.cause)
		}
	}
	return e.ctx
}

// Lost is closed once the hold's context ends with cause ErrLockLost.
func (e *End) Lost() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lost == nil {
		e.lost = make(chan struct{})
		if e.ended && takenAway(e.cause) {
			close(e.lost)
		}
	}
	return e.lost
}

// OnEnd registers stop, run once when the hold ends (a watcher of other
// holds' contexts, say); at once if it has ended.
func (e *End) OnEnd(stop func() bool) {
	e.mu.Lock()
	if !e.ended {
		e.stops = append(e.stops, stop)
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	stop()
}

// RenewLocked schedules the watchdog's next round, with the lock held: round
// runs after d on clk, unless the hold has ended by then. One round is
// pending at a time; ending the hold stops it.
func (e *End) RenewLocked(clk clock.Clock, d time.Duration, round func()) {
	if e.ended {
		return
	}
	if e.renew != nil {
		e.renew.Stop()
	}
	e.renew = clk.AfterFunc(d, round)
}

// Renewal cadence: a watchdog renews a lease every lease/RenewEvery, and
// after a failed round tries again after lease/RetryEvery.
const (
	RenewEvery = 3
	RetryEvery = 9
)

// What Latest returns before a first hold: a channel never closed, and a
// context already cancelled with cause ErrNotHeld.
var (
	neverClosed = make(chan struct{})
	notHeldCtx  context.Context // made by Link
)

// Latest is a handle's most recent hold, for its Lost and HoldContext:
// before a first hold, Lost is never closed and HoldContext is already
// cancelled with cause ErrNotHeld; afterwards they are that hold's, until
// the next one.
type Latest struct {
	mu sync.Mutex
	e  *End
}

// Set makes e the most recent hold.
func (l *Latest) Set(e *End) {
	l.mu.Lock()
	l.e = e
	l.mu.Unlock()
}

func (l *Latest) get() *End {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.e
}

// Lost is the most recent hold's Lost.
func (l *Latest) Lost() <-chan struct{} {
	if e := l.get(); e != nil {
		return e.Lost()
	}
	return neverClosed
}

// Context is the most recent hold's context.
func (l *Latest) Context() context.Context {
	if e := l.get(); e != nil {
		return e.Context()
	}
	return notHeldCtx
}

// Unheld returns what a handle's Lost and HoldContext give before its first
// hold: a channel never closed, and a context already cancelled with cause
// ErrNotHeld. A zero or nil handle gives them too.
func Unheld() (<-chan struct{}, context.Context) { return neverClosed, notHeldCtx }
