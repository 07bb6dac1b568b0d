// Package clock is the time source behind every timer of fairlock's
// protocol: watchdog renewals, waiter heartbeats, fallback wake-ups and loss
// deadlines.
//
// The pub/sub hub's housekeeping (how long an idle channel stays subscribed,
// the pause before a reconnect, the ping of a quiet connection) runs on the
// wall clock on purpose: one hub serves every handle of a go-redis client,
// each with a clock of its own, and it decides nothing about holds or the
// queue. Tests end it by closing the owner (redistest.CloseOwners).
//
// Scripts never use it: they read "now" from Redis (TIME), so clients whose
// clocks disagree cannot disagree about deadlines. The clock only decides when
// this process does something, which is what tests need to control.
package clock
