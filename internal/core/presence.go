package core

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/internal/wire"
	"github.com/redis/go-redis/v9"
)

// Presence (docs/presence.md). An owner made with WithPresence subscribes,
// before its first acquisition, to a channel of its own
// (wire.PresenceChannel), on a connection of its own, and keeps it for its
// life; its client id tells the scripts that it does (wire.NewIDs). Redis
// drops the subscription when the process dies, and a fair lock's waiter
// then ends the hold after PresenceGrace (queue.lua's holder_present).
//
// So the holder must never be the last to know: when the connection breaks
// while the process lives, every such hold of the owner (a fair lock's, an
// election's, a semaphore's or its gate's: Place.Presence) ends at once (ErrLockLost)
// and is released in the background, and a hold whose acquisition was sent
// before the current subscription was confirmed is ended as soon as it is
// made (covers). Acquisitions wait for the subscription (await).

// PresenceGrace is how long a holder's presence must have been gone before
// a waiter ends its hold; PresencePoll how often the head of a lock whose
// holder keeps a presence looks. Both mirror queue.lua.
const (
	PresenceGrace = 200 * time.Millisecond
	PresencePoll  = 50 * time.Millisecond
)

// presenceRetry is the pause between tries to subscribe again, after the
// first (at once) failed.
const presenceRetry = 100 * time.Millisecond

// presenceGone is why a hold ends when the owner's presence breaks.
const presenceGone = "the owner's presence connection to Redis broke, so a waiter may take the lock " +
	"(WithPresence): every fair lock, election and semaphore permit the owner holds ends"

type presence struct {
	o       *Owner
	channel string

	up   atomic.Bool  // subscribed: acquisitions may go
	ups  atomic.Int64 // how many times it came up (PresenceUps)
	mu   sync.Mutex
	ps   *redis.PubSub
	done chan struct{} // closed when run returns; nil until started
	// since is when the current subscription was confirmed (o's clock);
	// ready is closed at the next outcome (up, or a failure) and replaced;
	// err is why it is down, since its last failure (nil while up, and
	// before the first outcome).
	since time.Time
	ready chan struct{}
	err   error
}

func newPresence(o *Owner) *presence {
	return &presence{o: o, channel: wire.PresenceChannel(o.ids.Client()), ready: make(chan struct{})}
}

// await returns nil once the owner is subscribed, starting the
// subscription at the first call and waiting for its outcome. While it is
// down after a failure, it returns at once why (wrapping Redis's refusal,
// NOPERM say, so that the caller's wait gives up; any other failure is an
// outage the caller's wait rides out, trying again later) and the
// subscription is tried again in the background.
func (p *presence) await(ctx context.Context) error {
	for !p.up.Load() {
		p.mu.Lock()
		if p.done == nil {
			p.ps = p.o.client.Subscribe(context.Background()) // no channel yet: no call
			p.done = make(chan struct{})
			go p.run(p.ps)
		}
		ready, err := p.ready, p.err
		p.mu.Unlock()
		if err != nil {
			return err
		}
		select {
		case <-ready: // an outcome: look again
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// covers reports whether a hold whose acquisition was sent at since is
// covered by the presence: the subscription that is up now was confirmed
// before then, so no waiter can have found it gone since the hold began.
func (p *presence) covers(since time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.up.Load() && !p.since.After(since)
}

// awaitUp waits, unlike await, through failures, until the presence is up
// (true), or ctx or stop ends (false).
func (p *presence) awaitUp(ctx, stop context.Context) bool {
	for !p.up.Load() {
		p.mu.Lock()
		ready := p.ready
		p.mu.Unlock()
		if p.up.Load() {
			break
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return false
		case <-stop.Done():
			return false
		}
	}
	return true
}

// run subscribes, then reads the subscription until it is closed: a
// confirmation brings the presence up, an error takes it down (ending every
// hold), and the next read subscribes again (go-redis re-subscribes on a
// new connection). It subscribes here, not in await: a server that does not
// answer must hold up nobody but this goroutine.
func (p *presence) run(ps *redis.PubSub) {
	defer close(p.done)
	failed := false // the last read failed too: pause before the next
	if err := ps.Subscribe(context.Background(), p.channel); err != nil && !p.o.closed.Load() {
		p.broke(err) // the channel is kept: the next read subscribes again
		failed = true
	}
	for {
		msg, err := ps.Receive(context.Background())
		if p.o.closed.Load() {
			return
		}
		if err != nil {
			p.broke(err)
			if failed && !p.pause() {
				return
			}
			failed = true
			continue
		}
		failed = false
		if s, ok := msg.(*redis.Subscription); ok && s.Kind == "subscribe" {
			p.mu.Lock()
			if !p.up.Load() {
				p.since = p.o.clock.Now()
				p.err = nil
				p.up.Store(true)
				p.ups.Add(1)
				close(p.ready)
				p.ready = make(chan struct{})
			}
			p.mu.Unlock()
		}
	}
}

// broke takes the presence down after err: the holds end first, so that
// they end before any waiter can have seen the presence gone for the grace.
func (p *presence) broke(err error) {
	p.mu.Lock()
	was := p.up.Load()
	p.up.Store(false)
	p.err = fmt.Errorf("fairlock: WithPresence: the owner's subscription to %s failed: %w", p.channel, err)
	close(p.ready) // the calls that wait see it
	p.ready = make(chan struct{})
	p.mu.Unlock()
	if was {
		p.o.endAllHolds(presenceGone)
	}
}

// pause waits presenceRetry on o's clock; false if the owner closed meanwhile.
func (p *presence) pause() bool {
	t := make(chan struct{})
	timer := p.o.clock.AfterFunc(presenceRetry, func() { close(t) })
	select {
	case <-t:
		return !p.o.closed.Load()
	case <-p.o.closing.Done():
		timer.Stop()
		return false
	}
}

// stop closes the subscription and waits for run to return.
func (p *presence) stop() {
	p.mu.Lock()
	ps, done := p.ps, p.done
	p.mu.Unlock()
	if ps == nil {
		return
	}
	_ = ps.Close()
	<-done
}

// presenceRefused rejects the deployments presence cannot serve safely:
// Cluster, where a script sees only the subscriptions of its own node, and
// Sentinel, where a failover moves the locks to a master that never had the
// holders' subscriptions while a holder may learn of it only when Sentinel
// closes the old master's clients (10.6 s after SENTINEL FAILOVER in a
// gentle failover measured here): its hold could be ended meanwhile.
func presenceRefused(client redis.UniversalClient) error {
	switch c := client.(type) {
	case *redis.ClusterClient:
		return Invalid("WithPresence does not work on Cluster: a script sees only the subscriptions of its own node (docs/presence.md)")
	case *redis.Client:
		if c.Options().Addr == "FailoverClient" { // go-redis's mark of a Sentinel client
			return Invalid("WithPresence does not work on Sentinel: after a failover a holder's subscription is on the old master, " +
				"and its hold could be ended on the new one before it knows (docs/presence.md)")
		}
	}
	return nil
}

// PresenceUps returns how many times o's presence was confirmed (0 without
// WithPresence, or before its first acquisition): a test that breaks its
// connections waits for the count to grow, to know the owner noticed.
func PresenceUps(o *Owner) int64 {
	if o.presence == nil {
		return 0
	}
	return o.presence.ups.Load()
}

// endAllHolds ends every hold of o that a waiter may end once its presence
// is gone (Place.Presence) as lost (why), and releases each in Redis in
// the background (tracked as a clean-up: Close waits for it), so the lock
// goes to the next in line at once.
func (o *Owner) endAllHolds(why string) {
	for _, h := range o.heldWhere(func(h *hold) bool { return h.agent.Presence }) {
		o.giveUp(h, why)
	}
}

// giveUp ends h as lost (why) and, if that ended it, releases it in Redis
// in the background (counted as Bounded's background calls are, from
// before the hold ends).
func (o *Owner) giveUp(h *hold, why string) {
	o.hubs.ProbeBackground(1)
	o.cleanups.add(nil)
	done := func() {
		o.cleanups.done()
		o.hubs.ProbeBackground(-1)
	}
	if !h.end(ErrLockLost, why) {
		done()
		return
	}
	go func() {
		defer done()
		_ = h.releaseAll()
	}()
}
