package fair

import (
	"context"
	"time"

	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/fairlock/fairlock/internal/waiting"
	"github.com/fairlock/fairlock/observe"
)

// A permitSource is what a semaphore's waiter waits for besides its gate:
// permits, which a release may serve it while it is still queued (serve in
// permits.lua), taking its entry out of the queue. A fair Mutex's waiter has
// none: it waits for the lock alone.
type permitSource interface {
	// served asks whether the waiter's permits were served to it while it
	// was queued: the grant, or nil. The queue asks when the waiter's entry
	// left the queue without a turn of the queue's own (the note that served
	// it may have been lost).
	served(ctx context.Context) (*core.Grant, error)
}

// outcome is how a wait in the queue ended; both nil: the wait elapsed.
type outcome struct {
	held   *core.Grant // the queue's lock is the caller's (a Mutex's hold, a semaphore's gate)
	served *core.Grant // permits were served to the caller as it waited (permitSource)
}

// waitTurn waits for the turn of entry, which the join r queued (sub: the
// subscription to its inbox, if the join had one).
func (qu *queue) waitTurn(ctx context.Context, a core.Attempt, entry string, sub *transport.Sub, r transport.FairAcquireReply) (outcome, error) {
	// From here on every way out that is not a hold leaves the queue.
	w := waiting.New(qu.h, a, "waiting in the queue", qu.h.Config.Clock.Now().Add(a.Wait))
	defer w.Close()
	if sub == nil {
		// Subscribed only now: a hand-off sent before the subscription took
		// effect never reaches this waiter, so it tries again once the
		// subscription is confirmed (the Ready wake, however soon it came).
		var err error
		if sub, err = core.HubsOf(qu.h.Owner).Subscribe(ctx, qu.inbox, entry); err != nil {
			qu.leave(ctx, entry)
			if ctx.Err() != nil {
				return outcome{}, ctx.Err()
			}
			return outcome{}, core.Step("subscribing to the lock's channel", err)
		}
		defer sub.Close()
	}
	w.Listen(sub)
	q := &queueWait{qu: qu, h: qu.h, ps: qu.ps, a: a, entry: entry, next: transport.ModeQueued, sub: sub, w: w}
	w.KeepPlace(q.place)
	q.hb, q.mem = joinHeartbeat(qu, entry, w.Sleeper())
	defer q.hb.leave(q.mem)
	// The last request answered "queued" was processed before any hand-off
	// to this entry: a granted lease counts from no earlier than its send.
	q.mem.queuedAt(r.Sent)
	q.queued(r)
	err := w.Run(ctx, q, false)
	return q.out, err
}

// queueWait is one queued Lock or TryLock call waiting for its turn
// (waiting.Steps). It sleeps until its hand-off, a head notice, the
// heartbeat's news, its fallback timer, the end of its wait, or ctx's end.
// The fallback (waiting.Loop.FallBackAt) is armed while the entry heads a
// held lock: 1 ms after that hold would expire on this client's clock (a
// lease that runs out sends no message).
type queueWait struct {
	qu    *queue
	h     core.Agent   // qu's
	ps    permitSource // nil: the caller waits for the queue's lock alone
	a     core.Attempt
	entry string // the entry's id in the queue: new after an eviction
	next  string // the mode of the next attempt: transport.ModeQueued, or transport.ModeJoin after an eviction
	sub   *transport.Sub
	w     *waiting.Loop
	hb    *heartbeat
	mem   *member // this call in the heartbeat

	// rc places Redis times on this client's clock, from the latest reply.
	rc redisClock

	out outcome // how the wait ended
}

// News for one queued entry: the hub's messages are parsed into transport.Note
// values (transport.ParseNote); the heartbeat's news (beatGrant, beatHead,
// beatLook, evicted, unreachable) comes in a transport.Wake whose Reason
// is transport.Notice, the news in its Notice field.

// beatGrant: the lock was handed to the entry (the heartbeat's news). byBeat:
// the beat made the grant itself, so the waiter's message is only now on
// its way; otherwise a release made it, and the waiter should have heard.
type beatGrant struct {
	transport.HandOff
	byBeat bool
}

// beatHead: the entry is the live head of the queue of a held lock, whose
// hold expires at Redis time expiry (ms) (the heartbeat's news).
type beatHead struct{ expiry int64 }

// beatLook: the entry is the first whose client is there behind a head
// whose client's presence is gone, and should look at Redis time expiry
// (ms), when those ahead of it may be passed over (the heartbeat's news:
// no message could have said it, so it is no rescue).
type beatLook struct{ expiry int64 }

// evicted: the entry lost its place, having been silent for longer than its
// wait timeout (the heartbeat's news).
type evicted struct{}

// unreachable: the heartbeat could not reach Redis (its news): the waiter
// rides the outage out while its place lasts (queueWait.unreachable).
type unreachable struct{ err error }

// done reports whether an outcome ends the wait.
func (o outcome) done() bool { return o.held != nil || o.served != nil }

// end ends the wait with out, or err.
func (q *queueWait) end(out outcome, err error) (bool, error) {
	q.out = out
	return true, err
}

// Try makes attempts until one either ends the wait or leaves the entry
// waiting (waiting.Steps).
func (q *queueWait) Try(ctx context.Context) (bool, error) {
	fellBack := q.w.FellBack()
	for {
		actx, cancel := q.w.Bound(ctx) // by the place's end while it lasts
		r, err := q.qu.try(actx, q.a, q.entry, q.next)
		cancel()
		if err != nil {
			return false, err
		}
		q.next = transport.ModeQueued
		switch {
		case r.Held && r.Handoff:
			if fellBack {
				// The reply says all that the message would have.
				q.w.Delivered(ctx, "a hand-off", q.handOffNote)
			}
			g, err := q.handedOff(ctx, r)
			if g != nil || err != nil {
				return q.end(outcome{held: g}, err)
			}
			continue // claimed too late: the next attempt tells where it stands
		case r.Held:
			return q.end(outcome{held: q.qu.grant(r, q.a, r.Sent, r.Sent, time.Time{})}, nil)
		case r.Evicted:
			if out, err := q.rejoin(ctx, fellBack); out.done() || err != nil {
				return q.end(out, err)
			}
			continue
		}
		q.mem.queuedAt(r.Sent)
		wasHead := q.w.FallingBack()
		q.queued(r)
		q.h.QueueNews(q.a, observe.Waiting, r.Queue) // a re-join's too: one Joined per wait
		if fellBack && r.Head && !wasHead {
			if p, found := q.w.Delivered(ctx, "becoming the head", q.note); found {
				done, again, err := q.onMessage(ctx, p)
				if again && !done && err == nil {
					continue
				}
				return done || err != nil, err
			}
		}
		return false, nil
	}
}

// News handles a hub message or the heartbeat's news (waiting.Steps).
func (q *queueWait) News(ctx context.Context, wk transport.Wake) (done, try bool, err error) {
	if wk.Reason == transport.Notice {
		return q.onNote(ctx, wk.Notice)
	}
	return q.onMessage(ctx, wk.Payload)
}

// Leave takes the entry out of the queue (waiting.Steps).
func (q *queueWait) Leave(ctx context.Context) { q.qu.leave(ctx, q.entry) }

// note reports whether payload is a note for this entry.
func (q *queueWait) note(payload string) bool {
	_, mine := transport.ParseNote(payload, q.entry)
	return mine
}

// servedNote reports whether payload serves this entry permits.
func (q *queueWait) servedNote(payload string) bool {
	return transport.IsNote[transport.Served](payload, q.entry)
}

// handOffNote reports whether payload hands the lock to this entry.
func (q *queueWait) handOffNote(payload string) bool {
	return transport.IsNote[transport.HandOff](payload, q.entry)
}

// place is when the entry's place in Redis runs out, as this client counts
// it: its last refresh plus its wait timeout, less the safety margin.
func (q *queueWait) place() time.Time {
	cfg := q.h.Config
	return q.mem.lastQueued().Add(cfg.WaitTimeout - cfg.Margin(cfg.WaitTimeout))
}

// onMessage handles a hub message: a note for this entry, or for another
// entry of this client (ignored), or "" (look again). It returns done (the
// wait's outcome is q.out) or err, or whether to try again at once.
func (q *queueWait) onMessage(ctx context.Context, payload string) (done, try bool, err error) {
	if payload == "" {
		return false, true, nil
	}
	n, mine := transport.ParseNote(payload, q.entry)
	if !mine {
		return false, false, nil
	}
	if n == nil {
		return false, true, nil // a note this client cannot read: look again
	}
	return q.onNote(ctx, n)
}

// onNote handles news for this entry, as onMessage does.
func (q *queueWait) onNote(ctx context.Context, n any) (done, try bool, err error) {
	switch n := n.(type) {
	case transport.HeadNotice:
		q.headUntil(n.Expiry)
	case beatGrant:
		if !n.byBeat {
			// A release granted it: its message should have come first.
			if p, found := q.w.Delivered(ctx, "a hand-off", q.handOffNote); found && q.handOffNote(p) {
				return q.onMessage(ctx, p)
			}
		}
		return q.onNote(ctx, n.HandOff)
	case beatLook:
		q.headUntil(n.expiry)
	case beatHead:
		if q.w.FallingBack() {
			break // it knew
		}
		p, found := q.w.Delivered(ctx, "becoming the head", q.note)
		if found && q.note(p) {
			return q.onMessage(ctx, p)
		}
		q.headUntil(n.expiry)
		if found { // "": look again
			return false, true, nil
		}
	case transport.HandOff:
		r := transport.FairAcquireReply{Held: true, Token: n.Token, Handoff: true, Granted: n.GrantedAt}
		g, err := q.handedOff(ctx, r)
		if g == nil && err == nil {
			return false, true, nil // claimed too late: the next attempt tells where it stands
		}
		q.out = outcome{held: g}
		return true, false, err
	case transport.Served:
		if q.ps == nil {
			return false, true, nil // nobody serves this waiter permits: look again
		}
		// Served after the last request answered "queued": both bound the
		// grant's time from below.
		since := q.rc.notLater(n.GrantedAt)
		if queued := q.mem.lastQueued(); queued.After(since) {
			since = queued
		}
		q.out = outcome{served: &core.Grant{Token: n.Token, Since: since,
			First: time.Duration(n.Expiry-n.GrantedAt) * time.Millisecond, Handoff: true}}
		return true, false, nil
	case transport.Freed:
		return false, true, nil // look again
	case evicted:
		out, err := q.rejoin(ctx, true)
		if out.done() || err != nil {
			q.out = out
			return true, false, err
		}
		return false, true, nil
	case unreachable:
		if !q.w.OutOfReach() {
			return false, false, q.w.Failed(ctx, n.err)
		}
		// Already riding it out: its own backoff timer tries again.
	}
	return false, false, nil
}

// handedOff is the hold a hand-off (its message, the heartbeat's notice of
// a lost one, or an attempt's reply) granted this entry; nil if it came too
// late to use and could not be claimed: the next try tells where the entry
// stands.
func (q *queueWait) handedOff(ctx context.Context, r transport.FairAcquireReply) (*core.Grant, error) {
	granted := q.rc.notLater(r.Granted)
	if q.ps == nil {
		// The caller's own hand-off. (A semaphore's waiter is handed its
		// gate, not the permits it asked for: those are recorded where
		// they are served.)
		q.a.HandedOff(granted)
	}
	return usable(ctx, q.qu.h, q.qu.grant(r, q.a, time.Time{}, q.mem.lastQueued(), granted), q.a)
}

// queued takes in a reply that left the entry waiting.
func (q *queueWait) queued(r transport.FairAcquireReply) {
	q.rc = clockOf(r)
	if r.Head {
		q.headUntil(r.Now + r.HoldMs) // when the current hold expires
	} else {
		q.w.StopFallback()
	}
}

// headUntil arms the fallback timer: the entry is the head, and the hold
// expires at Redis time expiry (ms).
func (q *queueWait) headUntil(expiry int64) {
	q.w.FallBackAt(q.rc.notEarlier(expiry).Add(time.Millisecond))
}

// rejoin gives the call a new entry at the tail: its old one was evicted
// after it fell silent past its wait timeout. A semaphore's waiter asks
// its permitSource first (the note that its permits were served can be
// lost with a connection); a grant it reports ends the wait, a rescue
// unless a message or the subscription's confirmation prompted the try
// (fellBack).
func (q *queueWait) rejoin(ctx context.Context, fellBack bool) (outcome, error) {
	if q.ps != nil {
		g, err := q.ps.served(ctx)
		if err != nil || g != nil {
			if g != nil && fellBack {
				q.w.Delivered(ctx, "permits served", q.servedNote)
			}
			return outcome{served: g}, err
		}
	}
	entry := q.qu.newEntry()
	q.h.QueueNews(q.a, observe.Evicted, 0)
	cfg := q.h.Config
	silent := cfg.Clock.Now().Sub(q.mem.lastQueued())
	if silent < cfg.WaitTimeout-cfg.Margin(cfg.WaitTimeout) {
		// Its place should have lasted: Redis lost it (a restart without
		// persistence, a failover to a replica the entry had not reached),
		// or, on an owner that keeps a presence, the waiter was passed over as
		// dead: its presence was gone for the grace.
		q.h.Info("waiter's entry vanished from the queue before its wait timeout (Redis lost its data in a restart or a failover, "+
			"or the owner's presence connection was gone for the grace and the waiter was passed over as dead); re-joining at the tail",
			"entry", q.entry, "new_entry", entry, "silent", silent)
		// Its owner's other releases and leaves of the last moments may
		// be lost too, and its hub left on the old master.
		q.h.EntryVanished()
	} else {
		q.h.Info("waiter was evicted from the queue after a stall longer than its wait timeout; re-joining at the tail",
			"entry", q.entry, "new_entry", entry, "silent", silent)
	}
	q.sub.SetID(entry)
	q.mem.rename(entry)
	q.entry, q.next = entry, transport.ModeJoin
	return outcome{}, nil
}
