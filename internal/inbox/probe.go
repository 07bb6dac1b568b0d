package inbox

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Probe is told of the moments a test must wait for before it moves a fake
// clock: a waiter going to sleep, a wake-up put into or taken out of a
// waiter's subscription, a message read by a hub. The library calls it and
// keeps no count itself; internal/redistest, which only tests import,
// installs the one implementation. Without one (every user's binary) each
// call site costs one atomic load.
type Probe interface {
	// Asleep: a waiter went to sleep (+1) until a timer or a message wakes
	// it, or woke (-1).
	Asleep(delta int)
	// Unread: a wake-up was put into (+1) or taken out of (-1) a waiter's
	// subscription.
	Unread(delta int)
	// Read: a hub read payload on channel, and has delivered it.
	Read(channel, payload string)
	// Background: a call whose caller may stop waiting for it (Bounded)
	// started (+1) or ended (-1).
	Background(delta int)
}

var probe atomic.Pointer[Probe]

// SetProbe installs p for the whole process (nil: none).
func SetProbe(p Probe) {
	if p == nil {
		probe.Store(nil)
		return
	}
	probe.Store(&p)
}

func probeAsleep(delta int) {
	if p := probe.Load(); p != nil {
		(*p).Asleep(delta)
	}
}

func probeUnread(delta int) {
	if p := probe.Load(); p != nil {
		(*p).Unread(delta)
	}
}

// ProbeBackground tells the probe of a call whose caller may stop waiting for
// it (core.Bounded): started (+1) or ended (-1).
func ProbeBackground(delta int) {
	if p := probe.Load(); p != nil {
		(*p).Background(delta)
	}
}

func probeRead(channel, payload string) {
	if p := probe.Load(); p != nil {
		(*p).Read(channel, payload)
	}
}

// Listening is one hub's confirmed channel, for a test that publishes a
// marker on it and waits for the hub to read it back (Probe.Read): then
// every message published before it has been delivered.
type Listening struct {
	Channel string
	// Publish publishes payload on Channel with the hub's own client.
	Publish func(ctx context.Context, payload string) error
	// Done is closed when the hub has stopped reading.
	Done <-chan struct{}
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
		// A hub's key is the client it serves, or on Cluster the shard's node.
		client := h.key.(redis.UniversalClient)
		sharded := h.sharded
		out = append(out, Listening{Channel: channel, Done: h.done,
			Publish: func(ctx context.Context, payload string) error {
				if sharded {
					return client.SPublish(ctx, channel, payload).Err()
				}
				return client.Publish(ctx, channel, payload).Err()
			}})
	}
	return out
}
