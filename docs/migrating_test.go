package docs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/multi"
	"github.com/fairlock/fairlock/reentrant"
)

// The code of migrating.md, compiled (TestMigratingCodeIsCompiled).

// fromRedsync is redsync's NewMutex, WithExpiry, WithTries and Lock, on the
// fair lock: no tries to count, the caller waits its turn in the queue.
func fromRedsync(ctx context.Context, owner *fairlock.Owner) error {
	m, err := fair.New(owner, "orders", fairlock.WithLease(8*time.Second))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second) // instead of tries
	defer cancel()
	if err := m.Lock(ctx); err != nil {
		return err // wraps context.DeadlineExceeded if its turn did not come in time
	}
	defer m.Unlock(context.Background())
	return nil
}

// fromRedislock is redislock's Obtain with a TTL and no retry, then
// Release: one attempt with a fixed lease.
func fromRedislock(ctx context.Context, owner *fairlock.Owner) error {
	m, err := reentrant.New(owner, "my-key")
	if err != nil {
		return err
	}
	ok, err := m.TryLock(ctx, 0, 100*time.Millisecond) // wait 0, lease 100 ms
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("not obtained") // redislock.ErrNotObtained
	}
	return m.Unlock(ctx) // ErrLockLost if the lease ran out
}

// fromRedissonSemaphore is Redisson's RSemaphore.trySetPermits(3) and
// acquire(); release(): here each Acquire returns the permit hold to give
// back, with a lease of its own.
func fromRedissonSemaphore(ctx context.Context, owner *fairlock.Owner) error {
	s, err := fair.NewSemaphore(owner, "exports", 3)
	if err != nil {
		return err
	}
	p, err := s.Acquire(ctx, 1)
	if err != nil {
		return err
	}
	return p.Release(context.Background())
}

// fromRedissonReadWriteLock is RReadWriteLock's readLock().lock() and
// writeLock().lock(): one handle, two sides.
func fromRedissonReadWriteLock(ctx context.Context, owner *fairlock.Owner) error {
	rw, err := fair.NewRWMutex(owner, "catalog")
	if err != nil {
		return err
	}
	if err := rw.RLock(ctx); err != nil {
		return err
	}
	if err := rw.RUnlock(ctx); err != nil {
		return err
	}
	if err := rw.Lock(ctx); err != nil {
		return err
	}
	return rw.Unlock(ctx)
}

// fromRedissonMultiLock is RedissonMultiLock over three locks: all of them
// or none, in one global order.
func fromRedissonMultiLock(ctx context.Context, a, b, c *fair.Mutex) error {
	all, err := multi.New(a, b, c)
	if err != nil {
		return err
	}
	if err := all.Lock(ctx); err != nil {
		return err
	}
	return all.Unlock(context.Background())
}

// The page's functions are compiled, not run; this says so to the linters.
var _ = []any{fromRedsync, fromRedislock, fromRedissonSemaphore, fromRedissonReadWriteLock, fromRedissonMultiLock}

// Every go block of migrating.md stands in this file as it is.
func TestMigratingCodeIsCompiled(t *testing.T) {
	redistest.CodeBlocksIn(t, "migrating.md", "migrating_test.go", 5)
}
