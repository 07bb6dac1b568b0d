package core

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/internal/lua"
	"github.com/redis/go-redis/v9"
)

// Kind is what differs between the locks: how a caller acquires and waits.
type Kind interface {
	// Acquire takes or re-enters the lock for the kind's handle, waiting as
	// a says. It returns nil, nil when the wait elapsed.
	Acquire(ctx context.Context, a Attempt) (*Grant, error)
}

// Layout is where a kind keeps a lock and which of its scripts end a hold;
// the shared scripts (renew.lua, state.lua) work on both layouts.
type Layout struct {
	Keys        []string // the hold first
	Channel     string   // where releases are published
	Publish     string   // PUBLISH or SPUBLISH
	Release     *lua.Script
	ForceUnlock *lua.Script
}

// Attempt is one Lock or TryLock call.
type Attempt struct {
	Wait    time.Duration // how long to wait; with Forever, no bound
	Forever bool
	Lease   time.Duration // the lease to ask for
	Fixed   bool          // a fixed lease, not renewed
}

// HoldState is the hold as Redis sees it.
type HoldState struct {
	Owner string
	Count int
	TTL   time.Duration
	Token int64
	Label string
}

// Mutex is the shared implementation behind fair.Mutex and reentrant.Mutex.
type Mutex struct {
	Client redis.UniversalClient
	Name   string
	cfg    Config
	owner  string
	kind   Kind
	layout Layout

	mu   sync.Mutex
	cur  *hold // the hold this handle believes in, nil if none
	last *hold // the most recent hold, for Lost and HoldContext

	// stale is the token of this handle's latest hold that ended as lost:
	// the client stopped counting on it (its lease ran out as the client
	// counts it, a safety margin before Redis's), so Redis may still have
	// it for a moment. The next acquiring request ends it there first, so
	// it is neither taken for a re-entry nor left to run out. 0: none.
	stale atomic.Int64
}

// NewMutex checks the arguments and makes a handle with a fresh owner id.
func NewMutex(client redis.UniversalClient, name string, cfg Config, kind func(*Mutex) (Kind, Layout)) (*Mutex, error) {
	if err := CheckClient(client); err != nil {
		return nil, err
	}
	if err := CheckName(name); err != nil {
		return nil, err
	}
	m := &Mutex{Client: client, Name: name, cfg: cfg, owner: NewOwnerID()}
	m.kind, m.layout = kind(m)
	return m, nil
}

// Config returns the handle's configuration.
func (m *Mutex) Config() *Config { return &m.cfg }

// Owner returns the handle's owner id.
func (m *Mutex) Owner() string { return m.owner }

// StaleToken returns the token of a hold this handle gave up for lost that
// Redis may still have, or 0; acquiring scripts end such a hold first.
func (m *Mutex) StaleToken() int64 { return m.stale.Load() }

// StaleHandled records that a request carrying StaleToken t reached Redis.
func (m *Mutex) StaleHandled(t int64) {
	if t != 0 {
		m.stale.CompareAndSwap(t, 0)
	}
}

// RequestID returns a fresh id for one state-changing request of this handle.
func (m *Mutex) RequestID() string { return m.owner + "#" + NextID() }

// Lock waits until the lock is held, with the watchdog keeping the lease.
func (m *Mutex) Lock(ctx context.Context) error {
	_, err := m.acquire(ctx, Attempt{Forever: true, Lease: m.cfg.Lease})
	return err
}

// TryLock implements both locks' TryLock.
func (m *Mutex) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if wait < 0 {
		return false, Invalid("wait must not be negative, got %v", wait)
	}
	if lease < 0 {
		return false, Invalid("lease must not be negative, got %v", lease)
	}
	a := Attempt{Wait: wait, Lease: lease, Fixed: lease > 0}
	if lease == 0 {
		a.Lease = m.cfg.Lease
	}
	return m.acquire(ctx, a)
}

func (m *Mutex) acquire(ctx context.Context, a Attempt) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	g, err := m.kind.Acquire(ctx, a)
	if err != nil || g == nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.cur; h != nil && h.token == g.Token && !h.isLost() {
		// Re-entry: the lease mode stays as the fresh acquisition fixed it.
		h.reenter(*g, a.Lease)
		return true, nil
	}
	if m.cur != nil {
		// The handle believed in an older hold that Redis no longer has.
		m.cur.end(ErrLockLost, "the lock was acquired afresh, so the earlier hold had ended")
	}
	m.cur = newHold(m, *g, a.Lease, a.Fixed)
	m.last = m.cur
	return true, nil
}

// Unlock implements both locks' Unlock.
func (m *Mutex) Unlock(ctx context.Context) error {
	m.mu.Lock()
	h := m.cur
	m.mu.Unlock()
	if h == nil {
		return ErrNotHeld
	}
	if h.isLost() {
		m.forget(h)
		return ErrLockLost
	}
	ctx, cancel := m.CleanupContext(ctx)
	defer cancel()
	status, err := m.release(ctx, h.token)
	switch {
	case err != nil:
		// The outcome is unknown. Stop renewing: at worst the lease runs out.
		m.forget(h)
		h.end(ErrReleased, "")
		return err
	case status == 2:
		return nil
	case status == 0:
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

// ForceUnlock implements both locks' ForceUnlock.
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

// IsLocked reports whether anyone holds the lock.
func (m *Mutex) IsLocked(ctx context.Context) (bool, error) {
	s, err := m.state(ctx)
	return s.Owner != "", err
}

// HoldCount returns this handle's re-entry count, 0 if it does not hold it.
func (m *Mutex) HoldCount(ctx context.Context) (int, error) {
	s, err := m.state(ctx)
	if err != nil || s.Owner != m.owner {
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
	if m.cur == nil || m.cur.isLost() {
		return 0
	}
	return m.cur.token
}

var neverClosed = make(chan struct{})

// Lost returns the channel of the current (or most recent) hold.
func (m *Mutex) Lost() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last == nil {
		return neverClosed
	}
	return m.last.lost
}

var notHeldCtx = func() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(ErrNotHeld)
	return ctx
}()

// HoldContext returns the context of the current (or most recent) hold.
func (m *Mutex) HoldContext() context.Context {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last == nil {
		return notHeldCtx
	}
	return m.last.ctx
}

// CleanupContext is ctx, or, when ctx has already ended, a context that
// keeps its values, ignores its cancellation, and has its own time bound:
// leaving a queue or unlocking under defer must run even then.
func (m *Mutex) CleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), m.cfg.CleanupTimeout)
}

func (m *Mutex) logWarn(msg string, err error) {
	if l := m.cfg.Logger; l != nil {
		l.Warn("fairlock: "+msg, slog.String("lock", m.Name), slog.String("owner", m.owner), slog.Any("error", err))
	}
}

func (m *Mutex) logError(msg string, token int64) {
	if l := m.cfg.Logger; l != nil {
		l.Error("fairlock: "+msg, slog.String("lock", m.Name), slog.String("owner", m.owner), slog.Int64("token", token))
	}
}

// LogInfo logs an event worth a user's attention.
func (m *Mutex) LogInfo(msg string, args ...any) {
	if l := m.cfg.Logger; l != nil {
		l.Info("fairlock: "+msg, append([]any{slog.String("lock", m.Name), slog.String("owner", m.owner)}, args...)...)
	}
}
