package fairlock

import (
	"log/slog"
	"time"

	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/observe"
)

// DefaultWaitTimeout is WithWaitTimeout's default.
const DefaultWaitTimeout = 10 * time.Second

// Option configures every kind of lock: WithLease, WithDriftFactor,
// WithLogger, WithCleanupTimeout, WithWaitTimeout, WithObserver.
type Option struct{ everywhere }

// MutexOption (WithReplicas) configures fair.New, reentrant.New and
// multi.NewRedLock.
type MutexOption struct{ mutexesOnly }

type (
	everywhere  = core.Everywhere
	mutexesOnly = core.MutexesOnly
)

// WithLease sets the lease the watchdog renews every lease/3 (default 30 s).
func WithLease(d time.Duration) Option { return Option{core.WithLease(d)} }

// WithDriftFactor sets the part of each lease given up for drift (default 0.01).
func WithDriftFactor(f float64) Option { return Option{core.WithDriftFactor(f)} }

// WithLogger sends background events, such as lost holds, to l. A lost
// hold is logged at level Error ("fairlock: lock lost: " and why), with the
// lock, the owner, the hold's fencing token and, when a timer ended it
// after it was due (a process that ran late), late: how long after.
func WithLogger(l *slog.Logger) Option { return Option{core.WithLogger(l)} }

// WithCleanupTimeout bounds the calls that go on after ctx ended (5 s).
func WithCleanupTimeout(d time.Duration) Option {
	return Option{core.WithCleanupTimeout(d)}
}

// WithWaitTimeout sets how long a waiter may be silent and keep its place.
func WithWaitTimeout(d time.Duration) Option { return Option{core.WithWaitTimeout(d)} }

// WithObserver reports acquisitions and holds to o, for metrics and traces.
func WithObserver(o observe.Observer) Option { return Option{core.WithObserver(o)} }

// WithReplicas makes acquisitions wait for n replicas (WAIT), or undoes them.
func WithReplicas(n int, timeout time.Duration) MutexOption {
	return MutexOption{core.WithReplicas(n, timeout)}
}
