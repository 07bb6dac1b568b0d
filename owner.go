package fairlock

import (
	"context"

	"github.com/fairlock/fairlock/internal/core"
	"github.com/redis/go-redis/v9"
)

// MaxNameLen bounds the name of a lock of any kind, in bytes: every key and
// channel of the lock carries it. Hash a longer name (a file path, a URL)
// first.
const MaxNameLen = 1024

// Owner is what the handles made on it (fair.New, reentrant.New, ...)
// share: one go-redis client, the pub/sub connection their waiters are
// woken on, the fair queue's heartbeats and, while it holds anything, a
// connection of its own per server that tells it of a restart within about
// half a second. Make one per client and process, at start, share it, and
// Close it at the end. docs/architecture.md says what it keeps.
type Owner struct {
	core *core.Owner
}

// NewOwner returns an owner of handles on client: a *redis.Client, a
// Sentinel client (redis.NewFailoverClient), a *redis.ClusterClient, or
// any redis.UniversalClient but a *redis.Ring. It talks to Redis only when
// a handle is used. A nil client or a *redis.Ring gets an error wrapping
// ErrInvalidArgument.
func NewOwner(client redis.UniversalClient) (*Owner, error) {
	o, err := core.NewOwner(client)
	if err != nil {
		return nil, err
	}
	return &Owner{core: o}, nil
}

// Close shuts the owner down gracefully, for the end of a process or a
// test: new calls of its handles get ErrClosed; its waiters leave their
// queues; its holds end (their contexts with cause ErrClosed) and are
// released, each lock going to the next in line at once; its pub/sub
// connections close. It returns once Redis confirmed all of it, or with
// ctx's error when ctx ends first (the rest goes on in the background,
// within each handle's cleanup timeout). It is idempotent, and does not
// close the go-redis client: close that after the owner.
func (o *Owner) Close(ctx context.Context) error { return o.impl().Close(ctx) }

// Client returns the go-redis client the owner's handles use.
func (o *Owner) Client() redis.UniversalClient { return o.impl().Client() }

// impl is o's core; nil for a nil or zero Owner, whose calls then return
// an error wrapping ErrInvalidArgument, or nil.
func (o *Owner) impl() *core.Owner {
	if o == nil {
		return nil
	}
	return o.core
}

// The internal packages cannot import this one, which imports them: they
// get its errors, and the way between its types and their cores, here, before any
// handle can be made (every constructor takes an *Owner).
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
		Mutex: func(c *core.Mutex, w core.Wait) any { return &Mutex{core: c, wait: w} },
		MutexOf: func(v any) *core.Mutex {
			if m, ok := v.(*Mutex); ok {
				return m.impl()
			}
			return nil
		},
	})
}
