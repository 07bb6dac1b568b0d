// Package fairlock is a family of distributed locks on Redis.
//
//   - [github.com/fairlock/fairlock/fair]: a FIFO-fair, reentrant lock
//     (fair.Mutex). Waiters are served strictly in the order they arrived,
//     however long a holder keeps the lock; dead waiters are evicted; the
//     lock is handed straight to the next waiter with one message, to that
//     waiter's client alone. The same
//     package has a fair semaphore (fair.Semaphore: K permits, in arrival
//     order) and a fair read-write lock (fair.RWMutex) built on it.
//   - [github.com/fairlock/fairlock/reentrant]: a plain reentrant lock, for
//     when order does not matter.
//   - [github.com/fairlock/fairlock/multi]: several locks held as one
//     (multi.Lock, in one global order, so no deadlock), and RedLock, one
//     name on N independent masters.
//
// The mutexes share one API (Lock, LockContext, TryLock, Unlock, Do,
// Extend, ForceUnlock, IsLocked, HoldCount, TTL, Token, Lost, HoldContext):
// the MutexHandle interface, which code that works with either takes. Every
// handle is safe to share: goroutines sharing one exclude each other, and
// a call re-enters a hold only with the hold's context (the one
// LockContext returns, the one Do passes, HoldContext). Every primitive
// runs on any redis.UniversalClient of github.com/redis/go-redis/v9
// (single node, Sentinel, Cluster) against Redis 7.0 or newer, and leaves
// no key behind: every key carries a TTL.
//
// Handles are made on an Owner (NewOwner): what the handles of one go-redis
// client share, and what a graceful shutdown closes. An owner keeps a
// presence by default, on every deployment (WithoutPresence turns it off):
// a pub/sub subscription (on Cluster, one per master) that Redis drops when
// the process dies, so a dead holder's
// lock moves on within about a quarter of a second instead of at its
// lease's end (docs/presence.md). The root package holds it and, in property_test.go and its companions, the executable
// specification of the locks.
//
// The errors every primitive returns (ErrNotHeld, ErrLockLost, ...) and the
// options every primitive takes (WithLease, WithWaitTimeout, ...) are
// declared here; fair.WithLabel is the fair primitives' own.
//
// # Holding a Mutex
//
// fair.New returns a *fair.Mutex and reentrant.New a *reentrant.Mutex,
// each a MutexHandle. Both re-enter; they differ in how a Lock waits. A fair Lock joins the lock's queue and is handed the lock in
// arrival order; a TryLock with wait 0 never queues, and succeeds only if
// the lock is free and nobody waits. A reentrant Lock is woken when the
// lock is freed, in no particular order.
//
// ctx bounds only the wait: when it ends first, Lock leaves the queue and
// returns an error that wraps ctx's error and names the lock (test it with
// errors.Is, not ==). The hold lasts until Unlock, ForceUnlock, or its loss:
// the watchdog renews the lease every lease/3; TryLock with a positive
// lease holds the lock that long, without renewal, and a re-entry may
// lengthen a lease but never shortens it.
//
// Goroutines sharing a handle exclude each other. A call re-enters the
// hold only when its ctx carries it: the context LockContext returns, the
// one Do passes, HoldContext, or one derived from them. Unlock given such a
// context releases exactly that hold; given any other, the handle's current
// one. Unlock keeps ctx's deadline: if Redis has not answered by then (or
// within 50 ms under a ctx already ended, as in a defer), the release goes
// on in the background, bounded by the cleanup timeout, and the error wraps
// ErrPending.
//
// No acquisition (Lock, LockContext, TryLock, Do, a semaphore's Acquire,
// RLock, Campaign) returns success without holding: a grant whose hold ends
// as it is made (with a presence, one made while the owner's presence
// connection was down and taken over before it came back) is waited past,
// the call queueing again while ctx and its wait last, or the call returns
// an error wrapping ErrLockLost that says why.
//
// # A hold's context
//
// Every primitive follows one contract. A hold ends by its holder's Unlock
// (Release, Resign), by its loss (ErrLockLost: its lease ran out, Redis lost
// it, ForceUnlock), or by its owner's Close (ErrClosed); nothing else ends
// it, and the end of the ctx an acquisition was given never does: ctx bounds
// the wait alone. A hold's context (HoldContext, a Permit's too) ends
// when the hold ends, and context.Cause says which of the three. The context
// a call hands back (LockContext, RLockContext, Campaign, the one Do passes
// to fn) is derived from the ctx given to it: it has ctx's values and
// deadline, and ends when the hold ends or when ctx ends, whichever comes
// first, so work under it stops either way; the hold itself then lasts
// until Unlock, which the work's caller runs once the work has stopped (as
// Do does when fn returns), so that the next holder never starts while
// this one's work still runs.
//
// Lost is closed when a hold is lost, and only then: never by Unlock, nor by
// the owner's Close (the hold's context ends then, with cause ErrClosed,
// and Unlock returns ErrClosed). ErrLockLost does not match ErrNotHeld:
// code that ignores ErrNotHeld for a second Unlock never swallows a loss.
// Before the first hold, Lost is never closed and HoldContext has ended with
// cause ErrNotHeld. ForceUnlock ends whoever holds the lock; that holder
// learns it at its next renewal, and until then believes it holds the lock.
//
// # Closing an Owner
//
// Owner.Close is for the end of a process or a test. New calls of its
// handles get ErrClosed; its waiters leave their queues (their Lock returns
// an error wrapping ErrClosed); its holds end (their contexts with cause
// ErrClosed) and are released in Redis, each lock going to the next in
// line at once; its pub/sub connections close. Close returns once Redis has
// confirmed all of it, or with ctx's error when ctx ends first, whatever the
// go-redis client's options; the rest goes on in the background, each
// release within its handle's cleanup timeout. It is idempotent. Close the
// go-redis client after the owner.
//
// Owner.Drain is the gentler end of a rolling deploy: the owner takes no new
// lock and joins no queue (those calls get ErrClosed), its waiters leave
// their queues, and its running holds go on until their Unlock; then it
// closes. If Drain's ctx ends first, Close begins at once.
package fairlock
