package fairlock

import "errors"

// Errors of every primitive. Compare with errors.Is: the errors returned
// wrap them with the lock's name and what the call was doing.
var (
	// ErrInvalidArgument is wrapped by every error about bad input.
	ErrInvalidArgument = errors.New("fairlock: invalid argument")
	// ErrNotHeld is returned by Unlock when the handle does not hold the lock.
	ErrNotHeld = errors.New("fairlock: lock not held")
	// ErrLockLost is returned by Unlock when the hold ended without it (its
	// lease ran out, or the lock was deleted or taken), and is the cause of
	// a hold's context so ended. errors.Is(ErrLockLost, ErrNotHeld) is true.
	ErrLockLost error = lostError{}
	// ErrReleased is the cause of a hold's context ended by Unlock or
	// ForceUnlock.
	ErrReleased = errors.New("fairlock: lock released")
	// ErrPending is wrapped by the error of a call whose ctx ended before
	// Redis answered (an Unlock under defer, say): the call goes on in the
	// background, bounded by the cleanup timeout.
	ErrPending = errors.New("fairlock: the call goes on in the background")
	// ErrClosed is returned by the calls of a handle whose Owner was
	// closed, and is the cause of a hold's or a wait's context that Close
	// ended.
	ErrClosed = errors.New("fairlock: owner closed")
	// ErrNotReplicated is wrapped by the error of an acquisition that fewer
	// replicas than WithReplicas asks for acknowledged in time: it was
	// undone, and the caller holds nothing.
	ErrNotReplicated = errors.New("fairlock: acquisition not acknowledged by enough replicas")
)

type lostError struct{}

func (lostError) Error() string        { return "fairlock: lock lost" }
func (lostError) Is(target error) bool { return target == ErrNotHeld }
