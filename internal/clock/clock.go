// Package clock is the time source behind every timer of fairlock's
// protocol: watchdog renewals, waiter heartbeats, fallback wake-ups and loss
// deadlines.
//
// The pub/sub hub's housekeeping (how long an idle channel stays subscribed,
// the pause before a reconnect, the ping of a quiet connection) runs on the
// wall clock on purpose: one hub serves every handle of a go-redis client,
// each with a clock of its own, and it decides nothing about holds or the
// queue. Tests end it by closing the owner (redistest.CloseOwners).
//
// Scripts never use it: they read "now" from Redis (TIME), so clients whose
// clocks disagree cannot disagree about deadlines. The clock only decides when
// this process does something, which is what tests need to control.
package clock

import "time"

// Clock tells the time and runs functions later.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f once, in its own goroutine, after d has elapsed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it did.
	Stop() bool
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// AtFunc calls f once, in its own goroutine, when c's time reaches t. A clock
// that can schedule at a time (Fake) does so in one step, so an Advance
// running meanwhile cannot make the call late; any other clock waits for
// t - c.Now().
func AtFunc(c Clock, t time.Time, f func()) Timer {
	if a, ok := c.(interface {
		AtFunc(t time.Time, f func()) Timer
	}); ok {
		return a.AtFunc(t, f)
	}
	return c.AfterFunc(t.Sub(c.Now()), f)
}
