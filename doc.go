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
// ForceUnlock, IsLocked, HoldCount, TTL, Token, Lost, HoldContext). Every
// handle is safe to share: goroutines sharing one exclude each other, and
// a call re-enters a hold only with the hold's context (the one
// LockContext returns, the one Do passes, HoldContext). Every primitive
// runs on any redis.UniversalClient of github.com/redis/go-redis/v9
// (single node, Sentinel, Cluster) against Redis 7.0 or newer, and leaves
// no key behind: every key carries a TTL.
//
// The errors every primitive returns are declared here (ErrNotHeld,
// ErrLockLost, ...): compare with errors.Is.
//
// Handles are made on an Owner (NewOwner): what the handles of one go-redis
// client share, and what a graceful shutdown closes. The root package holds
// it and, in property_test.go and its companions, the executable
// specification of the locks.
package fairlock
