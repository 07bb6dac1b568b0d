package fair

import (
	"context"
	"log/slog"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/config"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/observe"
)

// Errors. Compare with errors.Is; they are the same values as reentrant's.
var (
	// ErrInvalidArgument is wrapped by every error about bad input.
	ErrInvalidArgument = core.ErrInvalidArgument
	// ErrNotHeld is returned by Unlock when this handle does not hold the lock.
	ErrNotHeld = core.ErrNotHeld
	// ErrLockLost is returned by Unlock when the hold ended without it; it is
	// also the cause of a HoldContext so ended. errors.Is(ErrLockLost, ErrNotHeld).
	ErrLockLost = core.ErrLockLost
	// ErrReleased is the cause of a HoldContext ended by Unlock or ForceUnlock.
	ErrReleased = core.ErrReleased
	// ErrPending is wrapped by the error of an Unlock whose ctx ended
	// before Redis answered: the release goes on in the background.
	ErrPending = core.ErrPending
	// ErrClosed is returned by the calls of a handle whose Owner was
	// closed, and is the cause of a HoldContext that Close ended.
	ErrClosed = core.ErrClosed
	// ErrNotReplicated is wrapped by the error of a Lock or TryLock whose
	// acquisition fewer replicas than WithReplicas asks for acknowledged in
	// time: it was undone, and the handle holds nothing.
	ErrNotReplicated = core.ErrNotReplicated
)

// DefaultWaitTimeout is how long a queued waiter may be silent, unless
// WithWaitTimeout says otherwise.
const DefaultWaitTimeout = config.DefaultWaitTimeout

// Option configures any fair primitive: New, NewSemaphore and NewRWMutex
// take it. Every Option is also a MutexOption.
type Option interface{ fairOption }

// MutexOption configures a Mutex (New): an Option, or WithReplicas, which
// the semaphore and the RW lock do not support yet. Given to them, it does
// not compile.
type MutexOption interface{ mutexOption }

type (
	fairOption  = config.FairOption
	mutexOption = config.FairMutexOption
)

// WithLease sets the lease that the watchdog keeps alive for Lock and for
// TryLock with lease 0 (default 30 s, at least 10 ms). It is renewed every
// lease/3; if no renewal succeeds in time, the hold is lost.
func WithLease(d time.Duration) Option { return config.WithLease(d) }

// WithDriftFactor sets the part of each lease the client gives up so that
// it stops believing it holds the lock before Redis expires it (default
// 0.01, plus 2 ms; from 0 up to 0.5).
func WithDriftFactor(f float64) Option { return config.WithDriftFactor(f) }

// WithLogger sends background events (failed renewals, lost holds) to l
// (default: none).
func WithLogger(l *slog.Logger) Option { return config.WithLogger(l) }

// WithCleanupTimeout bounds the clean-up calls that go on after the
// caller's ctx ended: a release under defer with a cancelled ctx, leaving
// the queue, undoing a grant whose reply was lost (default 5 s). The caller
// waits for them for a 50 ms grace past its ctx's end; after that they go
// on in the background, and a failure is logged (WithLogger).
func WithCleanupTimeout(d time.Duration) Option { return config.WithCleanupTimeout(d) }

// WithReplicas makes Lock and TryLock return a hold only once n replicas
// of the lock's master have acknowledged it (Redis WAIT, sent on the same
// connection as the acquiring script, up to timeout). If fewer acknowledge
// in time, the acquisition is undone and the call returns an error wrapping
// ErrNotReplicated. A failover to a replica that acknowledged cannot lose
// the hold; without this option an acquisition made just before a failover
// can be lost (docs/deployments.md). It costs a round trip to the replicas
// per acquisition. n is from 1 to 100, timeout at least 1 ms; default: no
// waiting. A hold handed over from the queue is claimed at once, with WAIT,
// before Lock returns. The fair semaphore and RW lock do not take this
// option yet: it is a MutexOption, which they do not accept.
func WithReplicas(n int, timeout time.Duration) MutexOption {
	return config.WithReplicas(n, timeout)
}

// WithWaitTimeout sets how long a queued waiter may fall silent before it
// counts as dead and loses its place (default 10 s, at least 10 ms). Waiters
// refresh their place every wait timeout / 3; each queue entry keeps the
// timeout it joined with.
func WithWaitTimeout(d time.Duration) Option { return config.WithWaitTimeout(d) }

// WithObserver reports every acquisition and hold of the handle to o, for
// metrics and traces: how long each acquisition waited and how it ended,
// how long each hold lasted and how it ended, failed renewals, waiters
// evicted from the queue (observe.Observer and its capabilities). The
// modules github.com/fairlock/fairlock/extra/fairlockotel and
// extra/fairlockprom provide OpenTelemetry and Prometheus observers;
// docs/observability.md lists what they measure. o must not be nil.
// Default: none, and no cost.
func WithObserver(o observe.Observer) Option { return config.WithObserver(o) }

// WithLabel sets free text that Inspect shows for this handle's holds and
// queue entries, next to its host name and process id (default empty; at
// most 200 bytes).
func WithLabel(s string) Option { return config.WithLabel(s) }

// Mutex is one handle on a fair lock. Its methods are safe for concurrent
// use, and goroutines sharing a handle exclude each other as sync.Mutex's
// do: each Lock takes its own turn in the lock's queue, in arrival order
// with every other waiter, of this process or another. A call re-enters
// the hold only when its ctx carries it: the context LockContext returns,
// the one Do passes to its function, HoldContext, or a context derived
// from one of them. That context is the proof that a call chain holds the
// lock, which Go's goroutines cannot give.
type Mutex struct {
	m *core.Mutex
}

// New returns a handle on the lock name, made on owner, with its own owner
// id. It talks to Redis only when used. Bad arguments get an error wrapping
// ErrInvalidArgument: a nil owner, an empty name, a name with { or } or
// longer than fairlock.MaxNameLen, or an invalid option; a closed owner
// gets ErrClosed.
func New(owner *fairlock.Owner, name string, opts ...MutexOption) (*Mutex, error) {
	cfg, err := config.ApplyFairMutex(opts)
	if err != nil {
		return nil, err
	}
	m, err := core.NewMutex(owner, name, cfg, place)
	if err != nil {
		return nil, err
	}
	return &Mutex{m: m}, nil
}

// Lock joins the queue and waits until the lock is handed to this call,
// and keeps the lease alive with the watchdog until Unlock; with a ctx that
// carries this handle's hold (LockContext, Do, HoldContext), it re-enters
// that hold at once. ctx bounds only the wait: the hold lasts until Unlock,
// ForceUnlock or loss. When ctx ends first, Lock leaves the queue and
// returns ctx's error, wrapped with the lock's name and whether Redis was in
// reach (test it with errors.Is, not ==). A nil ctx gets an error wrapping
// ErrInvalidArgument.
func (m *Mutex) Lock(ctx context.Context) error {
	_, err := m.acquire(ctx, core.LockAttempt(m.core().Config()))
	return err
}

// LockContext is Lock, and returns the context to do the work in: it has
// ctx's values and deadline, is cancelled also when the hold ends (its
// cause ErrLockLost or ErrReleased), and carries the hold, so that Lock or
// TryLock given it (or a context derived from it) re-enter, and Unlock
// given it releases exactly this hold:
//
//	ctx, err := m.LockContext(ctx)
//	if err != nil {
//		return err
//	}
//	defer m.Unlock(ctx) // runs even though ctx may have ended
func (m *Mutex) LockContext(ctx context.Context) (context.Context, error) {
	e, err := m.acquire(ctx, core.LockAttempt(m.core().Config()))
	if err != nil {
		return nil, err
	}
	return core.Bind(ctx, e), nil
}

// Do runs fn holding the lock: it takes the lock as LockContext does, runs
// fn with the hold's context (cancelled when the hold is lost or ctx ends),
// and releases the hold when fn returns, on a context of its own bounded by
// the cleanup timeout. It returns fn's error; if the hold was lost while fn
// ran, or the release failed, that error too, joined (errors.Is tells
// ErrLockLost). If the lock could not be taken, fn does not run and Do
// returns why.
func (m *Mutex) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	if err := core.CheckFunc(fn); err != nil {
		return err
	}
	hctx, err := m.LockContext(ctx)
	if err != nil {
		return err
	}
	return core.Held(hctx, m.Unlock, m.core().Config().CleanupTimeout, fn)
}

// TryLock tries to take the lock for up to wait, or re-enters the hold its
// ctx carries. Wait 0 is a single attempt that never queues: it succeeds
// only if the lock is free and no live waiter is queued, or for a re-entry.
// A positive wait queues like Lock, and leaves the queue at once when the
// wait elapses. With lease 0 the watchdog keeps the lease alive; a positive
// lease holds the lock for that long, without renewal. The fresh acquisition
// fixes the lease mode; a re-entry may lengthen the lease but never shortens
// it. It returns (true, nil) when held, (false, nil) when the wait elapsed,
// (false, err) with err wrapping ctx's error when ctx ended first, and
// (false, err) when Redis failed. Negative durations wrap ErrInvalidArgument.
func (m *Mutex) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	a, err := core.TryAttempt(m.core().Config(), wait, lease)
	if err != nil {
		return false, m.core().Wrap(ctx, err)
	}
	e, err := m.acquire(ctx, a)
	return e != nil, err
}

// acquire is one Lock or TryLock: a turn of the handle (core.Turn), which
// this package waits out, and whose grant the handle keeps.
func (m *Mutex) acquire(ctx context.Context, a core.Attempt) (*core.End, error) {
	t, err := m.core().Begin(ctx, a)
	if err != nil {
		return nil, err
	}
	g, err := turnQueue(t).Acquire(t.Context(), t.Attempt())
	return m.core().Keep(t, g, err)
}

// Unlock undoes one Lock or successful TryLock; the last one hands the lock
// straight to the first live waiter in the queue, if any. With a ctx that
// carries a hold (from LockContext, Do or HoldContext), it releases that
// hold; with any other ctx, the handle's current hold, whichever goroutine
// took it, as sync.Mutex does. The two differ only once a hold was lost and
// another goroutine took the lock since: pass the context to be exact. A
// handle that does not hold the lock gets ErrNotHeld and changes nothing; a
// hold that was lost gets ErrLockLost. Unlock keeps ctx's deadline: if
// Redis has not answered by ctx's deadline (or within a short grace if ctx
// had already ended, as under defer), the release goes on in the
// background, bounded by the cleanup timeout, and Unlock returns an error
// wrapping ErrPending. A ctx with no deadline (or one farther than go-redis
// bounds a call by itself) that is cancelled while the release is in
// flight does not stop it: as with Lock's own calls, the cancellation is
// seen once Redis has answered. If the release fails, the handle stops
// renewing: the lock is freed when its lease runs out.
func (m *Mutex) Unlock(ctx context.Context) error { return m.core().Unlock(ctx) }

// Extend makes the current hold's lease d from now, never shortening it, in
// Redis and in this handle's belief: for a hold taken with a fixed lease
// that needs longer, or for a caller that keeps its leases alive itself.
// The lease mode stays as it was: a watchdog goes on renewing, a fixed lease
// is not renewed after this. It returns ErrNotHeld if the handle holds
// nothing, and ErrLockLost (ending the hold as lost) if Redis no longer has
// it. d must be positive.
func (m *Mutex) Extend(ctx context.Context, d time.Duration) error { return m.core().Extend(ctx, d) }

// ForceUnlock ends whoever holds the lock, at any hold count; the queue
// stays, and the lock is handed to its first live waiter. It reports whether
// the lock was held. It is for an operator clearing a stuck lock: the
// handle whose hold it ended learns only at its next renewal (within lease/3
// with the watchdog, at its claim for a hand-off not yet claimed, when its
// lease runs out for a fixed one), when its Lost closes and its Unlock
// returns ErrLockLost; until then it still believes it holds the lock. On
// the holding handle itself, it ends the hold as released.
func (m *Mutex) ForceUnlock(ctx context.Context) (bool, error) { return m.core().ForceUnlock(ctx) }

// Name returns the lock's name, as given to New.
func (m *Mutex) Name() string { return m.core().Name() }

// IsLocked reports whether any handle holds the lock.
func (m *Mutex) IsLocked(ctx context.Context) (bool, error) { return m.core().IsLocked(ctx) }

// HoldCount returns how many times this handle holds the lock: 0 if not.
func (m *Mutex) HoldCount(ctx context.Context) (int, error) { return m.core().HoldCount(ctx) }

// TTL returns the remaining lease of the current hold, whoever holds it;
// 0 when the lock is free.
func (m *Mutex) TTL(ctx context.Context) (time.Duration, error) { return m.core().TTL(ctx) }

// Token returns the fencing token of this handle's current hold, 0 if it
// holds none. Tokens only grow from one fresh acquisition to the next.
func (m *Mutex) Token() int64 { return m.core().Token() }

// Lost returns a channel closed if the current hold is lost: a renewal found
// the lock gone or taken, or its lease ran out without a successful renewal
// (a fixed lease included). It is never closed by Unlock. Before the first
// hold it returns a channel that is never closed; after a hold ended it
// returns that hold's channel.
func (m *Mutex) Lost() <-chan struct{} { return m.core().Lost() }

// HoldContext returns a context cancelled when the current hold ends for any
// reason; context.Cause tells ErrLockLost from ErrReleased. It carries the
// hold, as LockContext's does: call it only from the call chain that holds
// the lock. Before the first hold it returns a context already cancelled
// with cause ErrNotHeld.
func (m *Mutex) HoldContext() context.Context { return m.core().HoldContext() }

// core is the handle's core, nil for a zero or nil Mutex: its methods then
// return errors wrapping ErrInvalidArgument, or zero values.
func (m *Mutex) core() *core.Mutex {
	if m == nil {
		return nil
	}
	return m.m
}
