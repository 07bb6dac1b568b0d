package core

import "errors"

// This package's tests cannot import package fairlock, which imports this
// one: they link stand-ins for its errors, as its init does for the
// library.
func init() {
	notHeld := errors.New("fairlock: lock not held")
	Link(Public{
		InvalidArgument: errors.New("fairlock: invalid argument"), NotHeld: notHeld,
		LockLost: errors.Join(errors.New("fairlock: lock lost"), notHeld), Released: errors.New("fairlock: lock released"),
		Pending: errors.New("fairlock: the call goes on in the background"), Closed: errors.New("fairlock: owner closed"),
		NotReplicated: errors.New("fairlock: acquisition not acknowledged by enough replicas"),
	})
}
