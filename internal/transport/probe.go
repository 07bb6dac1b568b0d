package transport

import (
	"context"
)

// Probe is told of the moments a test must wait for before it moves a fake
// clock: a waiter going to sleep, a wake-up put into or taken out of a
// waiter's subscription, a call its caller may stop waiting for. The
// library keeps no count itself; internal/redistest, which only tests
// import, installs the one implementation on the owners it makes
// (NewHubs). Every other owner has none: each call site costs a nil
// check.
type Probe interface {
	// Asleep: a waiter went to sleep (+1) until a timer or a message wakes
	// it, or woke (-1).
	Asleep(delta int)
	// Unread: a wake-up was put into (+1) or taken out of (-1) a waiter's
	// subscription.
	Unread(delta int)
	// Background: a call whose caller may stop waiting for it (Bounded)
	// started (+1) or ended (-1).
	Background(delta int)
	// Following: the owner began (+1) or ended (-1) following the master
	// (a replay of its recent exits, a move of its hub): background work
	// whose scripts may hand the lock on, unasked by any caller. It is
	// counted as Background too.
	Following(delta int)
	// Hub: a hub began reading; flush returns once it has read all that
	// was published to it before (at once if it has no channel), done is
	// closed when it stops reading.
	Hub(flush func(ctx context.Context) error, done <-chan struct{})
}

// ProbeBackground tells hs's probe, if any, of a call whose caller may stop
// waiting for it (core.Bounded): started (+1) or ended (-1).
func (hs *Hubs) ProbeBackground(delta int) {
	if hs.probe != nil {
		hs.probe.Background(delta)
	}
}

// ProbeFollowing tells hs's probe, if any, that its owner began (+1) or
// ended (-1) following the master (Probe.Following); it counts as
// Background too.
func (hs *Hubs) ProbeFollowing(delta int) {
	if hs.probe != nil {
		hs.probe.Following(delta)
		hs.probe.Background(delta)
	}
}

func probeUnread(p Probe, delta int) {
	if p != nil {
		p.Unread(delta)
	}
}
