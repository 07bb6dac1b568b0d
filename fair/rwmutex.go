package fair

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/observe"
	"github.com/redis/go-redis/v9"
)

// ErrUpgrade is returned by Lock and TryLock of an RWMutex given a context
// that carries a read hold: waiting for the write lock then would wait for
// itself. Give the read lock back first (or take the write lock first: a
// writer may also take the read lock).
var ErrUpgrade = errors.New("fairlock: this call chain holds the read lock; it cannot take the write lock")

// RWMutex is one handle on a fair read-write lock: many readers or one
// writer, served from one queue in arrival order, so writers and runs of
// readers take turns and neither starves. It is a Semaphore of MaxPermits
// permits on keys of its own (fairlock:rw:{name}...): a reader holds 1, a
// writer all of them. So it has all of the semaphore's guarantees (arrival
// order, leases and the watchdog, Lost, HoldContext, fencing tokens, the
// eviction bound, keys that expire, scripts safe to retry), and at most
// MaxPermits readers hold it at once.
//
// Its methods are safe for concurrent use, and goroutines sharing a handle
// behave as they would with sync.RWMutex: each Lock and each RLock takes its
// own turn in the queue, so writers exclude every other holder, readers
// share the lock with each other, and a writer waiting in the queue is not
// passed by readers that come after it, of this handle or another. A call
// re-enters a hold only when its ctx carries it (LockContext, RLockContext,
// Do, RDo, HoldContext, or a context derived from one): RLock and Lock
// given a write hold's context, and RLock given a read hold's context,
// succeed at once without a call to Redis. A writer may take the read lock
// that way; when its last Unlock comes while it still holds read locks, its
// hold keeps one permit and becomes a read hold (a downgrade), with no gap
// in between. Lock given a read hold's context returns ErrUpgrade.
//
// When a writer unlocks (or downgrades), one message wakes the whole run of
// readers at the head of the queue: the release serves every one of them in
// the same script call, up to the next writer, which keeps its place.
//
// It has no TTL, Extend, IsLocked or ForceUnlock of its own yet: a handle
// may hold several read holds at once, so each would need to say which.
// [InspectRWMutex] shows every hold with its remaining lease; a hold that
// needs longer is taken with the watchdog (RLock, Lock) rather than a
// fixed lease.
type RWMutex struct {
	s *Semaphore

	mu     sync.Mutex
	write  *rwHold   // the write hold, nil if none
	reads  []*rwHold // the read holds, oldest first (downgraded ones too)
	latest *rwHold   // the most recent hold, for Lost and HoldContext
}

// rwHold is one hold of an RWMutex: a permit hold and its re-entries.
type rwHold struct {
	p     *Permit
	write bool // still the write hold: not downgraded
	wn    int  // write re-entries
	rn    int  // read re-entries: inside the write hold, or of the read hold
	bound bool // its context was handed out: its RUnlock comes with it
}

// rwKey marks a context that carries a hold of the RWMutex m.
type rwKey struct{ m *RWMutex }

// NewRWMutex returns a handle on the fair read-write lock name. It takes the
// options of every fair primitive (Option), as NewSemaphore does. Bad
// arguments get an error wrapping fairlock.ErrInvalidArgument. Its keys collide with
// no Mutex or Semaphore of the same name.
func NewRWMutex(owner *fairlock.Owner, name string, opts ...Option) (*RWMutex, error) {
	s, err := newSemaphore(core.OwnerOf(owner), name, "fairlock:rw:{"+name+"}", MaxPermits, opts)
	if err != nil {
		return nil, err
	}
	s.what, s.primitive = "read-write lock", observe.RWMutex
	return &RWMutex{s: s}, nil
}

// Name returns the lock's name.
func (m *RWMutex) Name() string {
	if !m.made() {
		return ""
	}
	return m.s.name
}

// RLock waits in the queue until the read lock is this call's, or re-enters
// the hold its ctx carries (a read hold, or a write hold) at once. The
// watchdog keeps the lease until the last RUnlock. ctx bounds only the
// wait.
func (m *RWMutex) RLock(ctx context.Context) error { return m.lock(ctx, false) }

// RLockContext is RLock, and returns the context to do the work in, as
// Mutex.LockContext does: RUnlock given it releases exactly this hold.
func (m *RWMutex) RLockContext(ctx context.Context) (context.Context, error) {
	return m.lockContext(ctx, false)
}

// TryRLock is RLock for up to wait (0: one attempt that never queues), with
// a fixed lease if lease > 0, as Mutex.TryLock. It returns false, nil when
// the wait elapsed. A re-entry returns true at once and keeps the hold's
// lease as it is.
func (m *RWMutex) TryRLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	return m.tryLock(ctx, false, wait, lease)
}

// Lock waits in the queue until the write lock is this call's, or
// re-enters the write hold its ctx carries at once. Given a read hold's
// context, it returns ErrUpgrade.
func (m *RWMutex) Lock(ctx context.Context) error { return m.lock(ctx, true) }

// LockContext is Lock, and returns the context to do the work in, as
// Mutex.LockContext does: Unlock given it releases exactly this hold, and
// RLock given it takes the read lock inside the write hold.
func (m *RWMutex) LockContext(ctx context.Context) (context.Context, error) {
	return m.lockContext(ctx, true)
}

// TryLock is Lock for up to wait (0: one attempt that never queues), with a
// fixed lease if lease > 0. It returns false, nil when the wait elapsed. A
// re-entry returns true at once and keeps the hold's lease as it is.
func (m *RWMutex) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	return m.tryLock(ctx, true, wait, lease)
}

// lock, lockContext and tryLock are Lock, LockContext and TryLock of the
// write lock (write) or the read lock.
func (m *RWMutex) lock(ctx context.Context, write bool) error {
	if !m.made() {
		return core.Unmade()
	}
	_, err := m.acquire(ctx, write, core.LockAttempt(&m.s.cfg))
	return err
}

func (m *RWMutex) lockContext(ctx context.Context, write bool) (context.Context, error) {
	if !m.made() {
		return nil, core.Unmade()
	}
	h, err := m.acquire(ctx, write, core.LockAttempt(&m.s.cfg))
	if err != nil {
		return nil, err
	}
	return m.bind(ctx, h), nil
}

func (m *RWMutex) tryLock(ctx context.Context, write bool, wait, lease time.Duration) (bool, error) {
	if !m.made() {
		return false, core.Unmade()
	}
	a, err := core.TryAttempt(&m.s.cfg, wait, lease)
	if err != nil {
		return false, m.s.named(ctx, err)
	}
	h, err := m.acquire(ctx, write, a)
	return h != nil, err
}

// Do runs fn holding the write lock, as Mutex.Do does.
func (m *RWMutex) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	if !m.made() {
		return core.Unmade()
	}
	return m.s.named(ctx, m.do(ctx, m.LockContext, m.Unlock, fn))
}

// RDo runs fn holding the read lock, as Mutex.Do does.
func (m *RWMutex) RDo(ctx context.Context, fn func(ctx context.Context) error) error {
	if !m.made() {
		return core.Unmade()
	}
	return m.s.named(ctx, m.do(ctx, m.RLockContext, m.RUnlock, fn))
}

// do runs fn under the side that lock takes and unlock releases.
func (m *RWMutex) do(ctx context.Context, lock func(context.Context) (context.Context, error),
	unlock func(context.Context) error, fn func(ctx context.Context) error) error {
	if err := core.CheckFunc(fn); err != nil {
		return err
	}
	hctx, err := lock(ctx)
	if err != nil {
		return err
	}
	return core.Held(hctx, unlock, m.s.cfg.CleanupTimeout, fn)
}

// carried is the live hold of this handle that ctx carries, if any; a hold
// that ended gets its error.
func (m *RWMutex) carried(ctx context.Context) (*rwHold, error) {
	h, _ := ctx.Value(rwKey{m}).(*rwHold)
	if h == nil {
		return nil, nil
	}
	if h.p.end.IsEnded() {
		return nil, h.p.end.EndedErr()
	}
	return h, nil
}

// bind is the context for work under h (core.Bind), carrying h.
func (m *RWMutex) bind(ctx context.Context, h *rwHold) context.Context {
	m.mu.Lock()
	h.bound = true
	m.mu.Unlock()
	return context.WithValue(core.Bind(ctx, h.p.end), rwKey{m}, h)
}

func (m *RWMutex) acquire(ctx context.Context, write bool, a core.Attempt) (*rwHold, error) {
	if err := core.CheckContext(ctx); err != nil {
		return nil, m.s.named(ctx, err)
	}
	if h, err := m.carried(ctx); err != nil || h != nil {
		if err != nil {
			return nil, m.s.named(ctx, err)
		}
		return m.reenter(ctx, h, write)
	}
	n := 1
	if write {
		n = MaxPermits
	}
	p, err := m.s.acquire(ctx, n, a)
	if p == nil {
		return nil, err
	}
	h := &rwHold{p: p, write: write}
	m.mu.Lock()
	defer m.mu.Unlock()
	if write {
		h.wn = 1
		m.write = h
	} else {
		h.rn = 1
		m.dropEndedLocked()
		m.reads = append(m.reads, h)
	}
	m.latest = h
	return h, nil
}

// reenter counts a re-entry of h, a hold the call's ctx carries.
func (m *RWMutex) reenter(ctx context.Context, h *rwHold, write bool) (*rwHold, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case write && !h.write:
		return nil, m.s.named(ctx, ErrUpgrade)
	case write:
		h.wn++
	default:
		h.rn++
	}
	return h, nil
}

// dropEndedLocked forgets the read holds that ended (lost): RUnlock with a
// plain context looks for a live one.
func (m *RWMutex) dropEndedLocked() {
	m.reads = slices.DeleteFunc(m.reads, func(h *rwHold) bool { return h.p.end.IsEnded() })
}

// RUnlock undoes one RLock or successful TryRLock: of the hold its ctx
// carries, or, with any other ctx, of one of this handle's read holds
// (readers share the lock, so any of them will do: the oldest taken by a
// plain RLock).
// The last one of a hold gives the read lock back (the next in the queue
// takes it if it can), unless it is inside a write hold. A handle without
// the read lock gets fairlock.ErrNotHeld; a lost hold gets fairlock.ErrLockLost;
// after the owner's Close, fairlock.ErrClosed.
func (m *RWMutex) RUnlock(ctx context.Context) error {
	if !m.made() {
		return core.Unmade()
	}
	if err := core.CheckContext(ctx); err != nil {
		return m.s.named(ctx, err)
	}
	h, err := m.carried(ctx)
	if err != nil {
		return m.s.named(ctx, err)
	}
	m.mu.Lock()
	if h == nil {
		lost := slices.ContainsFunc(m.reads, func(h *rwHold) bool { return h.p.end.IsLost() })
		m.dropEndedLocked()
		if len(m.reads) == 0 {
			m.mu.Unlock()
			switch {
			case lost:
				return m.s.named(ctx, fairlock.ErrLockLost)
			case core.CheckOwner(m.s.owner) != nil:
				// Close ended the read holds, if there were any: not a loss.
				return m.s.named(ctx, fairlock.ErrClosed)
			case m.write != nil:
				return m.s.named(ctx, fmt.Errorf("%w: this handle holds the write lock, not the read lock: use Unlock (or RUnlock with the write hold's context, for a read lock taken inside it)", fairlock.ErrNotHeld))
			}
			return m.s.named(ctx, fairlock.ErrNotHeld)
		}
		// Readers share the lock, so any read hold taken with a plain
		// context will do: the oldest. Those whose context was handed out
		// come last, as their RUnlock comes with it.
		h = m.reads[0]
		if i := slices.IndexFunc(m.reads, func(r *rwHold) bool { return !r.bound }); i >= 0 {
			h = m.reads[i]
		}
	}
	if h.rn == 0 {
		m.mu.Unlock()
		return m.s.named(ctx, fmt.Errorf("%w: the hold this context carries is the write lock, taken without a read lock inside it: use Unlock", fairlock.ErrNotHeld))
	}
	h.rn--
	if h.rn > 0 || h.write {
		m.mu.Unlock()
		return nil
	}
	m.reads = slices.DeleteFunc(m.reads, func(r *rwHold) bool { return r == h })
	m.mu.Unlock()
	return h.p.Release(ctx)
}

// Unlock undoes one Lock or successful TryLock of the write hold (the one
// its ctx carries, or the handle's). The last one gives the write lock
// back, or, if the hold still has read locks inside it, keeps one permit of
// it as a read hold (a downgrade: no other writer can come in between). A
// handle without the write lock gets fairlock.ErrNotHeld (which says to use RUnlock
// if it holds the read lock); a lost hold gets fairlock.ErrLockLost; after the
// owner's Close, fairlock.ErrClosed.
func (m *RWMutex) Unlock(ctx context.Context) error {
	if !m.made() {
		return core.Unmade()
	}
	if err := core.CheckContext(ctx); err != nil {
		return m.s.named(ctx, err)
	}
	h, err := m.carried(ctx)
	if err != nil {
		return m.s.named(ctx, err)
	}
	m.mu.Lock()
	if h == nil {
		h = m.write
	}
	if h == nil || !h.write {
		reading := h != nil || len(m.reads) > 0
		m.mu.Unlock()
		if reading {
			return m.s.named(ctx, fmt.Errorf("%w: this handle holds the read lock, not the write lock: use RUnlock", fairlock.ErrNotHeld))
		}
		if core.CheckOwner(m.s.owner) != nil {
			return m.s.named(ctx, fairlock.ErrClosed) // Close ended the hold, if there was one
		}
		return m.s.named(ctx, fairlock.ErrNotHeld)
	}
	if h.p.end.IsEnded() {
		if m.write == h {
			m.write = nil
		}
		m.mu.Unlock()
		return m.s.named(ctx, h.p.end.EndedErr()) // ErrLockLost, or ErrClosed after Close: not a loss
	}
	h.wn--
	if h.wn > 0 {
		m.mu.Unlock()
		return nil
	}
	if m.write == h {
		m.write = nil
	}
	if h.rn == 0 {
		m.mu.Unlock()
		return h.p.Release(ctx)
	}
	// Downgrade. Until the resize is done the hold keeps all permits: the
	// caller holds the read lock either way.
	h.write = false
	m.reads = append(m.reads, h)
	m.mu.Unlock()
	ok, err := h.p.resize(ctx, 1)
	switch {
	case err != nil:
		return m.s.named(ctx, fmt.Errorf("the write lock is still held as the read lock (downgrade failed): %w", err))
	case !ok:
		return m.s.named(ctx, fairlock.ErrLockLost)
	}
	return nil
}

// Token returns the fencing token of this handle's write hold, or else of
// its latest read hold; 0 if it holds neither. A downgraded hold keeps its
// token.
func (m *RWMutex) Token() int64 {
	if !m.made() {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.write != nil {
		return m.write.p.Token()
	}
	for i := len(m.reads) - 1; i >= 0; i-- {
		if t := m.reads[i].p.Token(); t != 0 {
			return t
		}
	}
	return 0
}

// Lost returns a channel closed if the most recent hold is lost. Before the
// first hold it returns a channel that is never closed.
func (m *RWMutex) Lost() <-chan struct{} {
	if !m.made() {
		lost, _ := core.Unheld()
		return lost
	}
	m.mu.Lock()
	h := m.latest
	m.mu.Unlock()
	if h == nil {
		return (&core.Latest{}).Lost()
	}
	return h.p.Lost()
}

// HoldContext returns a context cancelled when the most recent hold ends;
// context.Cause tells fairlock.ErrLockLost (lost) from fairlock.ErrReleased
// (released) and fairlock.ErrClosed (the owner's Close ended it). It carries
// that hold, as LockContext's does: call it only from the call chain that
// holds it.
// Before the first hold it is already cancelled with cause fairlock.ErrNotHeld.
func (m *RWMutex) HoldContext() context.Context {
	if !m.made() {
		_, ctx := core.Unheld()
		return ctx
	}
	m.mu.Lock()
	h := m.latest
	m.mu.Unlock()
	if h == nil {
		return (&core.Latest{}).Context()
	}
	m.mu.Lock()
	h.bound = true
	m.mu.Unlock()
	return context.WithValue(h.p.HoldContext(), rwKey{m}, h)
}

// InspectRWMutex reads the state of the read-write lock name without
// changing it: its holders (a reader holds 1 permit, a writer MaxPermits) and
// its queue.
func InspectRWMutex(ctx context.Context, client redis.UniversalClient, name string) (SemaphoreState, error) {
	if err := core.CheckClient(client); err != nil {
		return SemaphoreState{}, err
	}
	if err := core.CheckName(name); err != nil {
		return SemaphoreState{}, err
	}
	return inspectSemaphore(ctx, client, name, "fairlock:rw:{"+name+"}", lua.Default())
}

// made reports whether m was made by NewRWMutex: not nil, not a zero value. Its
// methods with an error refuse otherwise (core.Unmade), and the others
// return zero values.
func (m *RWMutex) made() bool { return m != nil && m.s != nil && m.s.owner != nil }
