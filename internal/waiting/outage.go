package waiting

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/fairlock/fairlock/internal/core"
	"github.com/redis/go-redis/v9"
)

// The backoff of a waiter that cannot reach Redis (outage): from MinPause,
// doubling up to MaxPause, each pause jittered by up to a half.
const (
	MinPause = 10 * time.Millisecond
	MaxPause = time.Second
)

// outage is a waiter's spell without Redis: since when, its cause, and
// the level of its backoff. The zero value: Redis is in reach.
type outage struct {
	since time.Time
	cause error
	level time.Duration
}

// active reports whether the waiter is out of reach of Redis.
func (o *outage) active() bool { return !o.since.IsZero() }

// failed records a try that failed at now with err: it reports whether the
// outage began with it, and returns the jittered pause before the next try
// (MinPause, doubling up to MaxPause).
func (o *outage) failed(now time.Time, err error) (began bool, pause time.Duration) {
	began = o.since.IsZero()
	if began {
		o.since, o.cause = now, err
	} else if errors.Is(o.cause, context.DeadlineExceeded) {
		o.cause = err // a time bound of the waiter's own says less than the link did
	}
	o.level = min(max(2*o.level, MinPause), MaxPause)
	return began, o.level/2 + rand.N(o.level/2+1)
}

// end records that Redis answered again.
func (o *outage) end() { *o = outage{} }

// ended is the error (err) that ends a wait while doing what ("waiting in
// the queue"): during an outage, one that also says so and wraps its cause.
func (o *outage) ended(now time.Time, what string, err error) error {
	if err == nil || !o.active() {
		return err
	}
	return fmt.Errorf("%s, Redis out of reach for %v (%w): %w", what, now.Sub(o.since).Round(time.Millisecond), o.cause, err)
}

// transient reports whether err is about reaching Redis (the network, a
// server loading or failing over), not an answer a retry would repeat.
func transient(err error) bool {
	if err == nil || errors.Is(err, core.ErrNotReplicated) {
		return false // Redis answered: the replicas did not, and the grant was undone
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true // no reply: the network, a closed connection, a timeout
	}
	msg := rerr.Error()
	for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
