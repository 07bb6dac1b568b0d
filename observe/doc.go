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
//
// # Fields worth knowing
//
// Acquisition.QueueLength counts the waiters as Redis did when the caller
// joined, waiters not yet evicted included. Acquisition.HandOff is the time
// from Redis's grant to the call's return, the hand-off's latency as the
// new holder saw it; the grant time is Redis's, placed on this client's
// clock no later than it was, so it may err long by up to one round trip.
//
// A waiter is Evicted when it was silent for longer than its wait timeout
// (its process stalled, or Redis was out of its reach); it re-joins at the
// tail, still the same wait, and a Waiting event follows with the queue's
// new length. A waiter is Rescued when it learned of its turn (the lock or
// permits handed to it, that it became the head of its queue, or, for a
// reentrant lock, that the lock was released) by its fallback, its
// heartbeat's news or a fallback timer's try, up to a heartbeat (wait
// timeout / 3) late, not by the message Redis published for it. A message
// was lost: a connection cut or a pause can do that, nothing else should,
// so alert on any rescue in a healthy deployment. Grants the heartbeat
// makes itself (after evicting a dead head) and leases that run out are
// not rescues.
//
// A hold is Lost when the lock was found gone or taken, or its lease ran
// out before a renewal succeeded; ReleaseUnknown means the release's reply
// was lost, and Redis may keep the hold until its lease runs out. A failed
// renewal (RenewalFailure) is retried until the lease runs out.
//
// Primitives and Outcomes return fresh slices: an exporter starts a counter
// at 0 for each, so a rate over it shows 0, not nothing, before the first
// event. DurationBuckets suits how long a lock is waited for and held.
package observe
