// Package core is the hold lifecycle every primitive shares: the handle
// (Mutex) with its one hold at a time (End, Latest, the lease and watchdog
// of hold.go), which an acquisition (a Turn: Begin, the primitive's wait,
// Keep; Mutex.Acquire runs the three, the mutexes' wait being their
// place's Wait) hands its grant to, the Agent through which it acts
// for its handle, and the Owner that its handles share and that Close ends, with
// its session (presence.go, presence_legs.go) and its restart check
// (restart.go). The primitives (fair, reentrant) say only what differs:
// their scripts and how a caller waits. How a call reaches Redis, and how
// a waiting call is woken, are internal/transport's. docs/architecture.md
// draws the layers.
//
// What options set is here too (options.go, options_config.go,
// observers.go): the Config a handle is made with, its defaults, and the
// option kinds (Everywhere, FairOnly, MutexesOnly) that make an
// option given to a primitive it does not apply to a compile error.
package core
