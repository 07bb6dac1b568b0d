// Package fairlock is a family of distributed locks on Redis.
//
//   - [github.com/fairlock/fairlock/fair]: a FIFO-fair, reentrant lock.
//     Waiters are served strictly in the order they arrived, however long a
//     holder keeps the lock; dead waiters are evicted; the lock is handed
//     straight to the next waiter with one message.
//   - [github.com/fairlock/fairlock/reentrant]: a plain reentrant lock, for
//     when order does not matter.
//
// Both share one API (Lock, TryLock, Unlock, ForceUnlock, IsLocked,
// HoldCount, TTL, Token, Lost, HoldContext), run on any
// redis.UniversalClient of github.com/redis/go-redis/v9 (single node,
// Sentinel, Cluster) against Redis 7.0 or newer, and leave no key behind:
// every key carries a TTL.
//
// The errors of both packages are the same values, so errors.Is works
// across them.
//
// This root package holds only documentation and, in property_test.go, the
// executable specification of the fair lock.
package fairlock
