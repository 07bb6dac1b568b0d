package fairlock

import "errors"

// The errors of every lock, wrapped with the lock's name: use errors.Is.
var (
	// ErrInvalidArgument is wrapped by every error about bad input.
	ErrInvalidArgument = errors.New("fairlock: invalid argument")
	// ErrNotHeld is returned by Unlock when the handle holds nothing.
	ErrNotHeld = errors.New("fairlock: lock not held")
	// ErrLockLost: the hold was taken from its holder (its lease ran out, Redis
	// lost it, another owner or ForceUnlock ended it); an acquisition whose
	// grant could not be kept wraps it too, saying why. It does not match
	// ErrNotHeld: a lost hold is never mistaken for a second Unlock.
	ErrLockLost = errors.New("fairlock: lock lost")
	// ErrReleased is the cause of a hold's context ended by Unlock.
	ErrReleased = errors.New("fairlock: lock released")
	// ErrPending: ctx ended before Redis answered; the call goes on.
	ErrPending = errors.New("fairlock: the call goes on in the background")
	// ErrClosed: the handle's Owner was closed (or is draining, for a new
	// acquisition); Unlock after Close returns it too, not ErrNotHeld.
	ErrClosed = errors.New("fairlock: owner closed")
	// ErrNotReplicated: too few replicas acknowledged (WithReplicas); undone.
	ErrNotReplicated = errors.New("fairlock: acquisition not acknowledged by enough replicas")
	// ErrDataLayout: Redis refused the call because the lock's keys hold
	// data this version of the library does not read: a client of
	// another data layout wrote them (the CHANGELOG says which versions
	// share one; upgrade every client of the lock together), or something
	// other than fairlock did. The error's text says which, and what to
	// do; the call changed nothing.
	ErrDataLayout = errors.New("fairlock: the lock's data in Redis is of another layout")
)
