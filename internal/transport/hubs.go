package transport

import (
	"sync"

	"github.com/fairlock/fairlock/internal/clock"

	"github.com/redis/go-redis/v9"
)

// ErrClosed is what Subscribe returns once the Hubs are closed:
// fairlock.ErrClosed, which core.Link sets.
var ErrClosed error

// Hubs are one owner's pub/sub connections: a hub per Redis node it
// subscribes on (one, or one per Cluster master), made when a waiter first
// subscribes there, closed when idle or by Close.
type Hubs struct {
	client redis.UniversalClient
	clk    clock.Clock

	mu     sync.Mutex
	hubs   map[any]*hub // by node: the client itself, or a Cluster master's client
	closed bool         // Close ran: no hub is made again

	probe Probe // nil but in tests
}

// NewHubs returns the (not yet connected) hubs of client, whose idle
// channels linger by clk, and which report to probe if not nil.
func NewHubs(client redis.UniversalClient, clk clock.Clock, probe Probe) *Hubs {
	return &Hubs{client: client, clk: clk, probe: probe, hubs: map[any]*hub{}}
}

// Close closes every hub, whatever channels it has (its owner's waiters
// have gone), and makes Subscribe refuse from then on.
func (hs *Hubs) Close() {
	hs.mu.Lock()
	hubs := make([]*hub, 0, len(hs.hubs))
	for _, h := range hs.hubs {
		hubs = append(hubs, h)
	}
	hs.hubs = map[any]*hub{} // so that no idle sweep closes them too
	hs.closed = true
	hs.mu.Unlock()
	for _, h := range hubs {
		h.shut()
	}
}
