package fairlock

import (
	"context"

	"github.com/fairlock/fairlock/internal/core"
	"github.com/redis/go-redis/v9"
)

// MaxNameLen bounds a lock's name, in bytes; hash a longer one first.
const MaxNameLen = 1024

// Owner is what handles share (client, pub/sub, heartbeats, restart
// checks): one per client and process is enough and the cheapest (a second
// works, with connections and heartbeats of its own); share it, and Close
// (or Drain) it at the end.
type Owner struct {
	core *core.Owner
}

// NewOwner returns an owner on client, any UniversalClient but a *redis.Ring,
// without a call to Redis, and adds a hook to a *redis.Client (see README).
func NewOwner(client redis.UniversalClient, opts ...OwnerOption) (*Owner, error) {
	var rig core.Rig
	for _, opt := range opts {
		if opt.set == nil {
			return nil, core.Invalid("a zero OwnerOption; use WithPresence")
		}
		opt.set(&rig)
	}
	o, err := core.NewOwnerWith(client, rig)
	if err != nil {
		return nil, err
	}
	return &Owner{core: o}, nil
}

// OwnerOption configures NewOwner: WithPresence.
type OwnerOption struct{ set func(*core.Rig) }

// WithPresence makes a holder's death move its fair locks on within a
// fraction of a second instead of at the end of the lease: the owner keeps
// one subscription on Redis, which Redis drops when the process dies. A
// blip costs nothing: if that connection breaks while the process lives,
// the owner subscribes again at once and confirms its holds; a fair lock,
// election, semaphore permit or read-write lock it cannot confirm within
// the grace (200 ms, less a margin, from its last answered PING), or at
// once if Redis cannot be reached again, ends (ErrLockLost) before anyone
// else can take it. Not on Cluster or Sentinel. See docs/presence.md.
func WithPresence() OwnerOption {
	return OwnerOption{func(r *core.Rig) { r.Presence = true }}
}

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
		OwnerOf: func(v any) *core.Owner {
			if o, ok := v.(*Owner); ok {
				return o.impl()
			}
			return nil
		},
		Wrap:  func(c *core.Owner) any { return &Owner{core: c} },
		Mutex: func(c *core.Mutex) any { return &Mutex{core: c} },
		MutexOf: func(v any) *core.Mutex {
			if m, ok := v.(*Mutex); ok {
				return m.impl()
			}
			return nil
		},
	})
}
