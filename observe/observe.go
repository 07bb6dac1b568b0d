package observe

import (
	"context"
	"time"
)

// Primitive names the kind of lock an event is about: a metric attribute.
type Primitive string

// The primitives.
const (
	Fair      Primitive = "fair"      // fair.Mutex
	Election  Primitive = "election"  // fair.Election: a campaign, and a term as its hold
	Reentrant Primitive = "reentrant" // reentrant.Mutex
	Semaphore Primitive = "semaphore" // fair.Semaphore
	RWMutex   Primitive = "rwmutex"   // fair.RWMutex, its read and write holds
	RedLock   Primitive = "redlock"   // multi.RedLock
)

// Primitives returns every Primitive, a fresh slice.
func Primitives() []Primitive {
	return []Primitive{Fair, Election, Reentrant, Semaphore, RWMutex, RedLock}
}

// Queued reports whether p's waiters queue, and so may be evicted or rescued.
func (p Primitive) Queued() bool {
	return p == Fair || p == Election || p == Semaphore || p == RWMutex
}

// Outcome is how an acquisition ended.
type Outcome string

// The outcomes.
const (
	Acquired  Outcome = "acquired"  // a fresh hold
	Reentered Outcome = "reentered" // a re-entry of the hold ctx carried
	TimedOut  Outcome = "timed_out" // TryLock's wait elapsed, or ctx's deadline passed
	Cancelled Outcome = "cancelled" // ctx was cancelled
	Failed    Outcome = "error"     // any other error
)

// Outcomes returns every Outcome, a fresh slice.
func Outcomes() []Outcome { return []Outcome{Acquired, Reentered, TimedOut, Cancelled, Failed} }

// Acquisition is the end of one acquisition.
type Acquisition struct {
	Primitive   Primitive
	Lock        string        // the lock's name
	Outcome     Outcome       // how it ended
	Wait        time.Duration // from the call's start to its return
	Queued      bool          // the caller waited in a fair queue
	QueueLength int           // when Queued: the waiters when it joined, itself included
	HandedOff   bool          // a release handed the lock to the waiting caller
	HandOff     time.Duration // for a hand-off: from the grant to the return
	Err         error         // nil for Acquired and Reentered
}

// HoldEnd is how a hold ended.
type HoldEnd string

// The ways a hold ends.
const (
	Released       HoldEnd = "released"        // Unlock (or Release)
	Lost           HoldEnd = "lost"            // found gone or taken, or no renewal in time
	LeaseRanOut    HoldEnd = "lease_ran_out"   // a fixed lease ran out before Unlock
	ReleaseUnknown HoldEnd = "release_unknown" // the release's reply was lost
)

// Hold is the end of one hold, its re-entries included.
type Hold struct {
	Primitive Primitive
	Lock      string
	Held      time.Duration // from the acquisition's return to the end
	End       HoldEnd
	Cause     string // for Lost: why
}

// Observer receives the end of every acquisition (with the call's
// context) and of every hold of the primitives it was given to.
type Observer interface {
	ObserveAcquisition(ctx context.Context, a Acquisition)
	ObserveHoldEnd(h Hold)
}

// RenewalFailure is a failed renewal of a hold's lease; the watchdog tries
// again until the lease runs out.
type RenewalFailure struct {
	Primitive Primitive
	Lock      string
	Err       error
}

// RenewalObserver is an Observer that also receives failed renewals.
type RenewalObserver interface {
	ObserveRenewalFailure(r RenewalFailure)
}

// QueueEventKind is what happened to a waiter in a fair queue.
type QueueEventKind string

// The queue events.
const (
	Joined  QueueEventKind = "joined"  // joined the queue's tail
	Waiting QueueEventKind = "waiting" // learned the queue's length anew
	Evicted QueueEventKind = "evicted" // lost its place, silent too long; it re-joins
	// Rescued: the waiter learned of its turn by its fallback, the message
	// for it lost; alert on any in a healthy deployment (package doc).
	Rescued QueueEventKind = "rescued"
)

// QueueEvent is news of one waiter in a fair queue, or, for Rescued, of
// any waiter.
type QueueEvent struct {
	Primitive Primitive
	Lock      string
	Kind      QueueEventKind
	Length    int // the waiters, this one included; 0 for Evicted and Rescued
}

// QueueObserver is an Observer that also receives QueueEvents.
type QueueObserver interface {
	ObserveQueue(e QueueEvent)
}

// Call is an acquisition or a release that a Tracer wraps in a span.
type Call struct {
	Primitive     Primitive
	Lock          string
	Operation     string // "acquire" or "release"
	Script        string // the Redis function the call runs first
	ServerAddress string // as the client was given it; "" for Cluster and Sentinel
	ServerPort    int
}

// Tracer is an Observer that also wraps calls in spans: the call runs on
// the context StartCall returns, and calls end once with its error.
type Tracer interface {
	StartCall(ctx context.Context, c Call) (_ context.Context, end func(err error))
}

// Nop is an Observer that does nothing, with every capability. Embed it in
// an Observer of your own to implement only the methods you need.
type Nop struct{}

// ObserveAcquisition does nothing.
func (Nop) ObserveAcquisition(context.Context, Acquisition) {}

// ObserveHoldEnd does nothing.
func (Nop) ObserveHoldEnd(Hold) {}

// ObserveRenewalFailure does nothing.
func (Nop) ObserveRenewalFailure(RenewalFailure) {}

// ObserveQueue does nothing.
func (Nop) ObserveQueue(QueueEvent) {}

// StartCall returns ctx, and an end that does nothing.
func (Nop) StartCall(ctx context.Context, _ Call) (context.Context, func(error)) {
	return ctx, func(error) {}
}

var (
	_ Observer        = Nop{}
	_ RenewalObserver = Nop{}
	_ QueueObserver   = Nop{}
	_ Tracer          = Nop{}
)

// DurationBuckets returns histogram bounds in seconds, 1 ms to 5 min, a
// fresh slice.
func DurationBuckets() []float64 {
	return []float64{
		0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
		1, 2.5, 5, 10, 30, 60, 120, 300,
	}
}
