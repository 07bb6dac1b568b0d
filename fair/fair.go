package fair

import (
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/core"
)

// Option configures any fair primitive (New, NewSemaphore, NewRWMutex,
// NewElection): a fairlock.Option (fairlock.WithLease, ...) or WithLabel.
// Every Option is also a MutexOption.
type Option interface{ fairOption }

// MutexOption configures a Mutex (New): an Option, or a
// fairlock.MutexOption (fairlock.WithReplicas), which the semaphore and
// the RW lock do not take.
type MutexOption interface{ mutexOption }

type (
	fairOption  = core.FairOption
	mutexOption = core.FairMutexOption
)

// WithLabel sets free text that Inspect shows for this handle's holds and
// queue entries, next to its host name and process id (default empty; at
// most 200 bytes).
func WithLabel(s string) Option { return core.WithLabel(s) }

// New returns a handle on the fair lock name, made on owner. Its Lock
// joins the lock's queue and waits until the lock is handed to it; TryLock
// with wait 0 succeeds only if the lock is free and nobody waits; the last
// Unlock hands the lock straight to the first live waiter. It talks to
// Redis only when used. Bad arguments (a nil owner, an empty name, a name
// with { or } or longer than fairlock.MaxNameLen, a bad option) get an
// error wrapping fairlock.ErrInvalidArgument; a closed owner gets
// fairlock.ErrClosed.
func New(owner *fairlock.Owner, name string, opts ...MutexOption) (*Mutex, error) {
	cfg, err := core.ApplyFairMutex(opts)
	if err != nil {
		return nil, err
	}
	m, err := core.NewMutex(core.OwnerOf(owner), name, cfg, place)
	if err != nil {
		return nil, err
	}
	return &Mutex{c: m}, nil
}
