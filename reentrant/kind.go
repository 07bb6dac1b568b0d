package reentrant

import (
	"context"
	"time"

	"github.com/fairlock/fairlock/internal/core"
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

func newKind(h core.Agent) core.Kind { return &kind{h: h} }

// attempt makes one try. It returns a grant, or how long the current hold
// may last.
func (k *kind) attempt(ctx context.Context, a core.Attempt) (*core.Grant, time.Duration, error) {
	h := k.h
	since := h.Config.Clock.Now()
	req := h.NewRequest()
	v, acked, err := h.RunAcquire(ctx, h.Config.Scripts.ReentrantAcquire, wire.ReentrantAcquire{
		Owner: h.OwnerArg(), Request: req.ID, Lease: h.MsArg(a.Lease), Stale: req.Stale,
	}.Args()...)
	h.Answered(ctx, req, err) // a lost reply's grant is undone
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		return nil, 0, core.Step("trying to take the lock", err)
	}
	r, err := wire.DecodeReentrantAcquire(v)
	if err != nil {
		return nil, 0, err
	}
	if r.Held {
		if err := h.Replicated(ctx, req, acked); err != nil {
			return nil, 0, err // undone: the caller holds nothing
		}
		return &core.Grant{Count: r.Count, Token: r.Token, Since: since}, 0, nil
	}
	return nil, time.Duration(r.HoldMs) * time.Millisecond, nil
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
	sub := core.SubscribeIfLive(k.h.Client, k.h.Channel, "")
	if sub != nil {
		defer sub.Close()
	}
	g, ttl, err := k.attempt(ctx, a)
	if err != nil || g != nil || (a.Wait == 0 && !a.Forever) {
		return g, err
	}
	clk := k.h.Config.Clock
	w := core.NewSleeper()
	defer w.Close()
	if !a.Forever {
		t := w.After(clk, a.Wait, core.Timeout)
		defer t.Stop()
	}
	if sub == nil {
		sub, err = core.Subscribe(ctx, k.h.Client, k.h.Channel, "")
		if err != nil {
			return nil, core.Step("subscribing to the lock's channel", err)
		}
		defer sub.Close()
		switch w.WaitReady(ctx, sub) {
		case core.Timeout:
			return nil, nil
		case core.Cancelled:
			return nil, ctx.Err()
		}
	} else {
		// Subscribed before the first try: nothing was missed. Sleep first.
		if done, g, err := k.sleep(ctx, w, sub, ttl); done {
			return g, err
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
		g, ttl, err := k.attempt(actx, a)
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
			if done, g, err := k.sleep(ctx, w, sub, pause); done {
				return g, ended(err)
			}
			continue
		}
		if err != nil || g != nil {
			return g, ended(err)
		}
		o.End()
		if done, g, err := k.sleep(ctx, w, sub, ttl); done {
			return g, err
		}
	}
}

// sleep waits for a wake-up, with a fallback timer at ttl (the current
// hold's remaining lease). done reports that the wait is over without the
// lock (the wait elapsed, or ctx ended).
func (k *kind) sleep(ctx context.Context, w *core.Sleeper, sub *core.Sub, ttl time.Duration) (bool, *core.Grant, error) {
	fallback := w.After(k.h.Config.Clock, ttl+time.Millisecond, core.Retry)
	wk := w.Next(ctx, sub)
	fallback.Stop()
	switch wk.Reason {
	case core.Timeout:
		return true, nil, nil
	case core.Cancelled:
		return true, nil, ctx.Err()
	}
	return false, nil, nil
}
