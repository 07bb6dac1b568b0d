package fairlock

import "errors"

// The errors of every lock, wrapped with the lock's name: use errors.Is.
var (
	// ErrInvalidArgument is wrapped by every error about bad input.
	ErrInvalidArgument = errors.New("fairlock: invalid argument")
	// ErrNotHeld is returned by Unlock when the handle holds nothing.
	ErrNotHeld = errors.New("fairlock: lock not held")
	// ErrLockLost: the hold ended without Unlock. It matches ErrNotHeld.
	ErrLockLost error = lostError{}
	// ErrReleased is the cause of a hold's context ended by Unlock.
	ErrReleased = errors.New("fairlock: lock released")
	// ErrPending: ctx ended before Redis answered; the call goes on.
	ErrPending = errors.New("fairlock: the call goes on in the background")
	// ErrClosed: the handle's Owner was closed.
	ErrClosed = errors.New("fairlock: owner closed")
	// ErrNotReplicated: too few replicas acknowledged (WithReplicas); undone.
	ErrNotReplicated = errors.New("fairlock: acquisition not acknowledged by enough replicas")
)

type lostError struct{}

func (lostError) Error() string        { return "fairlock: lock lost" }
func (lostError) Is(target error) bool { return target == ErrNotHeld }
