package reentrant

import (
	"context"
	"time"

	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/fairlock/fairlock/internal/waiting"
	"github.com/fairlock/fairlock/observe"
)

// kind is the reentrant lock's scripts and wait, for one hold id.
type kind struct {
	h core.Agent
}

// lockTurn waits out a turn of a reentrant Mutex (its place's Wait) as the
// turn's hold id.
func lockTurn(t *core.Turn) (*core.Grant, error) {
	return core.State(t, func(h core.Agent) *kind { return &kind{h: h} }).Acquire(t.Context(), t.Attempt())
}

// place is where a reentrant lock lives: its hold, its waiters and their
// deadlines, and the channel under which each client has its inbox.
func place(name string, scripts *lua.Scripts) core.Place {
	base := transport.ReentrantKey(name)
	return core.Place{
		What:        "reentrant lock",
		Primitive:   observe.Reentrant,
		Acquire:     scripts.ReentrantAcquire,
		Keys:        transport.QueueKeys(base),
		Channel:     transport.Channel(base),
		Release:     scripts.ReentrantRelease,
		ForceUnlock: scripts.ReentrantForceUnlock,
		Watch:       scripts.ReentrantWatch, // after a release that woke a waiter that keeps a presence
		Wait:        lockTurn,
		Presence:    true, // a holder gone for the grace is ended by an attempt (reentrant_acquire.lua)
		Exclusive:   true,
	}
}

// attempt makes one try, for waiter (its waiter id; "" for a try that never
// waits). It returns a grant, or how long the current hold may last; with
// askFreed, freed says that a fresh grant's lock was free because the last
// wake-up went to this waiter.
func (k *kind) attempt(ctx context.Context, a core.Attempt, waiter string, askFreed bool) (g *core.Grant, ttl time.Duration, freed bool, err error) {
	h := k.h
	// The owner's presence first: a hold's lease counts from the send, and
	// one taken while the presence is down must be confirmed (core).
	if err := h.Present(ctx); err != nil {
		return nil, 0, false, err
	}
	since := h.Config.Clock.Now()
	req, stale := h.NewRequest()
	v, acked, err := h.RunAcquire(ctx, h.Config.Scripts.ReentrantAcquire, transport.ReentrantAcquire{
		Owner: h.IDArg(), Request: req, Lease: h.MsArg(a.Lease), Stale: stale,
		Waiter: waiter, Wait: h.MsArg(h.Config.WaitTimeout), AskFreed: askFreed,
	}.Args()...)
	if err != nil {
		at := h.Config.Clock.Now()
		h.Answered(ctx, req, err) // a lost reply's grant is undone
		if ctx.Err() != nil {
			err = core.NoAnswer(since, at, ctx.Err())
		}
		return nil, 0, false, core.Step("trying to take the lock", err)
	}
	h.Answered(ctx, req, nil)
	r, err := transport.DecodeReentrantAcquire(v)
	if err != nil {
		return nil, 0, false, err
	}
	if r.Held {
		if err := h.Replicated(ctx, req, acked); err != nil {
			return nil, 0, false, err // undone: the caller holds nothing
		}
		return &core.Grant{Token: r.Token, Since: since}, 0, r.Freed, nil
	}
	if r.Settling && waiter == "" {
		// Held by nobody's while a server that lost its data settles (at
		// most the presence grace): a try waits it out, and tries once more.
		if err := core.Settle(ctx, h.Config.Clock, time.Duration(r.HoldMs)*time.Millisecond); err != nil {
			return nil, 0, false, core.Step("trying to take the lock", err)
		}
		return k.attempt(ctx, a, waiter, askFreed)
	}
	return nil, time.Duration(r.HoldMs) * time.Millisecond, false, nil
}

// Acquire tries once. If the lock is taken and the caller may wait, that
// try put it among the lock's waiters in Redis, and it waits (waiting.Loop)
// in its client's inbox of the lock for the wake-up a release sends to the
// longest-waiting live waiter, trying again when woken, when the current
// hold's lease would run out, and every wait timeout / 3 (which keeps its
// place: a waiter silent for a wait timeout is passed over). Subscribed
// only after that first try, it tries once more when the subscription is
// confirmed, so that a wake-up sent in between is not missed. When the
// inbox is already subscribed (a busy lock), it listens before its first
// try and needs no second one.
func (k *kind) Acquire(ctx context.Context, a core.Attempt) (*core.Grant, error) {
	if a.Wait == 0 && !a.Forever {
		g, _, _, err := k.attempt(ctx, a, "", false)
		return g, err
	}
	id := k.h.NewEntry()
	inboxes := core.HubsOf(k.h.Owner)
	channel := transport.Inbox(k.h.Channel, id)
	sub := inboxes.SubscribeIfLive(channel, id)
	if sub != nil {
		defer sub.Close()
	}
	kw := &waiter{k: k, a: a, id: id}
	g, ttl, _, err := k.attempt(ctx, a, id, false)
	if err != nil {
		if !core.Refused(err) {
			kw.Leave(ctx) // the try may have made it a waiter
		}
		return nil, err
	}
	if g != nil {
		if sub != nil {
			sub.Unused() // a lock free again lets its channel go (transport.Sub.Unused)
		}
		return g, nil
	}
	clk := k.h.Config.Clock
	w := waiting.New(k.h, a, "waiting for the lock", clk.Now().Add(a.Wait))
	defer w.Close()
	if sub == nil {
		sub, err = inboxes.Subscribe(ctx, channel, id)
		if err != nil {
			kw.Leave(ctx)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, core.Step("subscribing to the lock's channel", err)
		}
		defer sub.Close()
		// Subscribed only now: the confirmation's wake tries again.
	}
	w.Listen(sub)
	kw.w = w
	kw.sleep(ttl)
	err = w.Run(ctx, kw, false)
	if kw.g != nil {
		kw.g.Waited = true
	}
	return kw.g, err
}

// waiter is one Acquire waiting for a wake-up (waiting.Steps).
type waiter struct {
	k  *kind
	a  core.Attempt
	id string // its waiter id in Redis
	w  *waiting.Loop
	g  *core.Grant
}

// sleep arms the fallback: a try when the current hold's lease (ttl) would
// run out, since a lease that runs out sends no wake-up, or a wait timeout
// / 3 from now, which keeps the waiter's place, whichever comes first.
func (kw *waiter) sleep(ttl time.Duration) {
	kw.w.FallBackAt(kw.w.Clock().Now().Add(min(ttl+time.Millisecond, kw.k.h.Config.WaitTimeout/3)))
}

// Try makes one attempt, asking whether its wake-up was lost when a timer,
// not a wake-up, prompted it.
func (kw *waiter) Try(ctx context.Context) (bool, error) {
	actx, cancel := kw.w.Bound(ctx)
	fellBack := kw.w.FellBack()
	g, ttl, freed, err := kw.k.attempt(actx, kw.a, kw.id, fellBack)
	cancel()
	if err != nil {
		return false, err
	}
	if g != nil {
		if freed && fellBack {
			// Its timer found the lock free, and the last wake-up had gone
			// to it: that message should have come.
			kw.w.Delivered(ctx, "the lock released", func(p string) bool {
				n, mine := transport.ParseNote(p, kw.id)
				_, freed := n.(transport.Freed)
				return mine && freed
			})
		}
		kw.g = g
		return true, nil
	}
	kw.sleep(ttl)
	return false, nil
}

// News is a wake-up: the lock was freed and this waiter is the
// longest-waiting live one, so try again.
func (kw *waiter) News(context.Context, transport.Wake) (done, try bool, err error) {
	return false, true, nil
}

// Leave takes the waiter out of the lock's waiters, passing on a wake-up
// that went to it while the lock is still free. If Redis cannot be reached,
// its deadline passes within a wait timeout, and wake-ups pass it over.
func (kw *waiter) Leave(ctx context.Context) {
	h := kw.k.h
	_ = h.Bounded(ctx, "leaving the lock's waiters", func(ctx context.Context) error {
		err := h.Config.Scripts.ReentrantLeave.Run(ctx, h.Client, h.Mode(), h.Keys,
			transport.Leave{Owner: h.IDArg(), Entry: kw.id, Publish: h.PublishArg(), Channel: h.ChannelArg()}.Args()...).Err()
		if err != nil {
			h.Info("leaving the lock's waiters failed; the waiter is passed over once its deadline passes", "waiter", kw.id, "error", err)
		}
		return err
	})
}
