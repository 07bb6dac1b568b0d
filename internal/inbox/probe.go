package inbox

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
}

// ProbeBackground tells hs's probe, if any, of a call whose caller may stop
// waiting for it (core.Bounded): started (+1) or ended (-1).
func (hs *Hubs) ProbeBackground(delta int) {
	if hs.probe != nil {
		hs.probe.Background(delta)
	}
}

func probeUnread(p Probe, delta int) {
	if p != nil {
		p.Unread(delta)
	}
}

// Listening is one hub's confirmed channel, for a test that waits until the
// hub has delivered every message published before (Flush).
type Listening struct {
	Channel string
	// Flush publishes a marker on Channel with the hub's own client, and
	// returns once the hub has read it back, or stopped reading.
	Flush func(ctx context.Context) error
}

// ListeningHubs returns one confirmed channel of every hub of s that has
// one.
func ListeningHubs(s *Hubs) []Listening {
	hubs := s.all()
	var out []Listening
	for _, h := range hubs {
		h.mu.Lock()
		channel := ""
		for name, ch := range h.chans {
			if ch.confirmed {
				channel = name
				break
			}
		}
		h.mu.Unlock()
		if channel == "" {
			continue // nothing subscribed, nothing in flight
		}
		out = append(out, Listening{Channel: channel,
			Flush: func(ctx context.Context) error { return h.flush(ctx, channel) }})
	}
	return out
}
