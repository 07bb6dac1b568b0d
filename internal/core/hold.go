package core

import (
	"context"
	"sync"
	"time"

	"github.com/fairlock/fairlock/internal/clock"
)

// Grant is what an acquiring call learned: the hold's count and token, and
// from when the client may count the lease.
type Grant struct {
	Count int
	Token int64
	// Since is the local time the lease counts from: the send time of a
	// request the server answered before it granted the lock, so the client's
	// belief never outlives the server's expiry.
	Since time.Time
	// First, for a hand-off, is the lease the server granted from Since
	// until the grantee claims it. Zero means the full lease.
	First time.Duration
	// Handoff marks a direct hand-off not yet claimed: the hold is usable at
	// once and is claimed (made a full hold, Handle.Claim) halfway through
	// its first lease, if it lasts that long.
	Handoff bool
}

// hold is this handle's belief that it holds the lock. It ends by release or
// by loss, exactly once; Lost and HoldContext report which.
type hold struct {
	m     *Mutex
	token int64
	fixed bool
	lease time.Duration

	mu       sync.Mutex
	ended    bool
	cause    error // why it ended: ErrLockLost or ErrReleased
	deadline time.Time
	expiry   clock.Timer // fires at deadline: the hold is lost
	renew    clock.Timer // the watchdog's next renewal
	// Lost's channel and HoldContext's context are made when first asked
	// for: most holds are never asked, and end without them.
	lost   chan struct{}
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newHold(m *Mutex, g Grant, lease time.Duration, fixed bool) *hold {
	h := &hold{m: m, token: g.Token, fixed: fixed, lease: lease}
	first := lease
	if g.First > 0 && g.First < lease {
		first = g.First
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.extendLocked(g.Since, first)
	if g.Handoff {
		// The hold is usable at once. It is claimed (extended to the full
		// lease) halfway through its first lease: a short hold is released
		// before that and never costs Redis a claim.
		clk := m.h.Config.Clock
		half := h.deadline.Sub(clk.Now()) / 2
		h.renew = clk.AfterFunc(max(half, 0), func() { h.claim(g) })
	} else if !fixed {
		h.scheduleRenewLocked(lease / 3)
	}
	return h
}

// extendLocked moves the local deadline to since+d minus the safety margin,
// never backwards, and re-arms the loss timer.
func (h *hold) extendLocked(since time.Time, d time.Duration) {
	dl := since.Add(d - h.m.h.Config.Margin(d))
	if !dl.After(h.deadline) {
		return
	}
	h.deadline = dl
	if h.expiry != nil {
		h.expiry.Stop()
	}
	// At the deadline itself, not after a duration read from the clock
	// first: nothing can move the clock in between.
	h.expiry = clock.AtFunc(h.m.h.Config.Clock, dl, func() { h.end(ErrLockLost, "lease ran out before a renewal succeeded") })
}

// bornLost reports whether the hold's deadline had passed by the time it
// was made: the acquisition took longer than the lease it was granted.
func (h *hold) bornLost() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.deadline.After(h.m.h.Config.Clock.Now())
}

func (h *hold) scheduleRenewLocked(after time.Duration) {
	h.renew = h.m.h.Config.Clock.AfterFunc(after, h.watchdog)
}

// claim turns a handed-off grant into a full hold, then hands over to the
// watchdog (or, for a fixed lease, to the loss timer alone).
func (h *hold) claim(g Grant) {
	ctx, cancel := context.WithTimeout(context.Background(), h.m.h.Config.CleanupTimeout)
	defer cancel()
	since, ok, err := h.m.h.Claim(ctx, g, h.lease, h.fixed)
	if err == nil && !ok {
		h.end(ErrLockLost, "the lock was gone when its hand-off was claimed")
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return
	}
	if err != nil {
		h.m.h.logWarn("claiming a handed-off lock failed; retrying", err)
		h.renew = h.m.h.Config.Clock.AfterFunc(h.lease/9, func() { h.claim(g) })
		return
	}
	h.extendLocked(since, h.lease)
	if !h.fixed {
		h.scheduleRenewLocked(h.lease / 3)
	}
}

// watchdog renews a lease kept alive by the library, every lease/3; the
// lease counts from when the renewal was sent. A failed call is retried
// sooner; if none succeeds, the loss timer ends the hold.
func (h *hold) watchdog() {
	ctx, cancel := context.WithTimeout(context.Background(), h.m.h.Config.CleanupTimeout)
	defer cancel()
	since := h.m.h.Config.Clock.Now()
	ok, err := h.m.h.renew(ctx, h.token, h.lease, false)
	if err == nil && !ok {
		h.end(ErrLockLost, "the lock was deleted or taken by another owner")
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return
	}
	if err != nil {
		h.m.h.logWarn("renewing the lease failed; retrying", err)
		h.scheduleRenewLocked(h.lease / 9)
		return
	}
	h.extendLocked(since, h.lease)
	h.scheduleRenewLocked(h.lease / 3)
}

// reenter applies a re-entry's grant: a lease that may only grow.
func (h *hold) reenter(g Grant, lease time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.ended {
		h.extendLocked(g.Since, lease)
	}
}

// end finishes the hold once: cause ErrLockLost closes Lost, any cause
// cancels HoldContext. It reports whether this call ended it.
func (h *hold) end(cause error, why string) bool {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return false
	}
	h.ended, h.cause = true, cause
	if h.expiry != nil {
		h.expiry.Stop()
	}
	if h.renew != nil {
		h.renew.Stop()
	}
	lost, cancel := h.lost, h.cancel // those made later are made ended
	h.mu.Unlock()
	if cause == ErrLockLost {
		h.m.stale.Store(h.token)
	}
	// The cause before Lost: whoever sees Lost closed finds HoldContext
	// already ended, with ErrLockLost.
	if cancel != nil {
		cancel(cause)
	}
	if cause == ErrLockLost {
		if lost != nil {
			close(lost)
		}
		h.m.h.logError("lock lost: "+why, h.token)
	}
	return true
}

// lostChan is the hold's Lost channel: closed once the hold is lost.
func (h *hold) lostChan() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost == nil {
		h.lost = make(chan struct{})
		if h.ended && h.cause == ErrLockLost {
			close(h.lost)
		}
	}
	return h.lost
}

// context is the hold's HoldContext: cancelled, with the cause, once the
// hold ends.
func (h *hold) context() context.Context {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx == nil {
		h.ctx, h.cancel = context.WithCancelCause(context.Background())
		if h.ended {
			h.cancel(h.cause)
		}
	}
	return h.ctx
}

func (h *hold) isLost() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended && h.cause == ErrLockLost
}
