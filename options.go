package fairlock

import (
	"log/slog"
	"time"

	"github.com/fairlock/fairlock/internal/config"
	"github.com/fairlock/fairlock/observe"
)

// DefaultWaitTimeout is how long a waiter may be silent before it counts as
// dead, unless WithWaitTimeout says otherwise.
const DefaultWaitTimeout = 10 * time.Second

// Option configures a lock of any kind: fair.New, fair.NewSemaphore,
// fair.NewRWMutex, fair.NewElection, reentrant.New and multi.NewRedLock
// take it. WithLease, WithDriftFactor, WithLogger, WithCleanupTimeout,
// WithWaitTimeout and WithObserver make one.
type Option struct{ everywhere }

// MutexOption configures a Mutex alone (fair.New, reentrant.New,
// multi.NewRedLock): WithReplicas makes one. The fair semaphore and RW lock
// do not take it; given to them, it does not compile.
type MutexOption struct{ mutexesOnly }

type (
	everywhere  = config.Everywhere
	mutexesOnly = config.MutexesOnly
)

// WithLease sets the lease the watchdog keeps alive for Lock, and TryLock
// with lease 0, renewing it every lease/3 (default 30 s, at least 10 ms).
// If no renewal succeeds in time, the hold is lost.
func WithLease(d time.Duration) Option { return Option{config.WithLease(d)} }

// WithDriftFactor sets the part of each lease the client gives up, so that
// it stops believing it holds the lock before Redis expires it (default
// 0.01, plus 2 ms; from 0 up to 0.5).
func WithDriftFactor(f float64) Option {
	return Option{config.WithDriftFactor(f)}
}

// WithLogger sends background events (failed renewals, lost holds, failed
// clean-ups) to l (default: none).
func WithLogger(l *slog.Logger) Option { return Option{config.WithLogger(l)} }

// WithCleanupTimeout bounds the calls that go on after the caller's ctx
// ended: a release under defer, leaving a queue, undoing a grant whose
// reply was lost (default 5 s).
func WithCleanupTimeout(d time.Duration) Option {
	return Option{config.WithCleanupTimeout(d)}
}

// WithWaitTimeout sets how long a waiter may be silent before it counts as
// dead and loses its place (default 10 s, at least 10 ms). A waiter
// refreshes its place every wait timeout / 3.
func WithWaitTimeout(d time.Duration) Option {
	return Option{config.WithWaitTimeout(d)}
}

// WithObserver reports every acquisition and hold to o, for metrics and
// traces (observe.Observer; extra/fairlockotel and extra/fairlockprom
// implement it). o must not be nil. Default: none, and no cost.
func WithObserver(o observe.Observer) Option {
	return Option{config.WithObserver(o)}
}

// WithReplicas makes Lock and TryLock return a hold only once n replicas
// of the lock's master acknowledged it (Redis WAIT, up to timeout), so a
// failover cannot lose it; if fewer do, the acquisition is undone and the
// error wraps ErrNotReplicated. n is from 1 to 100, timeout at least 1 ms;
// default: no waiting. docs/deployments.md says when to use it.
func WithReplicas(n int, timeout time.Duration) MutexOption {
	return MutexOption{config.WithReplicas(n, timeout)}
}
