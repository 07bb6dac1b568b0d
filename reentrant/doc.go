// Package reentrant is a reentrant distributed lock on Redis.
//
// A Mutex is one handle on a named lock, safe to share: goroutines sharing
// it exclude each other, as they would with a sync.Mutex, and so do handles
// in this process or another. The call chain that holds the lock may lock
// it again (re-entry), and must unlock it as many times; its proof is the
// context, which Go cannot give by goroutine: Lock given the context that
// LockContext returned (or one derived from it, or HoldContext, or the one
// [Mutex.Do] passes to its function) re-enters, any other context waits.
//
//	var owner, _ = fairlock.NewOwner(client) // one per client; Close at shutdown
//	var invoices, _ = reentrant.New(owner, "invoices") // one handle, shared
//
//	func bill(ctx context.Context) error {
//		ctx, err := invoices.LockContext(ctx)
//		if err != nil { ... }
//		defer invoices.Unlock(ctx)
//		return work(ctx) // ctx ends if the hold is lost
//	}
//
// # Choosing between reentrant and fair
//
// This lock is not fair: when it is free, whichever caller's attempt
// reaches Redis first gets it, and the releasing process often gets it back.
// Its waiters are known to Redis, in arrival order, but only so that each
// release wakes one of them: a caller that has not waited may take a free
// lock before the waiter it woke. Choose
// [github.com/fairlock/fairlock/fair] when waiters must be served in the
// order they arrived, or when a busy lock must not starve anyone.
//
// # Leases, loss and fencing
//
// A hold has a lease. Lock, and TryLock with lease 0, keep it alive with a
// watchdog that renews it every lease/3 (default lease 30 s, [fairlock.WithLease]);
// TryLock with a positive lease holds it for that long, without renewal;
// [Mutex.Extend] lengthens a hold on demand, a fixed lease included. The
// client counts a lease from the moment the acquiring or renewing request was
// sent, minus a safety margin ([fairlock.WithDriftFactor]): it stops believing it holds
// the lock before Redis lets it go, assuming the two clocks run at rates
// within that factor of each other. When a hold ends without Unlock, Lost is
// closed and HoldContext cancelled with cause [fairlock.ErrLockLost]. Each fresh
// acquisition gets a fencing token (Token) greater than every earlier one for
// that name, even after the lock's keys expired or Redis restarted empty,
// provided the Redis server's clock never steps back: pass it to the
// resource you protect so it can reject a stale holder.
//
// # Waiting
//
// Waiters do not poll. A Lock (or a TryLock with a wait) whose first try
// finds the lock held is put among the lock's waiters in Redis, with a
// deadline one wait timeout away ([fairlock.WithWaitTimeout], default 10 s). Each
// release wakes one waiter, the longest-waiting live one, with one message
// to its client's inbox of the lock: all waiters of one go-redis client
// share one pub/sub connection, and Redis's work per release does not grow
// with the clients waiting. A woken waiter that a caller beat to the lock
// stays first, for the next release. A waiter tries again every wait timeout
// / 3, which keeps its place (one script call per waiter per beat); one that
// falls silent for a wait timeout (its process paused or died) is passed
// over. One that gives up leaves at once (when its ctx had ended and Redis
// did not answer within a grace of 50 ms, in the background, within the
// cleanup timeout of its return: [fairlock.WithCleanupTimeout]), and passes on a
// wake-up that came to it while the lock is still free.
//
// A fallback timer, set to the remaining lease of the current hold, covers
// a hold that ends by its lease (a fixed lease, or a holder that died
// without releasing): one waiter takes the lock within 1 ms and a round
// trip of the lease's end. Every waiter has that timer, so then each makes
// one attempt; the fair lock wakes only its head. The beat is the fallback
// for a wake-up that a fault lost (a connection cut): such a waiter waits
// up to a wait timeout / 3, and finding the lock free with the last
// wake-up sent to it is a rescue, reported to the observer
// (observe.Rescued) and logged; a hold that ran out is not. Without faults
// there are none. A lock's inbox stays subscribed for 30 s after its last
// waiter left; the owner's Close ([github.com/fairlock/fairlock.Owner])
// closes its connections at once.
//
// # Presence
//
// A holder on an owner that keeps a presence (the default on a single
// server: [github.com/fairlock/fairlock.NewOwner]) that dies loses the lock
// within about a quarter of a second, not at its lease's end: while it
// holds, the longest-waiting live waiter whose owner is there (that one
// only, so a lock costs about 20 script calls a second while held and
// waited for, whatever the waiters) tries every 50 ms, and an attempt that
// finds the holder's presence gone for 200 ms ends its hold, as a lease that
// ran out would, and takes the lock with a greater token (any attempt may:
// TryLock too). A blip
// of the holder's connection costs nothing, and a holder that cannot
// confirm its hold after a break stops believing first, as for the fair
// lock (docs/presence.md). A waiter whose owner keeps a presence and dies is
// passed over: a release's wake-up skips one whose presence has been gone
// for 200 ms, and wakes the first live waiter behind one gone for less;
// the waiter that polls a holder is the longest-waiting one whose owner is
// there; and after a release that woke a waiter that keeps a presence, the
// releasing owner looks again 50 ms later, in the background (at most once
// per 50 ms and lock), waking again if that waiter died unseen, or making
// the waiter behind the new holder its poller.
//
// # Redis
//
// Redis 7.0 or newer; a single node, Sentinel (redis.NewFailoverClient) or
// Cluster client. A *redis.Ring is refused: it may move a key to another
// shard, which would let two clients hold one lock. The lock's keys are
// fairlock:r:{name} (a string holding one JSON object), its waiters
// fairlock:r:{name}:queue (a list) and their deadlines
// fairlock:r:{name}:deadlines (a sorted set), and each client's inbox is the
// channel fairlock:r:{name}:wake:<client>; a fair and a reentrant lock of
// the same name are independent. Every key expires: at most 40 s after the
// end of the last lease Redis granted (the lease as acquired or last
// renewed, whenever the hold was released), and 50 s after the last
// deadline a waiter was given, nothing is left.
//
// go-redis retries a command after a timeout or connection error even when
// the first try ran; every script here is safe to run twice. Recommended
// client options: ContextTimeoutEnabled: true, so a call's ctx bounds its
// reads, and a ReadTimeout well below the lease.
package reentrant
