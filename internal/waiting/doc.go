// Package waiting is the one way every primitive waits for its turn: a
// loop (Loop) that sleeps until something may have changed, tries again,
// and rides out spells without Redis, told by the primitive what to try and
// what its news means (Steps).
//
// A rescue (rescue.go) is a waiter learning of its turn (a grant made to it, or that it
// became the head of a fair queue) by another way than the message that
// was published for it: its heartbeat's news, or a try that a fallback
// timer made. Grants the heartbeat makes itself and a lease's end are the
// fallbacks' own work, not rescues. Without faults (no message dropped, no
// connection cut, no pause) there are none: a rescue means a message was
// lost, and that the waiter waited for a fallback (up to a heartbeat, a
// third of its wait timeout) instead. Each is reported to the observer
// (observe.Rescued) and logged.
package waiting
