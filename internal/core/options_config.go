package core

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/lua"
)

// Config is what the options of every primitive set.
type Config struct {
	Lease          time.Duration // lease kept alive by the watchdog
	DriftFactor    float64       // part of a lease the client gives up for clock drift
	CleanupTimeout time.Duration // bound of cleanup calls that run after ctx ended
	Logger         *slog.Logger
	Clock          clock.Clock
	Scripts        *lua.Scripts
	// Replicas, when above 0, is how many replicas must acknowledge an
	// acquisition (WAIT) within ReplicaTimeout.
	Replicas       int
	ReplicaTimeout time.Duration
	// Observer, if not nil, is told of every acquisition and hold
	// (WithObserver).
	Observer *Observers
	// Fair lock only.
	WaitTimeout time.Duration
	Label       string
	// Turn marks a primitive's own lock, held only inside one of its calls
	// (a semaphore's gate): Close ends its holds once that call has
	// returned, not as Close begins (core.Owner.endHolds).
	Turn bool
}

// Defaults.
const (
	DefaultLease          = 30 * time.Second
	DefaultDriftFactor    = 0.01
	DefaultCleanupTimeout = 5 * time.Second
	DefaultWaitTimeout    = 10 * time.Second
	// minDrift is added to every safety margin: timer and network jitter.
	minDrift = 2 * time.Millisecond
)

// NewConfig returns the defaults.
func NewConfig() Config {
	return Config{
		Lease:          DefaultLease,
		DriftFactor:    DefaultDriftFactor,
		CleanupTimeout: DefaultCleanupTimeout,
		Clock:          clock.Real{},
		Scripts:        lua.Default(),
		WaitTimeout:    DefaultWaitTimeout,
	}
}

// Margin is how much earlier than the server the client stops believing it
// holds a lease of length d.
func (c *Config) Margin(d time.Duration) time.Duration {
	return time.Duration(float64(d)*c.DriftFactor) + minDrift
}

// Invalid wraps ErrInvalidArgument with a message.
func Invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

// PositiveDuration validates a duration option.
func PositiveDuration(what string, d time.Duration, min time.Duration) error {
	if d < min {
		return Invalid("%s must be at least %v, got %v", what, min, d)
	}
	return nil
}
