package transport

import (
	"context"
	"time"

	"github.com/fairlock/fairlock/internal/clock"
)

// Sleeper serialises what can wake one waiting Lock call: its timers, the
// hub's messages and the fair lock's heartbeats. A timer's call returns only
// once the waiter has dealt with what it delivered, so a fake clock's Advance
// returns with the waiter's reaction (a script call) done: tests of waiting
// are deterministic.
type Sleeper struct {
	probe Probe // the owner's, if any
	c     chan Wake
	exit  chan struct{}
	cur   chan struct{} // done channel of the wake being handled
}

// Wake is one reason to look again.
type Wake struct {
	Reason  Reason
	Payload string // Message: the hub message's note for this waiter
	Notice  any    // Notice: the news, a value of the kind's own type
	done    chan struct{}
}

// Reason tells what woke a waiter.
type Reason int

// Reasons to wake.
const (
	Retry     Reason = iota // look again: a timer, or a reconnect
	Timeout                 // the wait elapsed
	Message                 // a hub message: its note for this waiter
	Ready                   // the subscription is confirmed
	Cancelled               // the call's context ended
	Notice                  // news from the kind's own machinery, in Notice
)

// NewSleeper returns a waiter of hs's owner; Close it when the call
// returns.
func (hs *Hubs) NewSleeper() *Sleeper {
	return &Sleeper{probe: hs.probe, c: make(chan Wake), exit: make(chan struct{})}
}

// Fire delivers a wake for reason, carrying notice, and returns once the
// waiter has handled it, or has returned.
func (w *Sleeper) Fire(reason Reason, notice any) {
	done := make(chan struct{})
	select {
	case w.c <- Wake{Reason: reason, Notice: notice, done: done}:
	case <-w.exit:
		return
	}
	select {
	case <-done:
	case <-w.exit:
	}
}

// After fires reason after d on clk.
func (w *Sleeper) After(clk clock.Clock, d time.Duration, reason Reason) clock.Timer {
	return clk.AfterFunc(d, func() { w.Fire(reason, nil) })
}

// At fires reason when clk reaches t.
func (w *Sleeper) At(clk clock.Clock, t time.Time, reason Reason) clock.Timer {
	return clock.AtFunc(clk, t, func() { w.Fire(reason, nil) })
}

// Next finishes the previous wake and waits for the next one: a delivered
// wake, a message or confirmation of sub (if not nil), or ctx ending.
//
// The confirmation is an event, reported once (Ready) however long ago it
// came, unless the waiter needs none (Sub.Settle): a waiter that joined
// before it subscribed must try once more after the confirmation, since a
// hand-off published before the subscription took effect never reaches it.
// (Judged by state instead, "confirmed already when Next was entered", a
// confirmation that came while the waiter was busy between its join and its
// sleep was lost, and so was the hand-off: the waiter slept until its
// heartbeat, a third of its wait timeout.)
func (w *Sleeper) Next(ctx context.Context, sub *Sub) Wake {
	w.finish()
	var msgs <-chan string
	var ready <-chan struct{}
	if sub != nil {
		msgs = sub.C
		if !sub.readyTold {
			ready = sub.Ready()
		}
	}
	if ready == nil { // only a timer or a message can wake it now
		if w.probe != nil {
			w.probe.Asleep(1)
			defer w.probe.Asleep(-1)
		}
	}
	select {
	case wk := <-w.c:
		w.cur = wk.done
		return wk
	case p := <-msgs:
		probeUnread(w.probe, -1)
		if p == "" {
			// Not a note: a reconnect's "look again".
			return Wake{Reason: Retry}
		}
		return Wake{Reason: Message, Payload: p}
	case <-ready:
		sub.readyTold = true
		return Wake{Reason: Ready}
	case <-ctx.Done():
		return Wake{Reason: Cancelled}
	}
}

func (w *Sleeper) finish() {
	if w.cur != nil {
		close(w.cur)
		w.cur = nil
	}
}

// Close ends the wait: pending and later Fire calls return at once.
func (w *Sleeper) Close() {
	w.finish()
	close(w.exit)
}
