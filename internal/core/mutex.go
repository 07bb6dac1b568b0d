package core

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/internal/config"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/wire"
)

// Kind is what differs between the primitives: how a caller acquires and
// waits. It acts for one turn of its handle (a slot) through the Agent it
// was made with.
type Kind interface {
	// Acquire takes or re-enters the lock for the kind's owner, waiting as
	// a says. It returns nil, nil when the wait elapsed.
	Acquire(ctx context.Context, a Attempt) (*Grant, error)
}

// Attempt is one Lock or TryLock call.
type Attempt struct {
	Wait    time.Duration // how long to wait; with Forever, no bound
	Forever bool
	Lease   time.Duration // the lease to ask for
	Fixed   bool          // a fixed lease, not renewed
	// Report, if not nil (the handle has an observer), is where the Kind
	// tells how the acquisition went (QueueNews, HandedOff).
	Report *Report
}

// Mutex is the shared implementation behind fair.Mutex and reentrant.Mutex.
//
// Goroutines that share a handle exclude each other. Each fresh acquisition
// acts in Redis as an owner id of its own (a slot), so it takes its turn
// like any other client's call, in the fair queue too. A call re-enters the
// handle's hold only when its context carries that hold (HoldContext,
// BindHold): the context is the proof that a call chain holds the lock,
// which Go's goroutines cannot give. The handle has at most one hold at a
// time (cur); slots are reused once their turn has ended, so a handle used
// by one goroutine at a time acts as one owner id, as a single-owner handle
// would.
type Mutex struct {
	h       Agent // the handle's place and configuration; its owner is first's
	newKind func(Agent) Kind

	mu     sync.Mutex
	first  *slot   // the slot a handle used for one hold acts as (Owner, Adopt)
	free   []*slot // slots whose turn ended, to reuse, the latest last
	cur    *hold   // the hold this handle believes in, nil if none
	latest Latest  // the most recent hold, for Lost and HoldContext

	server string // the Redis server, for an observer's spans (serverOf)
	port   int
}

// slot is one owner id of a handle, with the Kind that acts for it: one
// acquisition at a time, then the hold it won, if any.
type slot struct {
	h     Agent
	kind  Kind
	stale atomic.Int64 // Agent.stale
	// acquired is when the slot's hold was granted, for an observer (zero
	// without one). A slot has one hold at a time, and is reused only once
	// that hold has ended (and been reported).
	acquired time.Time
}

// maxFreeSlots bounds the slots a handle keeps for reuse: as many as
// goroutines that commonly wait on it at once.
const maxFreeSlots = 16

// NewMutex checks the arguments and makes a handle with a fresh owner id, on
// the keys place gives for name, waiting as the Kind that kind returns.
func NewMutex(o *Owner, name string, cfg config.Config,
	place func(name string, scripts *lua.Scripts) Place, kind func(Agent) Kind) (*Mutex, error) {
	if err := CheckOwner(o); err != nil {
		return nil, err
	}
	if err := CheckName(name); err != nil {
		return nil, err
	}
	client := o.client
	m := &Mutex{newKind: kind}
	m.h = Agent{Client: client, Shared: o, Name: name, Config: &cfg,
		Publish: o.publish, Place: place(name, cfg.Scripts)}
	if m.h.Calls == nil {
		m.h.Calls = NewCalls() // every slot's calls bound once
	}
	if cfg.Observer != nil {
		m.server, m.port = serverOf(client)
	}
	m.first = m.newSlot()
	m.h = m.first.h
	m.free = append(m.free, m.first)
	return m, nil
}

// newSlot makes a slot with a fresh owner id.
func (m *Mutex) newSlot() *slot {
	s := &slot{}
	s.h = m.h
	s.h.Owner = m.h.Shared.ids.Owner()
	s.h.stale = &s.stale
	s.h.args = newArgs(s.h)
	s.kind = m.newKind(s.h)
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
		return s
	}
	m.mu.Unlock()
	return m.newSlot()
}

// put gives back a slot whose turn ended: no hold of its owner id is left
// in Redis that a later acquisition could take for its own (a lost one is
// recorded as its stale hold, which that acquisition ends first).
func (m *Mutex) put(s *slot) {
	m.mu.Lock()
	if len(m.free) < maxFreeSlots {
		m.free = append(m.free, s)
	}
	m.mu.Unlock()
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.h.Name }

// Owner returns the owner id of the handle's first slot: the one a handle
// made for a single hold (a permit hold, a semaphore's gate) acts as.
func (m *Mutex) Owner() string { return m.first.h.Owner }

// heldKey marks a context that carries a hold of the handle m: a Lock given
// it re-enters that hold.
type heldKey struct{ m *Mutex }

// carried returns the hold of this handle that ctx carries, nil if none.
func (m *Mutex) carried(ctx context.Context) *hold {
	h, _ := ctx.Value(heldKey{m}).(*hold)
	return h
}

// Lock waits until the lock is held, with the watchdog keeping the lease.
func (m *Mutex) Lock(ctx context.Context) error {
	_, err := m.Acquire(ctx, LockAttempt(m.h.Config))
	return err
}

// TryLock implements every mutex's TryLock.
func (m *Mutex) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	a, err := TryAttempt(m.h.Config, wait, lease)
	if err != nil {
		return false, m.h.Wrap(ctx, err)
	}
	return m.Acquire(ctx, a)
}

// LockAttempt is the Attempt of a Lock: no bound on the wait, and the
// watchdog's lease.
func LockAttempt(c *config.Config) Attempt { return Attempt{Forever: true, Lease: c.Lease} }

// TryAttempt checks a TryLock's arguments and makes its Attempt: a fixed
// lease if lease > 0, the watchdog's otherwise.
func TryAttempt(c *config.Config, wait, lease time.Duration) (Attempt, error) {
	if wait < 0 {
		return Attempt{}, Invalid("wait must not be negative, got %v", wait)
	}
	if lease < 0 {
		return Attempt{}, Invalid("lease must not be negative, got %v", lease)
	}
	a := Attempt{Wait: wait, Lease: lease, Fixed: lease > 0}
	if lease == 0 {
		a.Lease = c.Lease
	}
	return a, nil
}

// Acquire makes one Lock or TryLock as a says: false, nil when the wait
// elapsed. A ctx that carries this handle's hold re-enters it; any other
// takes a turn of its own.
func (m *Mutex) Acquire(ctx context.Context, a Attempt) (bool, error) {
	h, err := m.get(ctx, a)
	return h != nil, m.h.Wrap(ctx, err)
}

// LockContext is Lock, returning a context for the work done under the
// hold (Bind).
func (m *Mutex) LockContext(ctx context.Context) (context.Context, error) {
	h, err := m.get(ctx, LockAttempt(m.h.Config))
	if err != nil {
		return nil, m.h.Wrap(ctx, err)
	}
	return Bind(ctx, &h.End), nil
}

// get is acquire, reported to the handle's observer if it has one.
func (m *Mutex) get(ctx context.Context, a Attempt) (*hold, error) {
	if o := m.h.Config.Observer; o != nil && o.Observer() != nil {
		return m.observed(ctx, a, o)
	}
	return m.acquire(ctx, a)
}

// acquire is Acquire, returning the hold: nil, nil when the wait elapsed.
func (m *Mutex) acquire(ctx context.Context, a Attempt) (*hold, error) {
	if err := CheckContext(ctx); err != nil {
		return nil, err
	}
	want := m.carried(ctx)
	if want != nil && want.IsEnded() {
		return nil, want.EndedErr() // its context has ended too: say why
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The wait also ends when the owner closes; the call then says so.
	bound, leave, err := m.h.Shared.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer leave()
	h, err := m.acquireBound(bound, want, a)
	if err != nil && ctx.Err() == nil && context.Cause(bound) == ErrClosed {
		err = ErrClosed
	}
	return h, err
}

// acquireBound is acquire on a context bound to the owner's Close.
func (m *Mutex) acquireBound(ctx context.Context, want *hold, a Attempt) (*hold, error) {
	if want != nil {
		return m.reenter(ctx, want, a)
	}
	s := m.take()
	g, err := s.kind.Acquire(ctx, a)
	if err != nil || g == nil {
		m.put(s)
		return nil, err
	}
	return m.adopt(s, g, a), nil
}

// reenter is an acquisition by a call chain that holds want: through
// want's slot, which Redis counts as a re-entry.
func (m *Mutex) reenter(ctx context.Context, want *hold, a Attempt) (*hold, error) {
	if want.IsEnded() {
		return nil, want.EndedErr()
	}
	g, err := want.s.kind.Acquire(ctx, a)
	if err != nil || g == nil {
		return nil, err
	}
	m.mu.Lock()
	ok := m.cur == want && g.Token == want.token
	m.mu.Unlock()
	if ok && want.reenter(*g, a.Lease) {
		return want, nil
	}
	// want ended while the call ran, and its slot took another turn that
	// this call counted a re-entry of: give that count back.
	_ = want.s.h.Bounded(ctx, "giving back a re-entry of a hold that had ended", func(ctx context.Context) error {
		_, err := m.release(ctx, want.s, g.Token)
		return err
	})
	return nil, want.EndedErr()
}

// Adopt makes g, granted for a by a call that went around Acquire (a
// semaphore's wait in its gate's queue, through the Kind of the handle's
// first slot), this handle's hold.
func (m *Mutex) Adopt(g *Grant, a Attempt) {
	m.mu.Lock()
	for i, s := range m.free {
		if s == m.first {
			m.free = append(m.free[:i], m.free[i+1:]...)
			break
		}
	}
	m.mu.Unlock()
	m.adopt(m.first, g, a)
}

// adopt makes g, granted to slot s, this handle's hold, and returns it.
func (m *Mutex) adopt(s *slot, g *Grant, a Attempt) *hold {
	h := newHold(m, s, *g, a.Lease, a.Fixed)
	m.mu.Lock()
	old := m.cur
	m.cur = h
	m.latest.Set(&h.End)
	m.mu.Unlock()
	if old != nil && !old.releasing.Load() {
		// The handle believed in an older hold that Redis no longer has:
		// another owner id of the handle was granted the lock. (One that
		// an Unlock is releasing is ended by that Unlock, as released: its
		// release handed the lock on.)
		old.end(ErrLockLost, "the lock was acquired afresh, so the earlier hold had ended")
	}
	if h.bornLost() {
		// Its loss timer would only fire at the clock's next tick (a fake
		// clock's next Advance): end it now, so that Lost is closed before
		// Lock returns and nobody counts on a hold Redis may have ended.
		h.end(ErrLockLost, "the lease ran out before the acquisition returned")
	}
	return h
}

// target is the hold an Unlock or Extend given ctx acts on: the one ctx
// carries, or else the handle's current one. A hold that ended gets
// ErrLockLost (lost) or ErrNotHeld.
func (m *Mutex) target(ctx context.Context) (*hold, error) {
	h := m.carried(ctx)
	if h == nil {
		m.mu.Lock()
		h = m.cur
		m.mu.Unlock()
		if h == nil {
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
	if err := CheckContext(ctx); err != nil {
		return m.h.Wrap(ctx, err)
	}
	h, err := m.target(ctx)
	if err != nil {
		return m.h.Wrap(ctx, err)
	}
	h.releasing.Store(true)
	if o := m.h.Config.Observer; o != nil && o.Tracer() != nil {
		ctx, end := o.Tracer().StartCall(ctx, m.call("release", m.h.Release))
		err := m.unlockHold(ctx, h)
		end(err)
		return m.h.Wrap(ctx, err)
	}
	return m.h.Wrap(ctx, m.unlockHold(ctx, h))
}

// unlockHold releases h, keeping ctx's deadline (Bounded).
func (m *Mutex) unlockHold(ctx context.Context, h *hold) error {
	if ctx.Done() == nil {
		// A ctx that never ends: nothing to keep, and no closure to pay for.
		return m.releaseHold(ctx, h)
	}
	return m.h.Bounded(ctx, "releasing the lock", func(ctx context.Context) error {
		return m.releaseHold(ctx, h)
	})
}

// releaseHold undoes one level of h in Redis and applies the outcome.
func (m *Mutex) releaseHold(ctx context.Context, h *hold) error {
	status, err := m.release(ctx, h.s, h.token)
	if status == wire.StillHeld && err == nil {
		h.releasing.Store(false)
	}
	switch {
	case err != nil:
		// The outcome is unknown. Stop renewing: at worst the lease runs
		// out. The slot is not reused: its owner id may still hold the
		// lock in Redis.
		m.forget(h)
		h.finish(ErrReleased, "", false)
		return err
	case status == wire.StillHeld:
		return nil
	case status == wire.NotHeld:
		m.forget(h)
		h.end(ErrLockLost, "Unlock found the lock gone or taken")
		return ErrLockLost
	default:
		m.forget(h)
		h.end(ErrReleased, "")
		return nil
	}
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
	if err := CheckContext(ctx); err != nil {
		return false, m.h.Wrap(ctx, err)
	}
	ok, err := m.forceUnlock(ctx)
	if err != nil {
		return false, m.h.Wrap(ctx, err)
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
	return m.h.Wrap(ctx, m.extend(ctx, d))
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
	since := m.h.Config.Clock.Now()
	ok, err := h.s.h.renew(ctx, h.token, d, false)
	if err != nil {
		return err
	}
	if !ok {
		if h.end(ErrLockLost, "Extend found the lock gone or taken") {
			return ErrLockLost
		}
		return ErrNotHeld // released while the renewal ran
	}
	h.Lock()
	defer h.Unlock()
	if h.EndedLocked() {
		// Released (or lost) while the renewal ran: nothing to extend.
		return ErrNotHeld
	}
	h.extendLocked(since, d)
	return nil
}

// IsLocked reports whether anyone holds the lock.
func (m *Mutex) IsLocked(ctx context.Context) (bool, error) {
	s, err := m.state(ctx)
	return s.Owner != "", m.h.Wrap(ctx, err)
}

// HoldCount returns this handle's re-entry count, 0 if it does not hold it.
func (m *Mutex) HoldCount(ctx context.Context) (int, error) {
	m.mu.Lock()
	h := m.cur
	m.mu.Unlock()
	if h == nil {
		return 0, m.h.Wrap(ctx, CheckContext(ctx))
	}
	s, err := m.state(ctx)
	if err != nil || s.Owner != h.s.h.Owner {
		return 0, m.h.Wrap(ctx, err)
	}
	return s.Count, nil
}

// TTL returns the remaining lease, 0 when the lock is free.
func (m *Mutex) TTL(ctx context.Context) (time.Duration, error) {
	s, err := m.state(ctx)
	return s.TTL, m.h.Wrap(ctx, err)
}

// Token returns the current hold's fencing token, 0 if none.
func (m *Mutex) Token() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil || m.cur.IsLost() {
		return 0
	}
	return m.cur.token
}

// HoldEnd returns the End of the current hold, nil if none: for a
// primitive built on this handle (a semaphore's Permit) to follow it.
func (m *Mutex) HoldEnd() *End {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil {
		return nil
	}
	return &m.cur.End
}

// Lost returns the channel of the current (or most recent) hold.
func (m *Mutex) Lost() <-chan struct{} { return m.latest.Lost() }

// HoldContext returns the context of the current (or most recent) hold. It
// carries the hold: a Lock given it, or a context derived from it,
// re-enters the hold.
func (m *Mutex) HoldContext() context.Context { return m.latest.Context() }

// BindHold returns a context for work done under the handle's current
// hold: ctx's values and deadline, cancelled also when the hold ends (with
// its cause), and carrying the hold, so that a Lock given it re-enters. It
// returns ErrNotHeld if the handle holds nothing.
func (m *Mutex) BindHold(ctx context.Context) (context.Context, error) {
	m.mu.Lock()
	h := m.cur
	m.mu.Unlock()
	if h == nil {
		return nil, ErrNotHeld
	}
	return Bind(ctx, &h.End), nil
}
