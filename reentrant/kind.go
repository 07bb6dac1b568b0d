package reentrant

import (
	"context"
	"time"

	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/inbox"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/wire"
	"github.com/fairlock/fairlock/observe"
)

// kind is the reentrant lock's scripts and wait.
type kind struct {
	h core.Agent
}

// place is where a reentrant lock lives: one hash, and a wake-up channel.
func place(name string, scripts *lua.Scripts) core.Place {
	return core.Place{
		What:        "reentrant lock",
		Primitive:   observe.Reentrant,
		Acquire:     scripts.ReentrantAcquire,
		Keys:        []string{wire.ReentrantKey(name)},
		Channel:     wire.Channel(wire.ReentrantKey(name)),
		Release:     scripts.ReentrantRelease,
		ForceUnlock: scripts.ReentrantForceUnlock,
	}
}

// kindOf is what waits for a turn of the handle: its owner id's, made at
// its first turn.
func kindOf(t *core.Turn) *kind {
	if k, ok := t.State().(*kind); ok {
		return k
	}
	k := &kind{h: t.Agent()}
	t.SetState(k)
	return k
}

// attempt makes one try. It returns a grant, or how long the current hold
// may last; with askFreed, freed says that a fresh grant's lock was
// released by its last holder (not left to its lease's end).
func (k *kind) attempt(ctx context.Context, a core.Attempt, askFreed bool) (g *core.Grant, ttl time.Duration, freed bool, err error) {
	h := k.h
	since := h.Config.Clock.Now()
	req := h.NewRequest()
	v, acked, err := h.RunAcquire(ctx, h.Config.Scripts.ReentrantAcquire, wire.ReentrantAcquire{
		Owner: h.OwnerArg(), Request: req.ID, Lease: h.MsArg(a.Lease), Stale: req.Stale, AskFreed: askFreed,
	}.Args()...)
	h.Answered(ctx, req, err) // a lost reply's grant is undone
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, false, ctx.Err()
		}
		return nil, 0, false, core.Step("trying to take the lock", err)
	}
	r, err := wire.DecodeReentrantAcquire(v)
	if err != nil {
		return nil, 0, false, err
	}
	if r.Held {
		if err := h.Replicated(ctx, req, acked); err != nil {
			return nil, 0, false, err // undone: the caller holds nothing
		}
		return &core.Grant{Token: r.Token, Since: since}, 0, r.Freed, nil
	}
	return nil, time.Duration(r.HoldMs) * time.Millisecond, false, nil
}

// Acquire tries once; if the lock is taken and the caller may wait, it
// subscribes to the lock's channel, tries again once the subscription is
// confirmed (so a release in between is not missed), then sleeps until a
// release message, or until the current hold's lease would run out. When the
// channel is already subscribed (a busy lock), the waiter listens before its
// first try and needs no second one.
func (k *kind) Acquire(ctx context.Context, a core.Attempt) (*core.Grant, error) {
	// On a busy lock the channel is already subscribed: listen before the
	// first try, and no release can slip between the try and the wait.
	sub := core.Inbox(k.h.Shared).SubscribeIfLive(k.h.Channel, "")
	if sub != nil {
		defer sub.Close()
	}
	g, ttl, _, err := k.attempt(ctx, a, false)
	if err != nil || g != nil || (a.Wait == 0 && !a.Forever) {
		return g, err
	}
	clk := k.h.Config.Clock
	w := inbox.NewSleeper()
	defer w.Close()
	if !a.Forever {
		t := w.After(clk, a.Wait, inbox.Timeout)
		defer t.Stop()
	}
	var n nap // the latest sleep
	if sub == nil {
		sub, err = core.Inbox(k.h.Shared).Subscribe(ctx, k.h.Channel, "")
		if err != nil {
			return nil, core.Step("subscribing to the lock's channel", err)
		}
		defer sub.Close()
		switch w.WaitReady(ctx, sub) {
		case inbox.Timeout:
			return nil, nil
		case inbox.Cancelled:
			return nil, ctx.Err()
		}
	} else {
		// Subscribed before the first try: nothing was missed. Sleep first.
		if n = k.sleep(ctx, w, sub, ttl); n.done {
			return nil, n.err
		}
	}
	var o core.Outage
	ended := func(err error) error { return o.Ended(clk.Now(), "waiting for the lock", err) }
	for {
		actx, cancel := ctx, context.CancelFunc(nil)
		if o.Active() {
			// Bound the try: go-redis's own retries take seconds.
			actx, cancel = context.WithTimeout(ctx, core.MaxPause)
		}
		g, ttl, freed, err := k.attempt(actx, a, n.fellBack)
		if cancel != nil {
			cancel()
		}
		if err != nil && ctx.Err() == nil && core.Transient(err) {
			// Redis is out of reach for a moment: ride it out, trying
			// again after a jittered backoff, until ctx or the wait ends.
			began, pause := o.Failed(clk.Now(), err)
			if began {
				k.h.Info("Redis cannot be reached; the waiter tries again", "error", err)
			}
			if n = k.sleep(ctx, w, sub, pause); n.done {
				return nil, ended(n.err)
			}
			continue
		}
		if g != nil && freed && n.fellBack {
			// Its timer found the lock released: the release's wake-up
			// should have come, to it or to another waiter of this client.
			k.h.Delivered(ctx, a, sub, "the lock released", func(string) bool { return sub.Wakes() > n.wakes })
		}
		if err != nil || g != nil {
			return g, ended(err)
		}
		o.End()
		if n = k.sleep(ctx, w, sub, ttl); n.done {
			return nil, n.err
		}
	}
}

// nap is how one sleep of a waiter ended.
type nap struct {
	done     bool   // the wait is over without the lock: it elapsed (err nil), or ctx ended
	err      error  // ctx's error, when done
	fellBack bool   // its timer woke it, not a wake-up message
	wakes    uint64 // the wake-ups its channel had read when it fell asleep (Sub.Wakes)
}

// timerWake is the Notice of a sleep's own timer.
type timerWake struct{}

// sleep waits for a wake-up, with a fallback timer at ttl (the current
// hold's remaining lease, or the outage's backoff).
func (k *kind) sleep(ctx context.Context, w *inbox.Sleeper, sub *inbox.Sub, ttl time.Duration) nap {
	n := nap{wakes: sub.Wakes()}
	fallback := k.h.Config.Clock.AfterFunc(ttl+time.Millisecond, func() { w.Fire(inbox.Notice, timerWake{}) })
	wk := w.Next(ctx, sub)
	fallback.Stop()
	switch wk.Reason {
	case inbox.Timeout:
		n.done = true
	case inbox.Cancelled:
		n.done, n.err = true, ctx.Err()
	case inbox.Notice:
		n.fellBack = true
	}
	return n
}
