package clock

import (
	"sort"
	"sync"
	"time"
)

// Fake is a manual clock for tests. Time moves only in Advance, which fires
// the due timers one at a time, in deadline order, each in the goroutine that
// called Advance: when Advance returns, every call it fired has finished, so a
// test sees the effect of its timers deterministically.
//
// OnSet, if given, is called with every new time before timers due at that
// time run; tests pass miniredis's SetTime so Redis's TIME and key expiry move
// with the library's timers.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	seq    int
	timers []*fakeTimer
	onSet  func(time.Time)
	adv    sync.Mutex // serialises Advance calls
}

type fakeTimer struct {
	c    *Fake
	when time.Time
	seq  int
	f    func()
}

// NewFake returns a fake clock showing start. onSet may be nil.
func NewFake(start time.Time, onSet func(time.Time)) *Fake {
	c := &Fake{now: start, onSet: onSet}
	if onSet != nil {
		onSet(start)
	}
	return c
}

// Now returns the fake time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f for Now()+d. A timer due now runs at the next Advance
// (Advance(0) included), or in the Advance running now.
func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.scheduleLocked(c.now.Add(d), f)
}

// AtFunc schedules f for when the clock reads t (at once if it already
// passed t: as AfterFunc with d <= 0). Unlike AfterFunc(t.Sub(Now())), no
// Advance can move the clock between reading it and scheduling.
func (c *Fake) AtFunc(t time.Time, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.Before(c.now) {
		t = c.now
	}
	return c.scheduleLocked(t, f)
}

func (c *Fake) scheduleLocked(when time.Time, f func()) *fakeTimer {
	c.seq++
	t := &fakeTimer{c: c, when: when, seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return t
}

// Stop removes the timer; it reports whether the timer was still pending.
func (t *fakeTimer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, o := range c.timers {
		if o == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			return true
		}
	}
	return false
}

// Pending returns how many timers are scheduled.
func (c *Fake) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Advance moves the clock forward by d, running every timer that falls due on
// the way, including those that the fired calls schedule within the window.
func (c *Fake) Advance(d time.Duration) {
	c.adv.Lock()
	defer c.adv.Unlock()
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		sort.Slice(c.timers, func(i, j int) bool {
			a, b := c.timers[i], c.timers[j]
			if !a.when.Equal(b.when) {
				return a.when.Before(b.when)
			}
			return a.seq < b.seq
		})
		if len(c.timers) == 0 || c.timers[0].when.After(target) {
			moved := !c.now.Equal(target)
			c.now = target
			c.mu.Unlock()
			if moved && c.onSet != nil {
				c.onSet(target)
			}
			return
		}
		t := c.timers[0]
		c.timers = c.timers[1:]
		moved := t.when.After(c.now)
		if moved {
			c.now = t.when
		}
		now := c.now
		c.mu.Unlock()
		if moved && c.onSet != nil {
			c.onSet(now)
		}
		t.f()
	}
}
