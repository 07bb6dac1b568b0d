package core

import (
	"log/slog"
	"time"

	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/lua"
)

// Option sets one field of a Config, or says why it cannot.
type Option func(*Config) error

// Apply applies opts to the defaults.
func Apply(opts []Option) (Config, error) {
	cfg := NewConfig()
	for _, o := range opts {
		if o == nil {
			return cfg, Invalid("option must not be nil")
		}
		if err := o(&cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// MinLease is the shortest lease an option accepts.
const MinLease = 10 * time.Millisecond

// WithLease sets the lease the watchdog keeps alive.
func WithLease(d time.Duration) Option {
	return func(c *Config) error {
		if err := PositiveDuration("lease", d, MinLease); err != nil {
			return err
		}
		c.Lease = d
		return nil
	}
}

// WithDriftFactor sets the part of every lease given up for clock drift.
func WithDriftFactor(f float64) Option {
	return func(c *Config) error {
		if !(f >= 0 && f < 0.5) {
			return Invalid("drift factor must be in [0, 0.5), got %v", f)
		}
		c.DriftFactor = f
		return nil
	}
}

// WithCleanupTimeout bounds cleanup calls made after a call's ctx ended.
func WithCleanupTimeout(d time.Duration) Option {
	return func(c *Config) error {
		if err := PositiveDuration("cleanup timeout", d, time.Millisecond); err != nil {
			return err
		}
		c.CleanupTimeout = d
		return nil
	}
}

// WithLogger sets the logger for background events.
func WithLogger(l *slog.Logger) Option {
	return func(c *Config) error {
		if l == nil {
			return Invalid("logger must not be nil")
		}
		c.Logger = l
		return nil
	}
}

// WithClock sets the clock that drives the library's timers. Not part of the
// public API (its type is internal): this module's tests pass it to New.
func WithClock(clk clock.Clock) Option {
	return func(c *Config) error {
		if clk == nil {
			return Invalid("clock must not be nil")
		}
		c.Clock = clk
		return nil
	}
}

// WithScripts replaces the script set. Not part of the public API: this
// module's tests (the mutation test, say) pass it to New.
func WithScripts(s *lua.Scripts) Option {
	return func(c *Config) error {
		if s == nil {
			return Invalid("scripts must not be nil")
		}
		c.Scripts = s
		return nil
	}
}

// MaxReplicas bounds WithReplicas.
const MaxReplicas = 100

// WithReplicas makes every acquisition wait for n replicas to acknowledge
// it, up to timeout.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(c *Config) error {
		if n < 1 || n > MaxReplicas {
			return Invalid("replicas must be from 1 to %d, got %d", MaxReplicas, n)
		}
		if err := PositiveDuration("replica timeout", timeout, time.Millisecond); err != nil {
			return err
		}
		c.Replicas, c.ReplicaTimeout = n, timeout
		return nil
	}
}

// WithWaitTimeout sets how long a queued fair waiter may be silent.
func WithWaitTimeout(d time.Duration) Option {
	return func(c *Config) error {
		if err := PositiveDuration("wait timeout", d, MinLease); err != nil {
			return err
		}
		c.WaitTimeout = d
		c.FairOnly = append(c.FairOnly, "WithWaitTimeout")
		return nil
	}
}

// WithLabel sets the fair lock's label.
func WithLabel(s string) Option {
	return func(c *Config) error {
		if len(s) > 200 {
			return Invalid("label must be at most 200 bytes, got %d", len(s))
		}
		c.Label = s
		c.FairOnly = append(c.FairOnly, "WithLabel")
		return nil
	}
}
