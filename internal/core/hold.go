package core

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/transport"
)

// Grant is what an acquiring call learned: the hold's token, and from when
// the client may count the lease.
type Grant struct {
	Token int64
	// Since is the local time the lease counts from: the send time of a
	// request the server answered before it granted the lock, so the client's
	// belief never outlives the server's expiry.
	Since time.Time
	// First, for a hand-off, is the lease the server granted from Since
	// until the grantee claims it. Zero means the full lease.
	First time.Duration
	// Handoff marks a direct hand-off not yet claimed: the hold is usable at
	// once and is claimed (made a full hold, Agent.Claim) halfway through
	// its first lease, if it lasts that long.
	Handoff bool
	// Waited marks a grant to a call that waited for it: its owner may have
	// held nothing, and sent no PING, for a while, so Keep has the presence
	// vouch for it before the call returns (adopt).
	Waited bool
}

// hold is this handle's belief that it holds the lock: its End (how it
// ends, and its watchdog), its lease and its local deadline.
type hold struct {
	End
	m     *Mutex
	s     *slot   // the hold id it was granted to
	agent *Agent  // s's: what the hold does in Redis
	cfg   *Config // the handle's
	token int64
	// releasing: an Unlock's release of it is in flight; that Unlock ends
	// it, even when the lock it hands on reaches another hold id of the
	// handle first.
	releasing atomic.Bool
	fixed     bool
	lease     time.Duration
	// sent is when the latest call that found the hold in Redis was sent,
	// at the latest (its acquisition's Grant.Since, then each renewal or
	// claim that succeeded): a restart check's answer after it covers the
	// hold (restart.go), and so does a presence confirmed before it
	// (presence.go). Read with sentAt.
	sent atomic.Pointer[time.Time]
	// grant is the acquisition's: a direct hand-off not yet claimed is
	// claimed with it at once after a break (confirmAfterBreak).
	grant Grant
	// watched: its watchdog keeps it (under its lock): not a fixed lease,
	// nor a hand-off not yet claimed.
	watched bool

	deadline time.Time
	// expiry fires at deadline: the hold is lost. A hold its watchdog
	// keeps arms it only when its first renewal is due (armLossLocked),
	// long before the deadline: a hold released sooner, the common case,
	// has one timer, not two (docs/performance.md, round five).
	expiry clock.Timer
}

// leaseRanOut is why a hold whose loss timer fired ended.
const leaseRanOut = "lease ran out before a renewal succeeded"

// newHold makes m's hold of g, granted to slot s, and starts its timers.
// On a lock that grants one hold at a time, it also returns the owner's
// hold that was granted that lock before it and is still tracked
// (Owner.track); nil if none.
func newHold(m *Mutex, s *slot, g Grant, lease time.Duration, fixed bool) (h, prev *hold) {
	h = &hold{m: m, s: s, agent: &s.agent, cfg: m.agent.Config, token: g.Token, fixed: fixed, lease: lease, grant: g}
	s.holding.Store(true)
	h.sent.Store(&g.Since)
	prev = m.agent.Owner.track(h) // before its timers can end it: Close releases it
	if m.agent.Config.Observer != nil {
		s.acquired = m.agent.Config.Clock.Now() // the slot's: a hold pays nothing for it
	}
	h.carry(m, h) // its context, keyed by its handle, proves a call chain holds it
	first := lease
	if g.First > 0 && g.First < lease {
		first = g.First
	}
	h.LockState()
	defer h.UnlockState()
	h.watched = !g.Handoff && !fixed
	h.extendLocked(g.Since, first)
	clk := m.agent.Config.Clock
	if g.Handoff {
		// The hold is usable at once. It is claimed (extended to the full
		// lease) halfway through its first lease: a short hold is released
		// before that and never costs Redis a claim.
		half := h.deadline.Sub(clk.Now()) / 2
		h.RenewLocked(clk, max(half, 0), func() { h.claim(g) })
	} else if !fixed {
		h.RenewLocked(clk, h.roundDueLocked(), h.watchdog)
	}
	return h, prev
}

// roundDueLocked is when the watchdog's next round is due, from now: every
// lease/RenewEvery, but never later than halfway to the deadline. A watched
// hold arms its loss timer only in that round (armLossLocked), so the round
// must come before the deadline: an acquisition or renewal whose answer
// came back late (a slow network, a paused process) leaves less of the
// lease than a round's spacing, and Redis would end the hold while its
// holder still believed in it.
func (h *hold) roundDueLocked() time.Duration {
	return max(min(h.lease/RenewEvery, h.deadline.Sub(h.cfg.Clock.Now())/2), 0)
}

// extendLocked moves the local deadline to since+d minus the safety margin,
// never backwards, and re-arms the loss timer, if armed (a watched hold's
// is armed by its first renewal).
func (h *hold) extendLocked(since time.Time, d time.Duration) {
	dl := since.Add(d - h.cfg.Margin(d))
	if !dl.After(h.deadline) {
		return
	}
	h.deadline = dl
	if h.expiry != nil {
		h.expiry.Stop()
	} else if h.watched {
		return
	}
	h.armLossLocked()
}

// armLossLocked arms the loss timer at the deadline itself, not after a
// duration read from the clock first: nothing can move the clock in
// between.
func (h *hold) armLossLocked() {
	due := h.deadline
	h.expiry = clock.AtFunc(h.cfg.Clock, due, func() { h.lose(leaseRanOut, due) })
}

// bornLost reports whether the hold's deadline had passed by the time it
// was made: the acquisition took longer than the lease it was granted.
func (h *hold) bornLost() bool {
	h.LockState()
	defer h.UnlockState()
	return !h.deadline.After(h.cfg.Clock.Now())
}

// claim turns a handed-off grant into a full hold, then hands over to the
// watchdog (or, for a fixed lease, to the loss timer alone).
func (h *hold) claim(g Grant) bool {
	return h.round(func(ctx context.Context) (time.Time, bool, error) {
		return h.agent.Claim(ctx, g, h.lease, h.fixed)
	}, func() { h.claim(g) }, "claiming a handed-off lock", "the lock was gone when its hand-off was claimed")
}

// watchdog renews a lease kept alive by the library, every lease/3; the
// lease counts from when the renewal was sent. A failed call is retried
// sooner; if none succeeds, the loss timer ends the hold.
func (h *hold) watchdog() { _ = h.renewal("the lock was deleted or taken by another owner") }

// renewal is one round of the watchdog; gone says why the hold ended if
// Redis no longer has it. It reports whether the renewal succeeded.
func (h *hold) renewal(gone string) bool {
	return h.round(func(ctx context.Context) (time.Time, bool, error) {
		since := h.cfg.Clock.Now()
		ok, err := h.agent.renew(ctx, h.token, h.lease, false)
		return since, ok, err
	}, h.watchdog, "renewing the lease", gone)
}

// recheck renews the hold at once, if its watchdog keeps it: Redis may have
// lost it (a restart), and the renewal says so, ending it for gone.
func (h *hold) recheck(gone string) {
	h.LockState()
	defer h.UnlockState()
	if h.EndedLocked() || !h.watched {
		return
	}
	h.RenewLocked(h.cfg.Clock, 0, func() { h.renewal(gone) })
}

// confirmAfterBreak is recheck after the owner's presence came back from a
// break (presence.go), for every kind of hold: a watched one is renewed, a
// direct hand-off not yet claimed is claimed, and a fixed lease is checked
// (check), each at once; each finds the hold in Redis, or ends it for gone.
// A call that gets no answer is sent again at once, up to confirmTries in
// all: the break that took the presence down often broke every connection
// of the pool too (each failed call drops one, and a client made with
// MaxRetries -1 retries nothing itself), and the jeopardy will not wait
// for the watchdog's next try.
func (h *hold) confirmAfterBreak(gone string) {
	h.LockState()
	defer h.UnlockState()
	if h.EndedLocked() {
		return
	}
	var try func() bool
	switch {
	case h.watched:
		try = func() bool { return h.renewal(gone) }
	case h.grant.Handoff:
		g := h.grant
		try = func() bool { return h.claim(g) }
	default:
		try = func() bool { return h.check(gone) }
	}
	h.RenewLocked(h.cfg.Clock, 0, func() {
		for range confirmTries {
			if try() || h.IsEnded() {
				return
			}
		}
	})
}

// check asks Redis whether it still has the hold, a fixed lease, without
// lengthening it (a renewal by nothing: renew.lua never shortens): ended
// for gone if not, covered from the call's send time if so. It reports
// whether Redis has it; a failed call leaves it to the jeopardy.
func (h *hold) check(gone string) bool {
	ctx, cancel := context.WithTimeout(transport.Detached(context.Background()), h.cfg.CleanupTimeout)
	defer cancel()
	since := h.cfg.Clock.Now()
	ok, err := h.agent.renew(ctx, h.token, 0, false)
	switch {
	case err != nil:
		h.agent.logWarn("checking the lease after the presence came back failed", err)
		return false
	case !ok:
		h.end(ErrLockLost, gone)
		h.agent.Owner.suspect()
		return false
	}
	h.noteSent(since)
	return true
}

// noteSent records that a call sent at t found the hold in Redis.
func (h *hold) noteSent(t time.Time) {
	for {
		old := h.sent.Load()
		if !t.After(*old) || h.sent.CompareAndSwap(old, &t) {
			return
		}
	}
}

// confirmTries bounds confirmAfterBreak's calls of one hold: more than a
// pool's worth of broken connections is an outage, which the jeopardy ends.
const confirmTries = 16

// sentAt is sent's time.
func (h *hold) sentAt() time.Time { return *h.sent.Load() }

// round is one call of the hold's timer, a claim or a renewal (call): the
// hold ends as lost if Redis no longer has it (gone says why); a failed call
// is retried (again) after lease/RetryEvery, what logs call it; a
// successful one extends the local deadline to a full lease from the send
// time call reports (since), and the watchdog goes on every
// lease/RenewEvery unless the lease is fixed. It reports whether the call
// succeeded and the hold lasts.
func (h *hold) round(call func(ctx context.Context) (since time.Time, ok bool, err error), again func(), what, gone string) bool {
	cfg := h.cfg
	h.LockState()
	if h.expiry == nil && !h.EndedLocked() {
		h.armLossLocked() // a renewal may fail from now on: the deadline must be kept
	}
	h.UnlockState()
	ctx, cancel := context.WithTimeout(transport.Detached(context.Background()), cfg.CleanupTimeout) // nobody waits on it
	defer cancel()
	sent := cfg.Clock.Now()
	since, ok, err := call(ctx)
	if err == nil && !ok {
		h.end(ErrLockLost, gone)
		h.agent.Owner.suspect()
		return false
	}
	h.LockState()
	defer h.UnlockState()
	if h.EndedLocked() {
		return false
	}
	if err != nil {
		h.agent.logWarn(what+" failed; retrying", err)
		h.renewalFailed(err)
		h.RenewLocked(cfg.Clock, h.lease/RetryEvery, again)
		return false
	}
	h.extendLocked(since, h.lease)
	h.noteSent(sent)
	if !h.fixed {
		h.watched = true
		h.RenewLocked(cfg.Clock, h.roundDueLocked(), h.watchdog)
	}
	return true
}

// reenter applies a re-entry's grant: a lease that may only grow. It
// reports false if the hold had ended.
func (h *hold) reenter(g Grant, lease time.Duration) bool {
	h.LockState()
	defer h.UnlockState()
	if h.EndedLocked() {
		return false
	}
	h.extendLocked(g.Since, lease)
	return true
}

// end finishes the hold once (finish), giving its slot back for reuse. It
// reports whether this call ended it.
func (h *hold) end(cause error, why string) bool { return h.finish(cause, why, true, time.Time{}) }

// lose ends the hold as lost (why) by a timer that was due at due: the
// log says how late it ran, if it did (a process whose timers run late
// believes that much longer, docs/presence.md).
func (h *hold) lose(why string, due time.Time) bool { return h.finish(ErrLockLost, why, true, due) }

// finish finishes the hold once (End.Finish), and stops its loss timer.
// Every hold that ends is remembered as its slot's stale hold (Agent.stale)
// before Lost closes and the context ends: the slot's next acquisition
// sends that token, so the script ends the hold if Redis still has it (a
// lost one, or one whose release a failover lost) rather than take the
// call for a re-entry. With reuse false (a release whose outcome is
// unknown), the slot is dropped: its hold id may still hold the lock. It
// reports whether this call ended the hold; due is when a timer meant to
// end it, if one did (lose).
func (h *hold) finish(cause error, why string, reuse bool, due time.Time) bool {
	ended := h.FinishAfter(cause, func() {
		h.s.stale.Store(h.token)
		h.s.holding.Store(false)
		h.s.holdEnded(h.token)
	}, func() {
		if cause == ErrLockLost { // before Lost closes: whoever sees it finds why in the log
			h.agent.logLost(why, h.token, due)
		}
	})
	if !ended {
		return false
	}
	h.agent.Owner.untrack(h)
	h.LockState()
	if h.expiry != nil {
		h.expiry.Stop()
	}
	h.UnlockState()
	h.reportEnd(cause, why, reuse)
	if reuse {
		h.m.put(h.s)
	}
	return true
}

// closeOut is Close's end of the hold: the holder stops believing in it
// (its context ends with cause ErrClosed; Lost stays open), then it is released
// in Redis, every level of its re-entry, so that the lock goes to the next
// in line at once. A hold that ended meanwhile is left as it is.
func (h *hold) closeOut() error {
	if !h.closeEnd() {
		return nil
	}
	return h.releaseAll()
}

// closeEnd is closeOut's first half: the holder stops believing in h. It
// reports whether this call ended it (then h is to be released).
func (h *hold) closeEnd() bool {
	h.m.forget(h)
	return h.end(ErrClosed, "")
}

// releaseAll releases the ended hold h in Redis, every level of its
// re-entry, within the cleanup timeout: the lock goes to the next in line
// at once. A hold Redis no longer has is left as it is.
//
// A release that got no answer is sent again at once, up to
// releaseRetries times (the reset that broke the presence connection often
// breaks the pool's too, and MaxRetries -1 retries nothing); each try
// releases only h's token, so repeating it is safe.
func (h *hold) releaseAll() error {
	ctx, cancel := context.WithTimeout(transport.Detached(context.Background()), h.cfg.CleanupTimeout)
	defer cancel()
	retries := 0
	for range maxReleases {
		status, err := h.m.release(ctx, h.s, h.token)
		if err != nil && !Refused(err) && ctx.Err() == nil && retries < releaseRetries {
			retries++
			continue
		}
		if err != nil || status != transport.StillHeld {
			return err
		}
	}
	return nil
}

// maxReleases bounds closeOut's releases of one hold: its re-entries.
const maxReleases = 1 << 16

// releaseRetries is how many times releaseAll sends a release again after
// one that got no answer: go-redis drops a connection that failed, so the
// next try takes a fresh one.
const releaseRetries = 2
