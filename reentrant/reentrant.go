package reentrant

import (
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/core"
)

// Option configures a Mutex (New) and a multi.RedLock: a fairlock.Option
// (fairlock.WithLease, ...) or a fairlock.MutexOption (WithReplicas). The
// fair lock's own options (fair.WithLabel) do not compile here.
type Option interface{ option }

type option = core.ReentrantOption

// New returns a handle on the reentrant lock name, made on owner. Its Lock
// waits until the lock is free, woken when it is released; the last Unlock
// wakes a waiter. It talks to Redis only when used. Bad arguments (a nil
// owner, an empty name, a name with { or } or longer than
// fairlock.MaxNameLen, a bad option) get an error wrapping
// fairlock.ErrInvalidArgument; a closed owner gets fairlock.ErrClosed.
func New(owner *fairlock.Owner, name string, opts ...Option) (*Mutex, error) {
	cfg, err := core.ApplyReentrant(opts)
	if err != nil {
		return nil, err
	}
	m, err := core.NewMutex(core.OwnerOf(owner), name, cfg, place)
	if err != nil {
		return nil, err
	}
	return &Mutex{c: m}, nil
}
