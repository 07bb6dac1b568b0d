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

import "github.com/fairlock/fairlock/internal/core"

// CloseIdleConnections closes the pub/sub connections that no waiter uses.
//
// Waiters of one go-redis client share one pub/sub connection (one per shard
// node on Cluster), and a lock's channel stays subscribed for 30 s after its
// last waiter left, so that a busy lock does not subscribe at every wait. Call
// this before closing a client, or at the end of a test that checks for
// leaked goroutines, to close them at once.
func CloseIdleConnections() { core.CloseIdleHubs() }
