package fair

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/fairlock/fairlock/observe"
)

// queue is a lock's fair queue as one hold id (a slot of a handle) uses
// it: its scripts, its entries, and the wait for a turn (wait.go). It is
// made at the slot's first turn (lockTurn, core.State). Two
// primitives use it, each as a plain user: a fair Mutex waits in it for the
// lock, and a Semaphore's waiter waits in its gate's queue for the gate or
// for permits served to it there (permitSource).
type queue struct {
	h        core.Agent
	label    string // "<host>\t<pid>\t<label>", as Inspect shows it
	inbox    string // the channel its notes arrive on (transport.Inbox)
	labelArg any    // label, JSON-escaped (fair_acquire.lua's ARGV[4]), boxed once

	// permit is what a semaphore's waiter asks for, on its gate's queue
	// (zero elsewhere): every attempt tells the gate. ps is where it asks
	// whether its permits were served to it while it waited, and served
	// the permits Acquire found served to it (nil elsewhere).
	permit transport.PermitRequest
	ps     permitSource
	served *core.Grant
	// value is, in an election, the candidate's value (transport.EscapeValue),
	// set by each Campaign before it waits; nil elsewhere.
	value any

	mu        sync.Mutex
	abandoned []string // entries this hold id could not take out of the queue
}

// place is where a fair lock lives: the hold, the queue, the waiters'
// deadlines, and the channel that carries hand-offs and head notices.
func place(name string, scripts *lua.Scripts) core.Place {
	p := placeAt(transport.FairBase(name), scripts)
	p.Exclusive = true
	return p
}

// placeAt is a fair lock's layout on keys that start with base (a
// semaphore's gate has its own).
func placeAt(base string, scripts *lua.Scripts) core.Place {
	return core.Place{
		What:        "fair lock",
		Primitive:   observe.Fair,
		Acquire:     scripts.FairAcquire,
		Keys:        transport.QueueKeys(base),
		Channel:     transport.Channel(base),
		Release:     scripts.FairRelease,
		Leave:       scripts.FairLeave,
		ForceUnlock: scripts.FairForceUnlock,
		Watch:       scripts.FairHeartbeat,
		Wait:        lockTurn,
		Presence:    true,
	}
}

var hostname = func() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}()

// newQueue returns the queue of the lock h serves.
func newQueue(h core.Agent) *queue {
	label := transport.EncodeOrigin(hostname, os.Getpid(), h.Config.Label)
	return &queue{h: h, label: label, labelArg: transport.EscapeJSON(label), inbox: transport.Inbox(h.Channel, h.ID)}
}

// newGateQueue returns the queue of a semaphore's gate for one call of a
// waiter that asks for permit, which ps may serve it as it waits.
func newGateQueue(h core.Agent, permit transport.PermitRequest, ps permitSource) *queue {
	q := newQueue(h)
	q.permit, q.ps = permit, ps
	return q
}

// lockTurn waits out a turn of a fair Mutex (its place's Wait) in the
// queue of the turn's hold id.
func lockTurn(t *core.Turn) (*core.Grant, error) {
	return core.State(t, newQueue).Acquire(t.Context(), t.Attempt())
}

// Acquire is one Lock or TryLock of the queue's lock. It tries once;
// TryLock with no wait stops there (it never queues). Otherwise the first
// try queued the caller, and waitTurn waits for its turn. On a
// semaphore's gate the wait also ends when permits are served to the
// caller: the grant is then nil, and qu.served is theirs.
func (qu *queue) Acquire(ctx context.Context, a core.Attempt) (*core.Grant, error) {
	qu.leaveAbandoned(ctx)
	entry := qu.newEntry()
	if a.Wait == 0 && !a.Forever {
		r, err := qu.try(ctx, a, entry, transport.ModeTry)
		if err == nil && r.Settling {
			// Held by nobody's while a server that lost its data settles
			// (at most the presence grace): wait it out, and try once more.
			if err = core.Settle(ctx, qu.h.Config.Clock, time.Duration(r.HoldMs)*time.Millisecond); err == nil {
				r, err = qu.try(ctx, a, entry, transport.ModeTry)
			}
		}
		return qu.grant(r, a, r.Sent, r.Sent, time.Time{}), core.Step("trying to take the lock", err)
	}
	// On a busy lock the channel is already subscribed: listen for this
	// entry's hand-off before the first try, and no second try is needed.
	sub := core.HubsOf(qu.h.Owner).SubscribeIfLive(qu.inbox, entry)
	if sub != nil {
		defer sub.Close()
	}
	r, err := qu.try(ctx, a, entry, transport.ModeJoin)
	if err != nil {
		if !core.Refused(err) {
			qu.leave(ctx, entry) // the join may have queued it
		}
		return nil, core.Step("joining the queue", err)
	}
	if r.Held {
		if sub != nil {
			sub.Unused() // a lock free again lets its channel go (transport.Sub.Unused)
		}
		return qu.grant(r, a, r.Sent, r.Sent, time.Time{}), nil // a fresh entry is never handed the lock
	}
	qu.h.QueueNews(a, observe.Joined, r.Queue)
	out, err := qu.waitTurn(ctx, a, entry, sub, r)
	qu.served = out.served
	if out.held != nil {
		out.held.Waited = true
	}
	return out.held, err
}

// redisClock places Redis times (ms) on this client's clock, from a reply
// that carried Redis's clock: the script ran between the request's send and
// the reply's read, so each bound errs by at most one round trip, on the side
// its use can afford.
type redisClock struct {
	atSend time.Duration // Redis's clock minus this client's at the send
	atRead time.Duration // and at the read
}

// notLater places ms no later than it is on this client's clock: the start
// of a lease.
func (c redisClock) notLater(ms int64) time.Time { return time.UnixMilli(ms).Add(-c.atSend) }

// notEarlier places ms no earlier than it is: when to look whether a hold
// has expired.
func (c redisClock) notEarlier(ms int64) time.Time { return time.UnixMilli(ms).Add(-c.atRead) }

// clockOf is where Redis's clock stood for r, a reply that left the caller
// waiting.
func clockOf(r transport.FairAcquireReply) redisClock {
	now := time.UnixMilli(r.Now)
	return redisClock{atSend: now.Sub(r.Sent), atRead: now.Sub(r.Read)}
}

// try is one fair_acquire call for entry in mode; its reply carries when
// it was sent (after the owner's presence was up) and read.
func (qu *queue) try(ctx context.Context, a core.Attempt, entry, mode string) (transport.FairAcquireReply, error) {
	h := qu.h
	if err := h.Present(ctx); err != nil {
		return transport.FairAcquireReply{}, err
	}
	sent := h.Config.Clock.Now()
	req, stale := h.NewRequest()
	v, acked, err := h.RunAcquire(ctx, h.Config.Scripts.FairAcquire, transport.FairAcquire{
		Owner: h.IDArg(), Entry: entry, Request: req,
		Lease: h.MsArg(a.Lease), Wait: h.MsArg(h.Config.WaitTimeout), Mode: mode,
		Origin: qu.labelArg, Publish: h.PublishArg(), Channel: h.ChannelArg(), Stale: stale,
		Permit: qu.permit, Value: qu.value,
	}.Args()...)
	read := h.Config.Clock.Now()
	h.Answered(ctx, req, err) // a lost reply's grant is undone
	if err != nil {
		if ctx.Err() != nil {
			err = core.NoAnswer(sent, read, ctx.Err())
		}
		return transport.FairAcquireReply{}, err // the caller leaves the queue, or rides the outage out
	}
	r, err := transport.DecodeFairAcquire(v)
	if err != nil {
		return transport.FairAcquireReply{}, err
	}
	if r.Held {
		if err := h.Replicated(ctx, req, acked); err != nil {
			return transport.FairAcquireReply{}, err // undone: the caller holds nothing
		}
	}
	r.Sent, r.Read = sent, read
	return r, nil
}

// grant turns a reply into a Grant. A fresh acquisition's lease counts
// from sent; a hand-off's from grantedAt (placed on this client's clock no
// later than it is, and never before queued, the last "queued" answer), up
// to queued + wait timeout: Redis keeps an unclaimed grant until the
// earlier of grant time + lease and the entry's deadline, set after queued.
func (qu *queue) grant(r transport.FairAcquireReply, a core.Attempt, sent, queued, grantedAt time.Time) *core.Grant {
	if !r.Held {
		return nil
	}
	if !r.Handoff {
		return &core.Grant{Token: r.Token, Since: sent}
	}
	since := queued
	if grantedAt.After(since) {
		since = grantedAt
	}
	return &core.Grant{
		Token: r.Token, Since: since, Handoff: true,
		First: min(a.Lease, queued.Add(qu.h.Config.WaitTimeout).Sub(since)),
	}
}

// usable vets a hand-off (h's grant g) before Lock returns it. With
// fairlock.WithReplicas it is claimed at once, with WAIT (not on enough
// replicas: an error wraps fairlock.ErrNotReplicated, and the hold was
// passed on). Otherwise a grant that came so late (this client was cut
// off while its entry lived, say) that less than the drift margin of a
// full first lease is left is claimed now, and returned as a full hold. A
// hold gone by the claim gives nil, nil: the caller keeps waiting, and its
// next attempt finds out where it stands.
func usable(ctx context.Context, h core.Agent, g *core.Grant, a core.Attempt) (*core.Grant, error) {
	if g == nil || !g.Handoff {
		return g, nil
	}
	if h.Config.Replicas > 0 {
		since, err := h.ClaimReplicated(ctx, *g, a.Lease, a.Fixed)
		if errors.Is(err, core.ErrLockLost) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return &core.Grant{Token: g.Token, Since: since}, nil
	}
	cfg := h.Config
	margin := cfg.Margin(min(a.Lease, cfg.WaitTimeout)) // the longest first lease a grant can have
	if left := g.Since.Add(g.First - margin).Sub(cfg.Clock.Now()); left >= margin {
		return g, nil
	}
	since, ok, err := h.Claim(ctx, *g, a.Lease, a.Fixed)
	if err != nil || !ok {
		return nil, nil
	}
	return &core.Grant{Token: g.Token, Since: since}, nil
}

// leave takes the entry out of the queue, even when ctx has ended (within
// core.Grace; the call goes on in the background after that). If Redis
// cannot be reached, the entry stops being refreshed and is evicted within
// one wait timeout.
func (qu *queue) leave(ctx context.Context, entry string) {
	_ = qu.h.Bounded(ctx, "leaving the queue", func(ctx context.Context) error {
		err := qu.leaveOnce(ctx, entry)
		if err != nil {
			qu.h.Info("leaving the queue failed; the entry will be evicted when its deadline passes", "entry", entry, "error", err)
			// Until then the lock could be handed to it, and this handle
			// would take that grant for its own: the next Lock removes it
			// first.
			qu.mu.Lock()
			qu.abandoned = append(qu.abandoned, entry)
			qu.mu.Unlock()
		}
		return err
	})
}

func (qu *queue) leaveOnce(ctx context.Context, entry string) error {
	h := qu.h
	return h.Config.Scripts.FairLeave.Run(ctx, h.Client, h.Mode(), h.Keys,
		transport.Leave{Owner: h.IDArg(), Entry: entry, Publish: h.PublishArg(), Channel: h.ChannelArg()}.Args()...).Err()
}

// leaveAbandoned removes the entries earlier calls could not remove, giving
// back any grant made to them, before this hold id joins again.
func (qu *queue) leaveAbandoned(ctx context.Context) {
	qu.mu.Lock()
	entries := qu.abandoned
	qu.abandoned = nil
	qu.mu.Unlock()
	if len(entries) == 0 {
		return
	}
	_ = qu.h.Bounded(ctx, "leaving the queue", func(ctx context.Context) error {
		var left []string
		for _, e := range entries {
			if err := qu.leaveOnce(ctx, e); err != nil {
				left = append(left, e)
			}
		}
		qu.mu.Lock()
		qu.abandoned = append(qu.abandoned, left...)
		qu.mu.Unlock()
		return nil
	})
}

func (qu *queue) newEntry() string { return qu.h.NewEntry() }
