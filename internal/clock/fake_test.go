package clock

import (
	"slices"
	"testing"
	"time"
)

func TestFakeRunsDueTimersInOrderWithinAdvance(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var seen []time.Time
	c := NewFake(start, func(now time.Time) { seen = append(seen, now) })
	var fired []string
	c.AfterFunc(3*time.Second, func() { fired = append(fired, "3s") })
	c.AfterFunc(time.Second, func() {
		fired = append(fired, "1s")
		// Scheduled by a fired timer, still inside the window: runs too.
		c.AfterFunc(time.Second, func() { fired = append(fired, "1s+1s") })
	})
	stopped := c.AfterFunc(2500*time.Millisecond, func() { fired = append(fired, "stopped") })
	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer reported false")
	}
	c.AfterFunc(10*time.Second, func() { fired = append(fired, "10s") })

	c.Advance(5 * time.Second)
	if want := []string{"1s", "1s+1s", "3s"}; !slices.Equal(fired, want) {
		t.Fatalf("fired %v, want %v", fired, want)
	}
	if got := c.Now(); !got.Equal(start.Add(5 * time.Second)) {
		t.Fatalf("Now = %v after Advance(5s)", got)
	}
	// onSet saw every timer's moment, then the target, before the calls ran.
	want := []time.Time{start, start.Add(time.Second), start.Add(2 * time.Second), start.Add(3 * time.Second), start.Add(5 * time.Second)}
	if !slices.EqualFunc(seen, want, time.Time.Equal) {
		t.Fatalf("onSet saw %v, want %v", seen, want)
	}
	if c.Pending() != 1 {
		t.Fatalf("Pending = %d, want 1 (the 10s timer)", c.Pending())
	}
	if stopped.Stop() {
		t.Fatal("Stop of a stopped timer reported true")
	}
}

func TestFakeAdvanceZeroRunsTimersDueNow(t *testing.T) {
	c := NewFake(time.Unix(0, 0), nil)
	ran := false
	c.AfterFunc(0, func() { ran = true })
	c.Advance(0)
	if !ran {
		t.Fatal("a timer due now did not run at Advance(0)")
	}
}

// AtFunc schedules at a time, not after a duration: a call made while an
// Advance is running (here from a timer it fired) still runs at the time it
// asked for, and one for a time already passed runs at once, in the same
// Advance.
func TestAtFuncRunsAtItsTimeWhenScheduledDuringAnAdvance(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewFake(start, nil)
	var at, late time.Time
	c.AfterFunc(10*time.Millisecond, func() {
		AtFunc(c, start.Add(50*time.Millisecond), func() { at = c.Now() })
	})
	c.AfterFunc(30*time.Millisecond, func() {
		AtFunc(c, start.Add(20*time.Millisecond), func() { late = c.Now() })
	})
	c.Advance(100 * time.Millisecond)
	if want := start.Add(50 * time.Millisecond); !at.Equal(want) {
		t.Errorf("AtFunc(start+50ms) ran at %v, want %v", at.Sub(start), want.Sub(start))
	}
	if want := start.Add(30 * time.Millisecond); !late.Equal(want) {
		t.Errorf("AtFunc for a time already passed ran at %v, want at once (%v)", late.Sub(start), want.Sub(start))
	}
}
