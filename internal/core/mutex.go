package core

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/wire"
	"github.com/redis/go-redis/v9"
)

// Kind is what differs between the primitives: how a caller acquires and
// waits. It acts for its handle through the Agent it was made with.
type Kind interface {
	// Acquire takes or re-enters the lock for the kind's handle, waiting as
	// a says. It returns nil, nil when the wait elapsed.
	Acquire(ctx context.Context, a Attempt) (*Grant, error)
}

// Attempt is one Lock or TryLock call.
type Attempt struct {
	Wait    time.Duration // how long to wait; with Forever, no bound
	Forever bool
	Lease   time.Duration // the lease to ask for
	Fixed   bool          // a fixed lease, not renewed
}

// Mutex is the shared implementation behind fair.Mutex and reentrant.Mutex.
type Mutex struct {
	h    Agent
	kind Kind

	mu     sync.Mutex
	cur    *hold  // the hold this handle believes in, nil if none
	latest Latest // the most recent hold, for Lost and HoldContext

	stale atomic.Int64 // Agent.stale
}

// NewMutex checks the arguments and makes a handle with a fresh owner id, on
// the keys place gives for name, waiting as the Kind that kind returns.
func NewMutex(client redis.UniversalClient, name string, cfg Config,
	place func(name string, scripts *lua.Scripts) Place, kind func(Agent) Kind) (*Mutex, error) {
	if err := CheckClient(client); err != nil {
		return nil, err
	}
	if err := CheckName(name); err != nil {
		return nil, err
	}
	m := &Mutex{}
	m.h = Agent{Client: client, Name: name, Owner: wire.NewOwner(), Config: &cfg,
		Publish: PublishCommand(client), Place: place(name, cfg.Scripts), stale: &m.stale}
	m.h.args = newArgs(m.h)
	m.kind = kind(m.h)
	return m, nil
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.h.Name }

// Owner returns the handle's owner id.
func (m *Mutex) Owner() string { return m.h.Owner }

// Lock waits until the lock is held, with the watchdog keeping the lease.
func (m *Mutex) Lock(ctx context.Context) error {
	_, err := m.Acquire(ctx, m.h.Config.LockAttempt())
	return err
}

// TryLock implements every mutex's TryLock.
func (m *Mutex) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	a, err := m.h.Config.TryAttempt(wait, lease)
	if err != nil {
		return false, err
	}
	return m.Acquire(ctx, a)
}

// LockAttempt is the Attempt of a Lock: no bound on the wait, and the
// watchdog's lease.
func (c *Config) LockAttempt() Attempt { return Attempt{Forever: true, Lease: c.Lease} }

// TryAttempt checks a TryLock's arguments and makes its Attempt: a fixed
// lease if lease > 0, the watchdog's otherwise.
func (c *Config) TryAttempt(wait, lease time.Duration) (Attempt, error) {
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
// elapsed.
func (m *Mutex) Acquire(ctx context.Context, a Attempt) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	g, err := m.kind.Acquire(ctx, a)
	if err != nil || g == nil {
		return false, err
	}
	m.Adopt(g, a)
	return true, nil
}

// Adopt makes g, granted for a by a call that went around Acquire (a
// semaphore's wait in its gate's queue), this handle's hold, as Acquire
// does with its kind's grants: a fresh hold, or a re-entry of the current
// one.
func (m *Mutex) Adopt(g *Grant, a Attempt) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.cur; h != nil && h.token == g.Token && !h.IsLost() {
		// Re-entry: the lease mode stays as the fresh acquisition fixed it.
		h.reenter(*g, a.Lease)
		return
	}
	if m.cur != nil {
		// The handle believed in an older hold that Redis no longer has.
		m.cur.end(ErrLockLost, "the lock was acquired afresh, so the earlier hold had ended")
	}
	m.cur = newHold(m, *g, a.Lease, a.Fixed)
	m.latest.Set(&m.cur.End)
	if m.cur.bornLost() {
		// Its loss timer would only fire at the clock's next tick (a fake
		// clock's next Advance): end it now, so that Lost is closed before
		// Lock returns and nobody counts on a hold Redis may have ended.
		m.cur.end(ErrLockLost, "the lease ran out before the acquisition returned")
	}
}

// Unlock implements every mutex's Unlock (and a Permit's Release).
func (m *Mutex) Unlock(ctx context.Context) error {
	m.mu.Lock()
	h := m.cur
	m.mu.Unlock()
	if h == nil {
		return ErrNotHeld
	}
	if h.IsLost() {
		m.forget(h)
		return ErrLockLost
	}
	ctx, cancel := m.h.Cleanup(ctx)
	defer cancel()
	status, err := m.release(ctx, h.token)
	switch {
	case err != nil:
		// The outcome is unknown. Stop renewing: at worst the lease runs out.
		m.forget(h)
		h.end(ErrReleased, "")
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
	ok, err := m.forceUnlock(ctx)
	if err != nil {
		return false, err
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

// Extend implements both mutexes' Extend: the current hold's lease becomes d
// from now, never shorter, in Redis and in the handle's belief.
func (m *Mutex) Extend(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return Invalid("the lease to extend to must be positive, got %v", d)
	}
	m.mu.Lock()
	h := m.cur
	m.mu.Unlock()
	if h == nil {
		return ErrNotHeld
	}
	if h.IsLost() {
		return ErrLockLost
	}
	since := m.h.Config.Clock.Now()
	ok, err := m.h.renew(ctx, h.token, d, false)
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
	return s.Owner != "", err
}

// HoldCount returns this handle's re-entry count, 0 if it does not hold it.
func (m *Mutex) HoldCount(ctx context.Context) (int, error) {
	s, err := m.state(ctx)
	if err != nil || s.Owner != m.h.Owner {
		return 0, err
	}
	return s.Count, nil
}

// TTL returns the remaining lease, 0 when the lock is free.
func (m *Mutex) TTL(ctx context.Context) (time.Duration, error) {
	s, err := m.state(ctx)
	return s.TTL, err
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

// HoldContext returns the context of the current (or most recent) hold.
func (m *Mutex) HoldContext() context.Context { return m.latest.Context() }
