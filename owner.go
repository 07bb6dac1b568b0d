package fairlock

import (
	"context"

	"github.com/fairlock/fairlock/internal/core"
	"github.com/redis/go-redis/v9"
)

// MaxNameLen bounds a lock's name, in bytes; hash a longer one first.
const MaxNameLen = 1024

// Owner is what handles share (client, pub/sub, heartbeats, restart
// checks, and its presence: NewOwner): one per client and process is enough and the cheapest (a second
// works, with connections and heartbeats of its own); share it, and Close
// (or Drain) it at the end.
type Owner struct {
	core *core.Owner
}

// NewOwner returns an owner on client, any UniversalClient but a *redis.Ring,
// without a call to Redis, and adds a hook to a *redis.Client (see README).
//
// The owner keeps a presence by default, on every client (a single server,
// Sentinel, an address that moves to a promoted replica, Cluster): a
// pub/sub subscription (on Cluster, one per master) that Redis drops when
// the process dies, so that a dead holder's fair or
// reentrant lock, election or semaphore permit moves on within a quarter of
// a second and its dead waiters are passed over, where a lease (30 s) or a
// wait timeout (10 s) was the cost. Its price: when the owner's connection
// breaks and Redis cannot be reached again at once (down and refusing
// connections, a restart), its holds end at once (ErrLockLost), where a
// lease rides that out; a connection that comes back within the grace (200 ms) costs
// nothing, and a stall with the connections open (Redis paused, a silent
// network) is ridden out up to the lease. A failover to a replica ends no
// live hold: a waiter counts a holder gone only where its own subscription
// is, and the subscription follows the master (docs/presence.md,
// "Failovers", says the window left). WithoutPresence turns it off. See
// docs/presence.md.
func NewOwner(client redis.UniversalClient, opts ...OwnerOption) (*Owner, error) {
	if err := core.CheckClient(client); err != nil {
		return nil, err
	}
	var choice ownerChoice
	for _, opt := range opts {
		if opt.set == nil {
			return nil, core.Invalid("a zero OwnerOption; use WithPresence or WithoutPresence")
		}
		opt.set(&choice)
	}
	if choice.on && choice.off {
		return nil, core.Invalid("WithPresence and WithoutPresence together: choose one")
	}
	o, err := core.NewOwnerWith(client, core.Rig{Presence: !choice.off})
	if err != nil {
		return nil, err
	}
	return &Owner{core: o}, nil
}

// OwnerOption configures NewOwner: WithPresence, WithoutPresence.
type OwnerOption struct{ set func(*ownerChoice) }

// ownerChoice is what NewOwner's options asked for.
type ownerChoice struct{ on, off bool }

// WithPresence asks for the presence that NewOwner keeps by default. With
// it, a holder's death moves its locks on within a
// fraction of a second instead of at the end of the lease: the owner keeps
// one subscription on Redis (one per master on Cluster), which Redis drops
// when the process dies. A
// blip costs nothing: if that connection breaks while the process lives,
// the owner subscribes again at once and confirms its holds; a fair or
// reentrant lock, election, semaphore permit or read-write lock it cannot
// confirm within the grace (200 ms, less a margin, from its last answered
// PING), or at once if Redis cannot be reached again, ends (ErrLockLost)
// before anyone else can take it. See docs/presence.md.
func WithPresence() OwnerOption {
	return OwnerOption{func(c *ownerChoice) { c.on = true }}
}

// WithoutPresence makes an owner that keeps no presence: its holds ride
// out an outage of Redis as long as a renewal gets through before their
// lease runs out (the watchdog renews every third of the lease, 30 s by
// default), and a dead holder's locks, and a dead waiter's place, last until
// their lease or wait timeout runs out. For deployments where Redis is
// often unreachable for longer than the grace (200 ms) and a crash is
// rare, and for an ACL user without pub/sub. On a deployment that fails
// over to replicas, give every owner a presence or none: a waiter of an
// owner without one counts a holder gone on a new master that its
// subscription has not reached yet.
// See docs/presence.md, "What it costs, and when to turn it off".
func WithoutPresence() OwnerOption {
	return OwnerOption{func(c *ownerChoice) { c.off = true }}
}

// KeepsPresence reports whether the owner keeps a presence: always, but
// with WithoutPresence.
func (o *Owner) KeepsPresence() bool { return o.impl().KeepsPresence() }

// Close ends the owner: waiters leave, holds go to the next in line, calls
// get ErrClosed. It returns when Redis confirmed it or ctx ended; either
// way the holds' contexts have ended (cause ErrClosed) by then.
func (o *Owner) Close(ctx context.Context) error { return o.impl().Close(ctx) }

// Drain is the graceful shutdown of a rolling deploy: the owner's handles
// take no new locks and join no queue (their calls get ErrClosed) and its
// waiters leave their queues, while its running holds go on until their
// Unlock (re-entries included); once none is left, the owner closes as
// Close does. If ctx ends first, Close begins at once: the holds left end
// (their contexts with cause ErrClosed, before Drain returns) and go to the
// next in line, and Drain returns ctx's error. See docs/getting-started.md, "Rolling deploys".
func (o *Owner) Drain(ctx context.Context) error { return o.impl().Drain(ctx) }

// Client returns the go-redis client the owner's handles use.
func (o *Owner) Client() redis.UniversalClient { return o.impl().Client() }

func (o *Owner) impl() *core.Owner {
	if o == nil {
		return nil
	}
	return o.core
}

// Hand the internal packages, which cannot import this one, what they need.
func init() {
	core.Link(core.Public{
		InvalidArgument: ErrInvalidArgument, NotHeld: ErrNotHeld, LockLost: ErrLockLost,
		Released: ErrReleased, Pending: ErrPending, Closed: ErrClosed, NotReplicated: ErrNotReplicated,
		DataLayout: ErrDataLayout,
		OwnerOf: func(v any) *core.Owner {
			if o, ok := v.(*Owner); ok {
				return o.impl()
			}
			return nil
		},
		Wrap: func(c *core.Owner) any { return &Owner{core: c} },
	})
}
