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
