package reentrant

import (
	"context"
	"time"

	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/inbox"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/waiting"
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
// confirmed (so a release in between is not missed), then waits (waiting.Loop)
// for a release's wake-up, or until the current hold's lease would run out.
// When the channel is already subscribed (a busy lock), the waiter listens
// before its first try and needs no second one.
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
	w := waiting.New(k.h, a, "waiting for the lock", clk.Now().Add(a.Wait))
	defer w.Close()
	if sub == nil {
		sub, err = core.Inbox(k.h.Shared).Subscribe(ctx, k.h.Channel, "")
		if err != nil {
			return nil, core.Step("subscribing to the lock's channel", err)
		}
		defer sub.Close()
		// Subscribed only now: the confirmation's wake tries again.
	}
	w.Listen(sub)
	kw := &waiter{k: k, a: a, w: w, sub: sub}
	kw.sleep(ttl)
	err = w.Run(ctx, kw, false)
	return kw.g, err
}

// waiter is one Acquire waiting for a release (waiting.Waiter).
type waiter struct {
	k     *kind
	a     core.Attempt
	w     *waiting.Loop
	sub   *inbox.Sub
	wakes uint64 // the wake-ups its channel had read when it last fell asleep (Sub.Wakes)
	g     *core.Grant
}

// sleep arms the fallback: a try when the current hold's lease (ttl) would
// run out, since a lease that runs out sends no wake-up.
func (kw *waiter) sleep(ttl time.Duration) {
	kw.w.FallBackAt(kw.w.Clock().Now().Add(ttl + time.Millisecond))
	kw.wakes = kw.sub.Wakes()
}

// Try makes one attempt, asking whether the lock was freed by its holder
// when a timer, not a wake-up, prompted it.
func (kw *waiter) Try(ctx context.Context) (bool, error) {
	actx, cancel := kw.w.Bound(ctx)
	fellBack := kw.w.FellBack()
	g, ttl, freed, err := kw.k.attempt(actx, kw.a, fellBack)
	cancel()
	if err != nil {
		return false, err
	}
	if g != nil {
		if freed && fellBack {
			// Its timer found the lock released: the release's wake-up
			// should have come, to it or to another waiter of this client.
			wakes := kw.wakes
			kw.w.Delivered(ctx, "the lock released", func(string) bool { return kw.sub.Wakes() > wakes })
		}
		kw.g = g
		return true, nil
	}
	kw.sleep(ttl)
	return false, nil
}

// News is a wake-up: the lock was released (or the connection came back),
// so try again.
func (kw *waiter) News(context.Context, inbox.Wake) (done, try bool, err error) {
	return false, true, nil
}

// Leave: a waiter of the reentrant lock leaves nothing in Redis.
func (kw *waiter) Leave(context.Context) {}
