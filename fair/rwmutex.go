package fair

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/redis/go-redis/v9"
)

// ErrUpgrade is returned by Lock and TryLock of an RWMutex whose handle holds
// the read lock: waiting for the write lock then could wait for itself. Give
// the read lock back first (or take the write lock first: a writer may also
// take the read lock).
var ErrUpgrade = errors.New("fairlock: this handle holds the read lock; it cannot take the write lock")

// RWMutex is one handle on a fair read-write lock: many readers or one
// writer, served from one queue in arrival order, so writers and runs of
// readers take turns and neither starves. It is a Semaphore of MaxPermits
// permits on keys of its own (fairlock:rw:{name}...): a reader holds 1, a
// writer all of them. So it has all of the semaphore's guarantees (arrival
// order, leases and the watchdog, Lost, HoldContext, fencing tokens, the
// eviction bound, keys that expire, scripts safe to retry), and at most
// MaxPermits readers hold it at once.
//
// Re-entry is counted per handle, in the handle: RLock on a handle that holds
// the read or the write lock, and Lock on a handle that holds the write lock,
// succeed at once without a call to Redis. A writer may take the read lock;
// when its last Unlock comes while it still holds read locks, its hold keeps
// one permit and becomes a read hold (a downgrade), with no gap in between.
// Lock on a handle that holds only the read lock returns ErrUpgrade.
//
// When a writer unlocks (or downgrades), one message wakes the whole run of
// readers at the head of the queue: the release serves every one of them in
// the same script call, up to the next writer, which keeps its place.
//
// Its methods are safe for concurrent use; goroutines sharing a handle share
// its holds and counts.
type RWMutex struct {
	s *Semaphore

	acq sync.Mutex // one acquisition that talks to Redis at a time

	mu    sync.Mutex
	read  *Permit // the read hold (1 permit, or a downgraded write hold)
	rn    int     // read re-entries (inside the write hold while write != nil)
	write *Permit // the write hold (all permits)
	wn    int

	latest core.Latest // the most recent hold, for Lost and HoldContext
}

// NewRWMutex returns a handle on the fair read-write lock name. It takes the
// options of every fair primitive (Option), as NewSemaphore does. Bad arguments get an error wrapping
// ErrInvalidArgument. Its keys collide with no Mutex or Semaphore of the
// same name.
func NewRWMutex(client redis.UniversalClient, name string, opts ...Option) (*RWMutex, error) {
	s, err := newSemaphore(client, name, "fairlock:rw:{"+name+"}", MaxPermits, opts)
	if err != nil {
		return nil, err
	}
	return &RWMutex{s: s}, nil
}

// Name returns the lock's name.
func (m *RWMutex) Name() string { return m.s.name }

// RLock waits in the queue until the read lock is this handle's, or re-enters
// it at once if the handle holds the read or the write lock. The watchdog
// keeps the lease until the last RUnlock. ctx bounds only the wait.
func (m *RWMutex) RLock(ctx context.Context) error {
	_, err := m.acquire(ctx, false, m.s.cfg.LockAttempt())
	return err
}

// TryRLock is RLock for up to wait (0: one attempt that never queues), with
// a fixed lease if lease > 0, as Mutex.TryLock. It returns false, nil when
// the wait elapsed. A re-entry returns true at once and keeps the hold's
// lease as it is.
func (m *RWMutex) TryRLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	a, err := m.s.cfg.TryAttempt(wait, lease)
	if err != nil {
		return false, err
	}
	return m.acquire(ctx, false, a)
}

// Lock waits in the queue until the write lock is this handle's, or re-enters
// it at once if the handle holds it. A handle that holds only the read lock
// gets ErrUpgrade.
func (m *RWMutex) Lock(ctx context.Context) error {
	_, err := m.acquire(ctx, true, m.s.cfg.LockAttempt())
	return err
}

// TryLock is Lock for up to wait (0: one attempt that never queues), with a
// fixed lease if lease > 0. It returns false, nil when the wait elapsed. A
// re-entry returns true at once and keeps the hold's lease as it is.
func (m *RWMutex) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	a, err := m.s.cfg.TryAttempt(wait, lease)
	if err != nil {
		return false, err
	}
	return m.acquire(ctx, true, a)
}

func (m *RWMutex) acquire(ctx context.Context, write bool, a core.Attempt) (bool, error) {
	if done, err := m.reenter(write); done {
		return err == nil, err
	}
	m.acq.Lock()
	defer m.acq.Unlock()
	// Another goroutine of this handle may have taken it meanwhile.
	if done, err := m.reenter(write); done {
		return err == nil, err
	}
	n := 1
	if write {
		n = MaxPermits
	}
	p, err := m.s.acquire(ctx, n, a)
	if p == nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if write {
		m.write, m.wn = p, 1
	} else {
		m.read, m.rn = p, 1
	}
	m.latest.Set(p.end)
	return true, nil
}

// reenter counts a re-entry if the handle's holds allow one. done reports
// that the call is decided (a re-entry, or ErrUpgrade).
func (m *RWMutex) reenter(write bool) (done bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropLostLocked()
	switch {
	case m.write != nil && write:
		m.wn++
		return true, nil
	case m.write != nil || m.read != nil:
		if write {
			return true, ErrUpgrade
		}
		m.rn++
		return true, nil
	}
	return false, nil
}

// dropLostLocked forgets holds that were lost: the next acquisition is a
// fresh one.
func (m *RWMutex) dropLostLocked() {
	if m.write != nil && isLost(m.write) {
		m.write, m.wn, m.rn = nil, 0, 0
	}
	if m.read != nil && isLost(m.read) {
		m.read, m.rn = nil, 0
	}
}

func isLost(p *Permit) bool { return p.end.IsLost() }

// RUnlock undoes one RLock or successful TryRLock. The last one gives the
// read lock back (the next in the queue takes it if it can), unless the
// handle also holds the write lock. A handle without the read lock gets
// ErrNotHeld; a lost hold gets ErrLockLost.
func (m *RWMutex) RUnlock(ctx context.Context) error {
	m.mu.Lock()
	if m.rn == 0 {
		m.mu.Unlock()
		return ErrNotHeld
	}
	if p := m.holdLocked(); isLost(p) {
		m.dropLostLocked()
		m.mu.Unlock()
		return ErrLockLost
	}
	m.rn--
	if m.rn > 0 || m.write != nil {
		m.mu.Unlock()
		return nil
	}
	p := m.read
	m.read = nil
	m.mu.Unlock()
	return p.Release(ctx)
}

// Unlock undoes one Lock or successful TryLock. The last one gives the write
// lock back, or, if the handle still holds read locks, keeps one permit of
// its hold as the read lock (a downgrade: no other writer can come in
// between). A handle without the write lock gets ErrNotHeld; a lost hold
// gets ErrLockLost.
func (m *RWMutex) Unlock(ctx context.Context) error {
	m.mu.Lock()
	if m.write == nil {
		m.mu.Unlock()
		return ErrNotHeld
	}
	if isLost(m.write) {
		m.dropLostLocked()
		m.mu.Unlock()
		return ErrLockLost
	}
	m.wn--
	if m.wn > 0 {
		m.mu.Unlock()
		return nil
	}
	p := m.write
	m.write = nil
	if m.rn == 0 {
		m.mu.Unlock()
		return p.Release(ctx)
	}
	// Downgrade. Until the resize is done the hold keeps all permits: the
	// handle holds the read lock either way.
	m.read = p
	m.mu.Unlock()
	ok, err := p.resize(ctx, 1)
	switch {
	case err != nil:
		return fmt.Errorf("fairlock: the write lock is still held as the read lock (downgrade failed): %w", err)
	case !ok:
		return ErrLockLost
	}
	return nil
}

// holdLocked is the hold that read re-entries count on.
func (m *RWMutex) holdLocked() *Permit {
	if m.write != nil {
		return m.write
	}
	return m.read
}

// Token returns the fencing token of this handle's write hold, or else of
// its read hold; 0 if it holds neither. A downgraded hold keeps its token.
func (m *RWMutex) Token() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.holdLocked(); p != nil {
		return p.Token()
	}
	return 0
}

// Lost returns a channel closed if the current (or most recent) hold is
// lost. Before the first hold it returns a channel that is never closed.
func (m *RWMutex) Lost() <-chan struct{} { return m.latest.Lost() }

// HoldContext returns a context cancelled when the current (or most recent)
// hold ends; context.Cause tells ErrLockLost from ErrReleased. Before the
// first hold it is already cancelled with cause ErrNotHeld.
func (m *RWMutex) HoldContext() context.Context { return m.latest.Context() }

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
