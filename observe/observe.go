// Package observe is the hook through which fairlock's primitives report
// what they do, for metrics and traces: how long each acquisition waited
// and how it ended, how long each hold lasted and how it ended, and the
// events in between (a renewal that failed, a waiter evicted from a fair
// queue, the queue's length).
//
// An [Observer] is given to a primitive with its WithObserver option
// (fairlock.WithObserver). It has two methods; the
// other events are optional capabilities, interfaces an Observer may also
// implement ([RenewalObserver], [QueueObserver], [Tracer]): a later version
// adds events as new capabilities, never as new methods of Observer, so an
// Observer written today keeps compiling. Embed [Nop] to implement only
// the methods you need.
//
// The library's own module depends on no metrics or tracing library.
// github.com/fairlock/fairlock/extra/fairlockotel (OpenTelemetry) and
// github.com/fairlock/fairlock/extra/fairlockprom (Prometheus), nested
// modules of their own, implement Observer; docs/observability.md lists
// what they measure.
//
// Every method is called synchronously, on the goroutine of the call it
// reports (a hold lost, and a failed renewal, on the goroutine of the hold's
// timer): it must be quick, must not block, must be safe for concurrent
// use, and must not call the lock it observes. With no observer set, a primitive pays
// nothing for this hook.
package observe

import (
	"context"
	"time"
)

// Primitive names the kind of lock an event is about. Its values are short,
// stable and few: they suit a metric attribute.
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

// Primitives returns every Primitive, a fresh slice: a metrics exporter
// starts a counter at 0 for each, so that a rate over it shows 0, not
// nothing, before the first event.
func Primitives() []Primitive {
	return []Primitive{Fair, Election, Reentrant, Semaphore, RWMutex, RedLock}
}

// Queued reports whether p's waiters queue (fair.Mutex, fair.Semaphore,
// fair.RWMutex, fair.Election), and so may be evicted or rescued.
func (p Primitive) Queued() bool {
	return p == Fair || p == Election || p == Semaphore || p == RWMutex
}

// Outcome is how an acquisition (Lock, TryLock, LockContext, Do, Acquire,
// RLock, ...) ended.
type Outcome string

// The outcomes.
const (
	// Acquired: the caller holds the lock, a fresh hold.
	Acquired Outcome = "acquired"
	// Reentered: the caller re-entered a hold its context carried.
	Reentered Outcome = "reentered"
	// TimedOut: TryLock's wait elapsed, or ctx's deadline passed.
	TimedOut Outcome = "timed_out"
	// Cancelled: ctx was cancelled.
	Cancelled Outcome = "cancelled"
	// Failed: any other error (Redis out of reach, a bad argument, ...).
	Failed Outcome = "error"
)

// Outcomes returns every Outcome, a fresh slice.
func Outcomes() []Outcome { return []Outcome{Acquired, Reentered, TimedOut, Cancelled, Failed} }

// Acquisition is the end of one acquisition.
type Acquisition struct {
	Primitive Primitive
	Lock      string  // the lock's name
	Outcome   Outcome // how it ended
	// Wait is how long the call took, from its start to its return.
	Wait time.Duration
	// Queued reports whether the caller waited in a fair queue.
	Queued bool
	// QueueLength is, when Queued, the number of waiters in the queue,
	// this caller included, when it joined (as Redis counted them,
	// waiters not yet evicted included).
	QueueLength int
	// HandedOff reports whether the lock (or the permits) was handed to
	// the caller by a release, while it waited: a direct hand-off.
	HandedOff bool
	// HandOff is, for a hand-off, the time from the grant to the call's
	// return: the hand-off's latency as the new holder saw it. The grant
	// time is Redis's, placed on this client's clock no later than it was,
	// so this may err long by up to one round trip.
	HandOff time.Duration
	// Err is the call's error: nil for Acquired and Reentered.
	Err error
}

// HoldEnd is how a hold ended.
type HoldEnd string

// The ways a hold ends.
const (
	// Released: Unlock (or Release) released it.
	Released HoldEnd = "released"
	// Lost: the lock was found gone or taken, or its lease ran out before
	// a renewal succeeded (Redis out of reach): the holder learned it no
	// longer held the lock.
	Lost HoldEnd = "lost"
	// LeaseRanOut: a fixed lease (TryLock's lease) ran out before Unlock.
	LeaseRanOut HoldEnd = "lease_ran_out"
	// ReleaseUnknown: the release's reply was lost; Redis may keep the hold
	// until its lease runs out.
	ReleaseUnknown HoldEnd = "release_unknown"
)

// Hold is the end of one hold (a fresh acquisition's: re-entries are part
// of it).
type Hold struct {
	Primitive Primitive
	Lock      string
	// Held is how long the hold lasted, from the acquisition's return to
	// its end.
	Held time.Duration
	End  HoldEnd
	// Cause, for Lost, says why the hold was lost.
	Cause string
}

// Observer receives the end of every acquisition and of every hold of the
// primitives it was given to.
type Observer interface {
	// ObserveAcquisition is called as an acquisition returns, with the
	// call's context.
	ObserveAcquisition(ctx context.Context, a Acquisition)
	// ObserveHoldEnd is called when a hold ends, however it ends.
	ObserveHoldEnd(h Hold)
}

// RenewalFailure is a renewal of a hold's lease (or the claim of a
// handed-off hold) that failed: the watchdog tries again, and the hold is
// lost if none succeeds before its lease runs out.
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
	// Joined: the waiter joined the queue's tail; once per acquisition.
	Joined QueueEventKind = "joined"
	// Waiting: the waiter, still queued, learned the queue's length anew
	// (after a re-join too).
	Waiting QueueEventKind = "waiting"
	// Evicted: the waiter lost its place, silent for longer than its wait
	// timeout (its process stalled, or Redis was out of its reach); it
	// re-joins at the tail, still the same wait (Waiting follows, with the
	// queue's new length).
	Evicted QueueEventKind = "evicted"
	// Rescued: the waiter learned of its turn (the lock or permits handed
	// to it, or that it became the head of its queue, or, for a
	// reentrant.Mutex, that the lock was released) by its fallback, not by
	// the message Redis published for it: its heartbeat's news or a
	// fallback timer's try, up to a heartbeat (wait timeout / 3) late. A
	// message was lost: a connection cut or a pause can do that, nothing
	// else should, so alert on any rescue in a healthy deployment. Grants
	// the heartbeat makes itself (after evicting a dead head) and leases
	// that run out are not rescues. Length is 0.
	Rescued QueueEventKind = "rescued"
)

// QueueEvent is news of one waiter in a fair queue (a fair Mutex's, or
// the queue of a semaphore's or read-write lock's waiters), or, for
// Rescued, of any waiter. The wait's end is its Acquisition.
type QueueEvent struct {
	Primitive Primitive
	Lock      string
	Kind      QueueEventKind
	// Length is the number of waiters in the queue, this one included, as
	// Redis counted them (waiters not yet evicted included); 0 for Evicted
	// and Rescued.
	Length int
}

// QueueObserver is an Observer that also receives the news of waiters in
// fair queues, for a gauge of their length.
type QueueObserver interface {
	ObserveQueue(e QueueEvent)
}

// Call is one call that a Tracer wraps in a span: an acquisition or a
// release.
type Call struct {
	Primitive Primitive
	Lock      string
	// Operation is "acquire" (Lock, TryLock, Acquire, RLock, ...) or
	// "release" (Unlock, Release, RUnlock).
	Operation string
	// Script is the Redis function (FCALL) the call runs first; it may run
	// others as it waits.
	Script string
	// ServerAddress and ServerPort are the Redis server's, as the client
	// was given them; empty and 0 for a Cluster or Sentinel client, whose
	// servers vary by call.
	ServerAddress string
	ServerPort    int
}

// Tracer is an Observer that also wraps acquisitions and releases in
// spans. StartCall is called as the call begins; the context it returns is
// the one the call uses (so that the Redis client's own spans, if it is
// instrumented, are its children), and end is called once as the call
// returns, with its error.
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

// Compile-time checks.
var (
	_ Observer        = Nop{}
	_ RenewalObserver = Nop{}
	_ QueueObserver   = Nop{}
	_ Tracer          = Nop{}
)

// DurationBuckets returns upper bounds, in seconds, suited to how long a
// lock is waited for and held: 1 ms to 5 min. The OpenTelemetry and
// Prometheus modules use them for their histograms. Each call returns a
// fresh slice: changing it changes nobody else's.
func DurationBuckets() []float64 {
	return []float64{
		0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
		1, 2.5, 5, 10, 30, 60, 120, 300,
	}
}
