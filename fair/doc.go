// Package fair provides fairlock's FIFO-fair primitives on Redis: a reentrant
// lock (Mutex), a semaphore, a read-write lock and a leader election.
//
// Waiters are served strictly in the order they joined the queue, across
// processes and machines: for job runners whose jobs must run one at a time
// in submission order, or services that must take turns. A Mutex has the
// API of the reentrant package's lock (both are a
// [fairlock.MutexHandle]), plus a queue.
//
//	var owner, _ = fairlock.NewOwner(client) // one per client; Close at shutdown
//	var deploys, _ = fair.New(owner, "deploys", fair.WithLabel("deployer")) // one handle, shared
//
//	func deploy(ctx context.Context) error {
//		ctx, err := deploys.LockContext(ctx) // joins the queue, waits its turn
//		if err != nil { ... }
//		defer deploys.Unlock(ctx) // hands the lock to the next in line
//		return run(ctx)           // ctx ends if the hold is lost
//	}
//
// A handle is safe to share: goroutines sharing it exclude each other, as
// they would with a sync.Mutex, and each Lock takes its own turn in the
// queue. Re-entry needs proof that the call chain holds the lock, which Go
// cannot give by goroutine: the context. Lock given the context that
// LockContext returned (or one derived from it, or HoldContext, or the one
// [Mutex.Do] passes to its function) re-enters; any other context waits its
// turn. [Mutex.Do] runs a function under the lock and releases it after.
//
// # Guarantees
//
//  1. Mutual exclusion: at most one caller holds the lock at any moment, by
//     Redis's clock, a caller being one Lock call and the call chain its
//     context is passed along, of any handle (goroutines sharing a handle
//     included); a caller stops believing it holds the lock before Redis
//     lets it go (see Leases in the reentrant package). [Mutex.ForceUnlock], an
//     operator's tool, is the exception: the handle it forced out learns at
//     its next renewal.
//  2. FIFO: among waiters that stay alive (and, with presence, whose
//     presence stays: guarantee 10), the lock is granted in the order
//     they first joined the queue, however long any holder keeps it; each
//     Lock call is a waiter of its own, whichever handle it is made on. A
//     queued waiter keeps its place by refreshing its own deadline (now + its
//     wait timeout, [fairlock.WithWaitTimeout]) every wait timeout / 3; all waiters of
//     one owner (github.com/fairlock/fairlock.Owner) on one lock share one
//     heartbeat call.
//  3. No barging: TryLock with wait 0 never joins the queue, and succeeds only
//     when the lock is free and no live waiter is queued (or when its
//     context carries the hold: a re-entry).
//  4. Eviction: a waiter that falls silent (crash, partition) is dropped once
//     its deadline passes. Waiters that die together delay the live ones
//     behind them by at most one wait timeout plus one heartbeat interval and
//     a round trip in all, not one timeout each; where their owners kept a
//     presence (guarantee 10: the default on a single server and on
//     Sentinel) and died (their connections closed), by the grace (200 ms)
//     and two polls once the lock is released, or by a heartbeat interval and the grace when no live
//     process looks (the holder and the first waiter died together). A
//     paused or cut-off waiter keeps its connections and the wait timeout's
//     rule. A live waiter that stalled
//     for longer than its wait timeout has lost its place: it re-joins at the
//     tail, and the logger ([fairlock.WithLogger]) says so. A queued waiter that
//     cannot reach Redis rides the outage out: it tries again with a
//     jittered backoff until its ctx ends, keeping its place while the place
//     lasts in Redis, and its error, if ctx ends first, says Redis was out of
//     reach and wraps why. With presence (guarantee 10), a waiter whose
//     owner's presence has been gone for 200 ms is passed over sooner.
//  5. Giving up: when Lock or TryLock returns without the lock (ctx ended,
//     wait elapsed, an error), its queue entry is already gone, unless its
//     ctx had ended and Redis did not answer its leave within a grace of
//     50 ms: the leave then goes on in the background, and the entry is
//     gone once it ends, within the cleanup timeout ([fairlock.WithCleanupTimeout],
//     5 s by default) of the return; the owner's Close waits for it. If
//     Redis was unreachable then, the entry is evicted within one wait
//     timeout. Whoever that makes first, while the lock is free, gets it.
//  6. Targeted hand-off: releasing, giving up, evicting a dead head,
//     ForceUnlock, or finding that a lease ran out grants the lock directly
//     to the live head of the queue (passing over, with presence, heads
//     whose owner's presence has been gone for 200 ms: guarantee 10) and
//     publishes exactly one message, to that waiter's owner alone: each
//     owner listens on its own inbox of the
//     lock, so a hand-off reaches one connection and wakes one process
//     however many owners wait (the waiter behind it is told it is head now
//     in the same message when it is of the same owner, else in one message
//     to its own). The grant lasts no longer than the waiter's
//     queue deadline until the new holder claims it (in the background, halfway through
//     that first lease; a shorter hold never needs to), so a grant to a
//     waiter that died frees itself when its eviction would have (with
//     presence, sooner: the waiter behind it, if it lives, ends it as it
//     would a dead holder's hold, guarantee 10). The
//     waiter's Lock returns on the message, with no further round trip.
//     Progress after a lease ends: a hold that ends because its lease ran out
//     (a fixed lease, a holder that died, a grant never claimed) sends no
//     message, so the live head always knows when the current hold expires;
//     it holds the lock within 1 ms and one round trip of that expiry, by
//     Redis's clock (two at worst: it places the expiry on its own clock
//     with an offset read from a reply, which may be a round trip late).
//     Whenever the head changes while the lock is held (the head takes the
//     lock, gives up, or is evicted), one message, to the new head's client
//     only, tells it the expiry: one message and one timer per change of head,
//     whatever the queue's length, and never a herd (with presence, a
//     second one while the new head's owner's presence is gone: to the
//     first waiter behind it whose owner's is not, guarantee 10). The
//     heartbeat doubles as every waiter's fallback timer, so a lost message
//     never strands anyone, and nobody polls.
//  7. Cost: no script iterates over the waiters. Every call is O(log N) in
//     the queue length, amortised: a dead or departed entry is removed once,
//     when it reaches the head. Behind a head whose owner's presence is gone
//     (guarantee 10), a call reads at most 8 more entries.
//  8. Nothing leaks: every key carries a TTL, kept past the later of the
//     hold's lease and the last waiter's deadline by 30 to 40 s. When every
//     client is gone, nothing of the lock is left; the server's one key,
//     fairlock:boot (guarantee 10), lives 30 days. An owner's Close takes its waiters out
//     of their queues and releases its holds at once, so a process that shuts
//     down gracefully delays nobody.
//  9. No rescues without faults: every waiter learns of its turn (a grant,
//     or that it became the head of a held lock) from the message Redis
//     published for it, never from a fallback (its heartbeat's news, a
//     timer's try), unless a fault lost that message: a connection cut, a
//     client or Redis paused, a reply dropped. A waiter that joined before
//     its subscription was confirmed tries once more when the confirmation
//     comes, however soon it came, so a hand-off published in between is
//     never left to the heartbeat. Each rescue is reported to the observer
//     (observe.Rescued, the metric fairlock_queue_rescues_total) and logged:
//     in a healthy deployment the count stays 0, and any rescue cost its
//     waiter up to a heartbeat. Grants the heartbeat makes itself (a dead
//     head evicted), leases that run out and a heartbeat's finding that the
//     waiter is the first alive behind a head whose presence is gone (no
//     script had looked) are the fallbacks' own work, not rescues. A rescue
//     is decided exactly: before reporting one, the waiter makes sure that
//     everything Redis published to its client before it learned the news
//     has arrived (a marker of its own on its inbox), so a message merely
//     overtaken by a reply is not counted.
//  10. Presence (an owner that keeps one: by default on every deployment,
//     not with [fairlock.WithoutPresence]; the
//     reentrant lock's holds and waiters too): a hold whose
//     owner's presence subscription has been gone from Redis for 200 ms
//     (its process died: the kernel closed its socket) is ended by the
//     head's next attempt, as a lease end would be; the head of a lock so
//     held looks every 50 ms, so the lock moves on within about a quarter
//     of a second of the death, to a live head. Waiters too: a hand-off, a
//     head's cleanup, a heartbeat or a free TryLock passes over a queued
//     waiter whose owner's presence has been gone for 200 ms (counted from
//     the first look that found it gone, forgotten by one that finds it
//     back), and the first waiter whose owner's presence is there, behind a
//     head whose is gone, is told to look at the grace's end; so dead
//     waiters cost the live one behind them the grace and a round trip
//     after a release (a poll more if they die as the release runs: they
//     looked alive to it, and its owner looks again a poll later). When
//     nobody alive looks (the holder and the head died together), the live
//     waiter behind learns at its next heartbeat: a heartbeat and the
//     grace, not a wait timeout. A live waiter whose
//     presence connection broke twice, unseen in between and seen gone
//     each time a grace apart, may be passed over: it re-joins at the tail
//     (guarantee 4's rule for a stalled waiter, the logger saying so). A blip
//     costs nothing, and the holder is never the last to know: an owner
//     whose presence connection breaks while it lives subscribes again at
//     once and renews (claims, checks) every hold it had; a hold not so
//     confirmed within the grace, less 20 ms, counted from the send of the
//     owner's latest answered PING (it PINGs every 50 ms while it holds),
//     ends then (Lost closes, ErrLockLost) and is given back, before any
//     waiter can count the grace (while the holder's process runs that
//     timer less than 20 ms late; one that runs later, loaded or paused,
//     believes up to its lateness less 20 ms past it, with the smaller
//     fencing token); a break after which Redis cannot be
//     reached at once (a restart, a partition) ends them at once. An empty
//     restart that is back before the owner's first reconnect is taken for
//     a blip, and the holder learns from its confirming renewal; a server
//     that lost its data (or a fresh one) grants nothing for 200 ms after
//     its first acquisition, so that holder has stopped believing first. A
//     hold
//     granted while its presence was not confirmed is the caller's only once
//     the presence is back and a renewal finds the hold still in Redis
//     (tokens never come back, so it was never taken over); one that is not
//     confirmed is given back and the call queues again (guarantee 12). A paused or cut-off holder keeps its connections, and its hold
//     until its lease ends. The exception is a partition in which the server
//     closes the holder's connections unheard by the holder: the lock moves
//     on after the grace while the holder still believes it holds, until its
//     lease runs out by its own count or it hears of the drop; the next
//     holder's fencing token is greater. The semaphore and the read-write
//     lock alike: their first waiter ends the permit holds of a client gone
//     for 200 ms, and their gate's queue passes dead waiters over as the
//     fair lock's does; a release that serves a first waiter whose presence
//     is gone tells the live waiter behind to look at the grace's end. A
//     failover to a replica (Sentinel's, or an address that moves) ends no
//     live hold: a script counts an absence only where the subscription of
//     the owner that called it is, and an owner whose subscription is not
//     where its commands go (asked every 100 ms while it holds, every 200
//     ms while its waiters try) subscribes again there; the window left is
//     two clients that learn of the failover more than 100 ms apart
//     (docs/presence.md, "Failovers"). A hold that a failover lost (the
//     old master granted it after the promotion) ends, Lost closing,
//     before any other handle of its owner is granted the lock: a grant
//     proves that Redis has no other hold (docs/deployments.md). On
//     Cluster an owner keeps a subscription on every master, and each
//     hold counts on the one where its lock lives. See docs/presence.md.
//  11. Ends are told apart: Lost is closed when a hold is lost (ErrLockLost),
//     never at Unlock or the owner's Close; the hold's context ends at each,
//     with ErrLockLost, ErrReleased or ErrClosed as its cause, and Unlock
//     after Close returns ErrClosed. ErrLockLost does not match ErrNotHeld.
//  12. Every success holds: no acquisition (Lock, LockContext, TryLock, Do,
//     Acquire, RLock, Campaign) returns success with a hold already ended.
//     A grant whose lease ran out before its answer arrived makes the call
//     fail with an error wrapping ErrLockLost that says why; one its owner's
//     presence could not confirm (guarantee 10) is given back and waited
//     past, the call queueing again while ctx and its wait last.
//
// Unlike Redisson's RedissonFairLock, from which the queue's shape descends,
// deadlines are per waiter and taken from Redis's clock (never "the
// predecessor's deadline plus a wait", never a client's clock), so a long hold
// does not purge live waiters, waiters with different timeouts do not disturb
// one another, and clients with skewed clocks agree.
//
// # Data layout
//
// For a lock named N: the string fairlock:f:{N} (the hold, one JSON object:
// owner, count, expiry, the last token issued, data layout version), the
// list fairlock:f:{N}:queue (entries in join order, each with its lease, wait
// timeout and label), the sorted set fairlock:f:{N}:deadlines (entry id by
// deadline; an entry missing here is a tombstone left by a waiter that gave
// up), and one channel per owner with a waiter,
// fairlock:f:{N}:wake:<client id> (its inbox: the notes for its waiters).
// internal/lua/*.lua documents every field and step,
// and docs/queue-semantics.md walks through them. A fair and a reentrant lock
// of the same name are independent.
//
// [Inspect] shows the holder and the queue of a live lock; `go run
// ./cmd/fairlock inspect` prints it as a table (`ls` lists every live
// lock).
//
// # Metrics and traces
//
// [fairlock.WithObserver] reports every acquisition (its wait and outcome, whether
// it queued and behind how many, a hand-off's latency) and every hold's
// end (how long, and released, lost or run out) to an observe.Observer.
// The nested modules extra/fairlockotel and extra/fairlockprom turn them
// into OpenTelemetry metrics and spans or a Prometheus collector;
// docs/observability.md lists every metric. Without an observer there is
// no cost.
//
// # Semaphore
//
// A [Semaphore] hands out K permits in strict arrival order: for job runners
// that run K jobs at a time in submission order.
//
//	s, err := fair.NewSemaphore(owner, "encoders", 4)
//	p, err := s.Acquire(ctx, 1) // waits its turn, then holds 1 of 4 permits
//	defer p.Release(context.Background())
//
// Its waiters queue on a fair lock of its own, its gate (keys
// fairlock:s:{N}:gate...): the gate's holder is the first waiter, and takes
// its permits as soon as enough are free; everyone behind it waits in the
// gate's queue. So guarantees 2 to 9 above hold for the semaphore's waiters
// as they are, and:
//
//  1. Permit accounting: a request for n permits is granted only when the
//     permits in force, n included, are at most K, by Redis's clock. Every
//     grant is a [Permit], a hold of its own with a lease (renewed by the
//     watchdog, or fixed), Lost, HoldContext and a fencing token that rises
//     from one grant to the next; a holder that dies gives its permits back
//     when its lease runs out.
//  2. No starvation of big requests: a waiter asking for n permits blocks
//     those behind it until n are free, even when fewer would do for them.
//     TryAcquire with wait 0 succeeds only when nobody waits.
//  3. Progress: a release (or SetPermits, or an RWMutex's downgrade) serves
//     the waiters at the head in the same script call: the first waiter,
//     then those queued behind it, in order, until a request does not fit.
//     One message carries all their grants, so the run of readers at the
//     head of an RWMutex's queue comes in at once. Like a hand-off, a grant
//     lasts no longer than the waiter's place would have (its queue deadline,
//     or the gate's lease) until it is claimed, so permits served to a
//     waiter that died come back when its eviction would have. The first
//     waiter also looks again by its own timer when the first permit hold in
//     force runs out, which sends no message, and at least every wait
//     timeout / 3, so a release it did not hear costs it no more than a
//     queued waiter's heartbeat. A served waiter whose message was lost (a
//     reconnect) finds its entry gone from the queue and asks the
//     semaphore, which tells it the permits are its.
//  4. A first waiter that dies is passed over within one wait timeout: it
//     holds the gate with the wait timeout as its lease (with presence,
//     within the grace and two polls, or, when nobody alive looks, a
//     heartbeat and the grace: guarantee 10 above).
//  5. K lives in Redis (fairlock:s:{N}, with the holds): the first handle to
//     use the semaphore sets it, [Semaphore.SetPermits] changes it for all.
//     After lowering, holds in force keep their permits, so more than K may
//     be in use until they end; no grant is made until the new K allows it.
//     A waiter asking for more than the new K gets fairlock.ErrInvalidArgument.
//     Once the semaphore is unused long enough for its keys to expire, the
//     next caller sets K again from its handle.
//
// A permit hold costs 2 script calls when nobody waits (acquire, release);
// the first waiter adds the gate's lock and unlock, a waiter served from the
// queue only its gate's lock (the join). The semaphore's scripts read every
// permit hold in force, so each is O(holders), at most K. Serving walks the
// gate's queue only over the waiters it serves, each once in its life, and
// the dead entries ahead of them, each removed once: guarantee 7's
// amortised bound.
//
// # Read-write lock
//
// An [RWMutex] is many readers or one writer, served from one queue in
// arrival order: writers and runs of readers take turns, and a writer is
// never starved by a stream of readers.
//
//	rw, err := fair.NewRWMutex(owner, "catalog")
//	if err := rw.RLock(ctx); err != nil { ... } // shares with other readers
//	defer rw.RUnlock(context.Background())
//
// It is a semaphore of MaxPermits permits on keys of its own
// (fairlock:rw:{N}...), where a reader holds 1 and a writer all of them, so
// the semaphore's guarantees are its own; permit accounting reads: never a
// reader beside a writer, never two writers. Goroutines sharing a handle
// behave as with sync.RWMutex: each RLock and Lock takes its own turn, so a
// writer excludes everyone and readers of one handle do not pass a writer
// queued before them. Re-entry is counted in the handle, and needs the
// hold's context (RLockContext, LockContext, HoldContext): RLock given a
// read or write hold's context, and Lock given a write hold's, return at
// once. A writer may take the read lock that way; its last Unlock then
// keeps one permit as the read hold, with no gap a writer could take (a
// downgrade). Lock given a read hold's context returns [ErrUpgrade] rather
// than wait for itself. When a writer's
// turn ends, one message wakes the whole run of readers at the head of the
// queue: its release serves them all (guarantee 3 above).
//
// # Election
//
// An [Election] elects one leader among candidates: a fair lock on keys of
// its own (fairlock:e:{N}...) whose hold also names the leader's value, so
// the guarantees above are its own. At most one candidate leads at a time
// (guarantee 1), candidates lead in the order they campaigned and none
// starves (2), a dead candidate is skipped within its wait timeout (4), and
// a leader that resigns or closes hands over in the same call (6). A term is
// a hold: its fencing token, [Election.Term], grows from term to term.
//
//	e, err := fair.NewElection(owner, "scheduler")
//	lead, err := e.Campaign(ctx, "host-a:8080") // waits its turn to lead
//	defer e.Resign(lead)                        // hands over once run has returned
//	run(lead)                                   // lead ends when the term or ctx does
//
// Every change of leader, term or value is published in the script that
// makes it, once, on the election's leader channel
// (fairlock:e:{N}:wake:leader); each client with observers ([Election.Observe])
// reads it on one subscription. docs/election.md walks through a scheduler,
// fencing, observers and failover.
package fair
