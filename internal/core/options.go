package core

import (
	"log/slog"
	"time"
)

// Setting sets one field of a Config, or says why it cannot.
type Setting func(*Config) error

// The option kinds. Each constructor takes an interface over one of them
// (fair.Option, fair.MutexOption, reentrant.Option), and each option is of
// a concrete type below (fairlock.Option and MutexOption wrap one) with the
// methods of the primitives it applies to: an option given to a primitive
// it does not apply to does not compile.
type (
	// FairMutexOption applies to fair.New.
	FairMutexOption interface{ appliesToFairMutex() Setting }
	// FairOption applies to every fair primitive (New, NewSemaphore,
	// NewRWMutex).
	FairOption interface {
		FairMutexOption
		appliesToEveryFairPrimitive() Setting
	}
	// ReentrantOption applies to reentrant.New (and multi.NewRedLock).
	ReentrantOption interface{ appliesToReentrant() Setting }
)

// Everywhere is an option of every primitive: fairlock.Option.
type Everywhere Setting

func (o Everywhere) appliesToFairMutex() Setting          { return Setting(o) }
func (o Everywhere) appliesToEveryFairPrimitive() Setting { return Setting(o) }
func (o Everywhere) appliesToReentrant() Setting          { return Setting(o) }

// FairOnly is an option of the fair primitives alone: the label Inspect
// shows.
type FairOnly Setting

func (o FairOnly) appliesToFairMutex() Setting          { return Setting(o) }
func (o FairOnly) appliesToEveryFairPrimitive() Setting { return Setting(o) }

// MutexesOnly is an option of the two mutexes alone (WithReplicas): the
// semaphore and the RW lock do not support it yet.
type MutexesOnly Setting

func (o MutexesOnly) appliesToFairMutex() Setting { return Setting(o) }
func (o MutexesOnly) appliesToReentrant() Setting { return Setting(o) }

// Apply applies opts to the defaults; setting picks each option's Setting
// for the primitive being made (a method of the option kind).
func Apply[O any](opts []O, setting func(O) Setting) (Config, error) {
	cfg := NewConfig()
	for _, o := range opts {
		if any(o) == nil {
			return cfg, Invalid("option must not be nil")
		}
		set := setting(o)
		if set == nil {
			return cfg, Invalid("option must be made by its With function, not a zero value")
		}
		if err := set(&cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// ApplyFairMutex, ApplyFair and ApplyReentrant apply the options of a fair
// Mutex, of the other fair primitives, and of a reentrant Mutex.
func ApplyFairMutex[O FairMutexOption](opts []O) (Config, error) {
	return Apply(opts, func(o O) Setting { return o.appliesToFairMutex() })
}

func ApplyFair[O FairOption](opts []O) (Config, error) {
	return Apply(opts, func(o O) Setting { return o.appliesToEveryFairPrimitive() })
}

func ApplyReentrant[O ReentrantOption](opts []O) (Config, error) {
	return Apply(opts, func(o O) Setting { return o.appliesToReentrant() })
}

// MinLease is the shortest lease an option accepts.
const MinLease = 10 * time.Millisecond

// WithLease sets the lease the watchdog keeps alive.
func WithLease(d time.Duration) Everywhere {
	return func(c *Config) error {
		if err := PositiveDuration("lease", d, MinLease); err != nil {
			return err
		}
		c.Lease = d
		return nil
	}
}

// WithDriftFactor sets the part of every lease given up for clock drift.
func WithDriftFactor(f float64) Everywhere {
	return func(c *Config) error {
		if !(f >= 0 && f < 0.5) {
			return Invalid("drift factor must be in [0, 0.5), got %v", f)
		}
		c.DriftFactor = f
		return nil
	}
}

// WithCleanupTimeout bounds cleanup calls made after a call's ctx ended.
func WithCleanupTimeout(d time.Duration) Everywhere {
	return func(c *Config) error {
		if err := PositiveDuration("cleanup timeout", d, time.Millisecond); err != nil {
			return err
		}
		c.CleanupTimeout = d
		return nil
	}
}

// WithLogger sets the logger for background events.
func WithLogger(l *slog.Logger) Everywhere {
	return func(c *Config) error {
		if l == nil {
			return Invalid("logger must not be nil")
		}
		c.Logger = l
		return nil
	}
}

// MaxReplicas bounds WithReplicas.
const MaxReplicas = 100

// WithReplicas makes every acquisition wait for n replicas to acknowledge
// it, up to timeout.
func WithReplicas(n int, timeout time.Duration) MutexesOnly {
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

// WithWaitTimeout sets how long a waiter may be silent before it is taken
// for dead.
func WithWaitTimeout(d time.Duration) Everywhere {
	return func(c *Config) error {
		if err := PositiveDuration("wait timeout", d, MinLease); err != nil {
			return err
		}
		c.WaitTimeout = d
		return nil
	}
}

// WithLabel sets the fair lock's label.
func WithLabel(s string) FairOnly {
	return func(c *Config) error {
		if len(s) > 200 {
			return Invalid("label must be at most 200 bytes, got %d", len(s))
		}
		c.Label = s
		return nil
	}
}
