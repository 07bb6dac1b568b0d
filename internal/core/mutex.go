package core

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// Attempt is one Lock or TryLock call.
type Attempt struct {
	Wait    time.Duration // how long to wait; with Forever, no bound
	Forever bool
	Lease   time.Duration // the lease to ask for
	Fixed   bool          // a fixed lease, not renewed
	// Report, if not nil (the handle has an observer), is where the
	// primitive's wait tells how the acquisition went (QueueNews, HandedOff).
	Report *Report
}

// Mutex is the implementation behind fair.Mutex, reentrant.Mutex
// and the handles of the other primitives.
//
// Goroutines that share a handle exclude each other. Each fresh acquisition
// acts in Redis as a hold id of its own (a slot), so it takes its turn
// like any other client's call, in the fair queue too. A call re-enters the
// handle's hold only when its context carries that hold (HoldContext): the
// context is the proof that a call chain holds the lock, which Go's
// goroutines cannot give. The handle has at most one hold at a time (cur);
// slots are reused once their turn has ended, so a handle used by one
// goroutine at a time acts as one hold id, as a single-owner handle would.
//
// It keeps holds; it does not wait. A primitive's acquisition begins a Turn
// (Begin), waits as the primitive does, and hands the grant to Keep.
type Mutex struct {
	agent Agent // the handle's place and configuration; its owner is first's

	mu     sync.Mutex
	first  *slot   // the slot a handle used for one hold acts as (ID)
	free   []*slot // slots whose turn ended, to reuse, the latest last
	cur    *hold   // the hold this handle believes in, nil if none
	latest Latest  // the most recent hold, for Lost and HoldContext

	server string // the Redis server, for an observer's spans (serverOf)
	port   int
}

// slot is one hold id of a handle: one acquisition at a time, then the
// hold it won, if any.
type slot struct {
	agent Agent
	state any          // the primitive's, made at its first turn (State)
	stale atomic.Int64 // Agent.stale
	// holding: the slot has a hold that has not ended (Agent.NewRequest).
	holding atomic.Bool
	// abandoned is the slot's latest acquiring call abandoned at its ctx's
	// end (Agent.abandoned).
	abandoned atomic.Pointer[transport.Abandoned]
	// past is what the slot left in Redis lately, for a replay after a
	// failover (replay.go).
	past *past
	// acquired is when the slot's hold was granted, for an observer (zero
	// without one). A slot has one hold at a time, and is reused only once
	// that hold has ended (and been reported).
	acquired time.Time
}

// maxFreeSlots bounds the slots a handle keeps for reuse: as many as
// goroutines that commonly wait on it at once.
const maxFreeSlots = 16

// NewMutex checks the arguments and makes a handle with a fresh hold id, on
// the keys place gives for name.
func NewMutex(o *Owner, name string, cfg Config, place func(name string, scripts *lua.Scripts) Place) (*Mutex, error) {
	if err := CheckOwner(o); err != nil {
		return nil, err
	}
	if err := CheckName(name); err != nil {
		return nil, err
	}
	Equip(o, &cfg)
	client := o.client
	m := &Mutex{}
	m.agent = Agent{Client: client, Owner: o, Name: name, Config: &cfg,
		Publish: o.publish, Place: place(name, cfg.Scripts)}
	if m.agent.Bound == nil {
		m.agent.Bound = NewBoundCalls() // every slot's calls bound once
	}
	if cfg.Observer != nil {
		m.server, m.port = serverOf(client)
	}
	m.first = m.newSlot()
	m.agent = m.first.agent
	m.free = append(m.free, m.first)
	return m, nil
}

// newSlot makes a slot with a fresh hold id.
func (m *Mutex) newSlot() *slot {
	s := &slot{past: &past{}}
	s.agent = m.agent
	s.agent.slot = s
	s.agent.ID = m.agent.Owner.ids.HoldID()
	s.agent.stale = &s.stale
	s.agent.holding = &s.holding
	s.agent.abandoned = &s.abandoned
	s.agent.args = newArgs(s.agent)
	return s
}

// take returns a slot for a fresh acquisition: the latest one freed, or a
// new one.
func (m *Mutex) take() *slot {
	m.mu.Lock()
	if n := len(m.free); n > 0 {
		s := m.free[n-1]
		m.free = m.free[:n-1]
		m.mu.Unlock()
		s.setTurn(true)
		return s
	}
	m.mu.Unlock()
	s := m.newSlot()
	s.setTurn(true)
	return s
}

// put gives back a slot whose turn ended: no hold of its hold id is left
// in Redis that a later acquisition could take for its own (a lost one is
// recorded as its stale hold, which that acquisition ends first).
func (m *Mutex) put(s *slot) {
	if a := s.abandoned.Load(); a != nil {
		select {
		case <-a.Done:
		default:
			// An acquiring call of its hold id still runs (abandoned at
			// its ctx's end): another turn as the same hold id could meet
			// its grant in Redis and take it for a re-entry. Not reused.
			return
		}
	}
	s.setTurn(false)
	m.mu.Lock()
	if len(m.free) < maxFreeSlots {
		m.free = append(m.free, s)
	}
	m.mu.Unlock()
}

// errUnmade is returned by every call with an error of a handle that its
// constructor did not make: a zero value, or a nil pointer. It wraps
// ErrInvalidArgument.
var errUnmade error // made by Link

// Unmade returns the error of a call on a handle its constructor did not
// make (a zero value or a nil pointer).
func Unmade() error { return errUnmade }

// made reports whether m was made by NewMutex: not nil, not a zero value.
func (m *Mutex) made() bool { return m != nil && m.first != nil }

// Name returns the lock's name; "" for a zero or nil handle.
func (m *Mutex) Name() string {
	if !m.made() {
		return ""
	}
	return m.agent.Name
}

// ID returns the hold id of the handle's first slot: the one a handle
// made for a single hold (a permit hold, a semaphore's gate) acts as.
func (m *Mutex) ID() string { return m.first.agent.ID }

// carried returns the hold of this handle that ctx carries, nil if none: a
// hold's context carries it under its handle (newHold), and a Lock given
// that context re-enters it.
func (m *Mutex) carried(ctx context.Context) *hold {
	h, _ := ctx.Value(m).(*hold)
	return h
}

// LockAttempt is the Attempt of a Lock: no bound on the wait, and the
// watchdog's lease.
func LockAttempt(c *Config) Attempt {
	if c == nil { // a zero handle's: its Begin refuses it
		return Attempt{Forever: true}
	}
	return Attempt{Forever: true, Lease: c.Lease}
}

// TryAttempt checks a TryLock's arguments and makes its Attempt: a fixed
// lease if lease > 0, the watchdog's otherwise.
func TryAttempt(c *Config, wait, lease time.Duration) (Attempt, error) {
	if wait < 0 {
		return Attempt{}, Invalid("wait must not be negative, got %v", wait)
	}
	if lease < 0 || (lease > 0 && lease < MinLease) {
		// As WithLease: a shorter one is shorter than its own safety margin
		// (Margin: 1% and 2 ms) and a round trip, and could never hold.
		return Attempt{}, Invalid("lease must be 0 (the watchdog's) or at least %v, got %v", MinLease, lease)
	}
	a := Attempt{Wait: wait, Lease: lease, Fixed: lease > 0}
	if lease == 0 && c != nil {
		a.Lease = c.Lease
	}
	return a, nil
}

// confirm keeps a hold made while the owner's presence was down: once the
// presence is up again (within ctx, and while the hold lasts), a renewal
// (or, for a hand-off, its claim) sent after that tells whether Redis still
// has the hold. A waiter ends a holder's hold only while its presence is
// gone, and tokens never come back, so a hold Redis still has then was
// never taken over: from now on every waiter sees the presence. It reports
// whether the hold was confirmed; the caller gives back one that was not.
func (m *Mutex) confirm(ctx context.Context, p *presence, h *hold, g Grant) bool {
	if !p.awaitUp(ctx, h.Context(), m.agent.Keys[0]) {
		return false
	}
	if g.Handoff {
		return h.claim(g)
	}
	return h.renewal("the lock was taken while the owner's presence was down")
}

// target is the hold an Unlock or Extend given ctx acts on: the one ctx
// carries, or else the handle's current one. A hold that ended gets
// ErrLockLost (lost), ErrClosed (Close ended it) or ErrNotHeld; with none,
// ErrClosed once the owner has closed, ErrNotHeld before.
func (m *Mutex) target(ctx context.Context) (*hold, error) {
	h := m.carried(ctx)
	if h == nil {
		m.mu.Lock()
		h = m.cur
		m.mu.Unlock()
		if h == nil {
			if m.agent.Owner.closed.Load() {
				return nil, ErrClosed // Close ended the hold, if there was one
			}
			return nil, ErrNotHeld
		}
	}
	if h.IsEnded() {
		m.forget(h)
		return nil, h.EndedErr()
	}
	return h, nil
}

// Unlock implements every mutex's Unlock (and a Permit's Release).
func (m *Mutex) Unlock(ctx context.Context) error {
	if !m.made() {
		return errUnmade
	}
	if err := CheckContext(ctx); err != nil {
		return m.agent.Wrap(ctx, err)
	}
	h, err := m.target(ctx)
	if err != nil {
		return m.agent.Wrap(ctx, err)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// Called after ctx's deadline had passed (a deferred Unlock after
		// work that ran late): its Grace runs from now, as under a ctx
		// that was cancelled, not from the deadline, whose grace is for
		// the clean-ups of a call that was running when it passed.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadlineCause(context.WithoutCancel(ctx), time.Now(), context.Cause(ctx))
		defer cancel()
	}
	h.releasing.Store(true)
	if o := m.agent.Config.Observer; o != nil && o.Tracer() != nil {
		ctx, end := o.Tracer().StartCall(ctx, m.call("release", m.agent.Release))
		err := m.unlockHold(ctx, h)
		end(err)
		return m.agent.Wrap(ctx, err)
	}
	return m.agent.Wrap(ctx, m.unlockHold(ctx, h))
}

// unlockHold releases h, keeping ctx's deadline (Bounded).
func (m *Mutex) unlockHold(ctx context.Context, h *hold) error {
	if ctx.Done() == nil {
		// A ctx that never ends: nothing to keep, and no closure to pay for.
		return m.releaseHold(ctx, h)
	}
	const what = "releasing the lock"
	if until, ok := h.s.agent.finishingUntil(ctx); ok {
		// The common case of a ctx with a deadline: in this goroutine, on
		// a view of the client (Bounded's finishing, without its closure
		// and context).
		a := h.s.agent
		cmd, kept := a.Call(a.Release).RunUntil(ctx, a.Client, a.Mode(), until, what, a.args.finish,
			a.releaseArgs(h.token, "").Args()...)
		if kept {
			status, err := decodeRelease(cmd)
			return pending(what, m.released(h, status, err))
		}
	}
	return m.agent.Bounded(ctx, what, func(ctx context.Context) error {
		return m.releaseHold(ctx, h)
	})
}

// releaseHold undoes one level of h in Redis and applies the outcome.
func (m *Mutex) releaseHold(ctx context.Context, h *hold) error {
	status, err := m.release(ctx, h.s, h.token)
	return m.released(h, status, err)
}

// released applies the outcome of h's release.
func (m *Mutex) released(h *hold, status int, err error) error {
	if status == transport.StillHeld && err == nil {
		h.releasing.Store(false)
	}
	switch {
	case err != nil:
		// The outcome is unknown. Stop renewing: at worst the lease runs
		// out. The slot is not reused: its hold id may still hold the
		// lock in Redis.
		m.forget(h)
		h.finish(ErrReleased, "", false, time.Time{})
		return err
	case status == transport.StillHeld:
		return nil
	case status == transport.NotHeld:
		m.forget(h)
		h.end(ErrLockLost, "Unlock found the lock gone or taken")
		m.agent.Owner.suspect()
		return ErrLockLost
	default:
		m.forget(h)
		ended := h.end(ErrReleased, "")
		if status == transport.ReleasedWatch {
			m.agent.watchHandOff()
		}
		if !ended && h.IsLost() {
			// The hold was given up for lost while its release ran (the
			// presence could not confirm it, its lease ran out as this
			// client counts it): its holder was told so (Lost closed),
			// and Unlock says the same, though Redis still had it for the
			// release to end.
			return ErrLockLost
		}
		return nil
	}
}

// release undoes one level of slot s's hold with token: transport.Released,
// transport.StillHeld or transport.NotHeld.
func (m *Mutex) release(ctx context.Context, s *slot, token int64) (int, error) {
	return release(ctx, s.agent, token)
}

// release releases ag's hold with token.
func release(ctx context.Context, ag Agent, token int64) (int, error) {
	return decodeRelease(ag.Call(ag.Release).Run(ctx, ag.Client, ag.Mode(), ag.releaseArgs(token, "").Args()...))
}

// decodeRelease reads a release's reply.
func decodeRelease(cmd *redis.Cmd) (int, error) {
	v, err := cmd.Result()
	if err != nil {
		return 0, err
	}
	return transport.DecodeRelease(v)
}

// forget drops h as the current hold.
func (m *Mutex) forget(h *hold) {
	m.mu.Lock()
	if m.cur == h {
		m.cur = nil
	}
	m.mu.Unlock()
}

// ForceUnlock implements both mutexes' ForceUnlock.
func (m *Mutex) ForceUnlock(ctx context.Context) (bool, error) {
	if !m.made() {
		return false, errUnmade
	}
	if err := CheckContext(ctx); err != nil {
		return false, m.agent.Wrap(ctx, err)
	}
	ok, err := m.forceUnlock(ctx)
	if err != nil {
		return false, m.agent.Wrap(ctx, err)
	}
	m.mu.Lock()
	h := m.cur
	m.cur = nil
	m.mu.Unlock()
	if h != nil {
		h.end(ErrReleased, "")
	}
	return ok, nil
}

// Extend implements both mutexes' Extend: the hold's lease (the one ctx
// carries, or the current one) becomes d from now, never shorter, in Redis
// and in the handle's belief.
func (m *Mutex) Extend(ctx context.Context, d time.Duration) error {
	if !m.made() {
		return errUnmade
	}
	return m.agent.Wrap(ctx, m.extend(ctx, d))
}

func (m *Mutex) extend(ctx context.Context, d time.Duration) error {
	if err := CheckContext(ctx); err != nil {
		return err
	}
	if d <= 0 {
		return Invalid("the lease to extend to must be positive, got %v", d)
	}
	h, err := m.target(ctx)
	if err != nil {
		return err
	}
	since := m.agent.Config.Clock.Now()
	ok, err := h.agent.renew(ctx, h.token, d, false)
	if err != nil {
		return err
	}
	if !ok {
		if h.end(ErrLockLost, "Extend found the lock gone or taken") {
			return ErrLockLost
		}
		return ErrNotHeld // released while the renewal ran
	}
	h.LockState()
	defer h.UnlockState()
	if h.EndedLocked() {
		// Released (or lost) while the renewal ran: nothing to extend.
		return ErrNotHeld
	}
	h.extendLocked(since, d)
	return nil
}

// IsLocked reports whether anyone holds the lock.
func (m *Mutex) IsLocked(ctx context.Context) (bool, error) {
	if !m.made() {
		return false, errUnmade
	}
	s, err := m.state(ctx)
	return s.Owner != "", m.agent.Wrap(ctx, err)
}

// HoldCount returns this handle's re-entry count, 0 if it does not hold it.
func (m *Mutex) HoldCount(ctx context.Context) (int, error) {
	if !m.made() {
		return 0, errUnmade
	}
	m.mu.Lock()
	h := m.cur
	m.mu.Unlock()
	if h == nil {
		return 0, m.agent.Wrap(ctx, CheckContext(ctx))
	}
	s, err := m.state(ctx)
	if err != nil || s.Owner != h.agent.ID {
		return 0, m.agent.Wrap(ctx, err)
	}
	return s.Count, nil
}

// TTL returns the remaining lease, 0 when the lock is free.
func (m *Mutex) TTL(ctx context.Context) (time.Duration, error) {
	if !m.made() {
		return 0, errUnmade
	}
	s, err := m.state(ctx)
	return s.TTL, m.agent.Wrap(ctx, err)
}

// Token returns the current hold's fencing token, 0 if none.
func (m *Mutex) Token() int64 {
	if !m.made() {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil || m.cur.IsLost() {
		return 0
	}
	return m.cur.token
}

// Lost returns the channel of the current (or most recent) hold.
func (m *Mutex) Lost() <-chan struct{} {
	if !m.made() {
		return neverClosed // as before a first hold
	}
	return m.latest.Lost()
}

// HoldContext returns the context of the current (or most recent) hold. It
// carries the hold: a Lock given it, or a context derived from it,
// re-enters the hold.
func (m *Mutex) HoldContext() context.Context {
	if !m.made() {
		return notHeldCtx // as before a first hold
	}
	return m.latest.Context()
}

// Carried returns the End of the hold of this handle that ctx carries
// (ended or not), nil if it carries none.
func (m *Mutex) Carried(ctx context.Context) *End {
	if !m.made() || ctx == nil {
		return nil
	}
	if h := m.carried(ctx); h != nil {
		return &h.End
	}
	return nil
}

// OnHold runs call, a primitive's own script call on a hold (an election's
// Proclaim), for the hold ctx carries, or else the handle's current one,
// with the agent of its hold id and its token. call reports false when
// Redis no longer has that hold: it is then ended as lost, and OnHold
// returns ErrLockLost. A handle that holds nothing gets ErrNotHeld.
func (m *Mutex) OnHold(ctx context.Context, call func(ctx context.Context, ag Agent, token int64) (bool, error)) error {
	if !m.made() {
		return errUnmade
	}
	if err := CheckContext(ctx); err != nil {
		return m.agent.Wrap(ctx, err)
	}
	h, err := m.target(ctx)
	if err != nil {
		return m.agent.Wrap(ctx, err)
	}
	ok, err := call(ctx, *h.agent, h.token)
	switch {
	case err != nil:
		return m.agent.Wrap(ctx, err)
	case !ok && h.end(ErrLockLost, "Redis no longer has the hold"):
		return m.agent.Wrap(ctx, ErrLockLost)
	case !ok:
		return m.agent.Wrap(ctx, h.EndedErr())
	}
	return nil
}

// TokenOf returns the fencing token of the hold of this handle that ctx
// carries (ended or not), 0 if it carries none.
func (m *Mutex) TokenOf(ctx context.Context) int64 {
	if !m.made() || ctx == nil {
		return 0
	}
	if h := m.carried(ctx); h != nil {
		return h.token
	}
	return 0
}
