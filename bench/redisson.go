package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// Ports of Redisson's fair lock and plain reentrant lock, written here from
// their published algorithm (redisson/*.lua), as peers to measure fairlock
// against: Redis time per script call, and pairs per second. They are not
// fairlock's code, and nothing but this benchmark uses them.
//
// Their scripts are faithful; their waiting is simpler than Redisson's
// client. A waiting Lock call opens a pub/sub connection of its own (go-redis
// Subscribe), where Redisson shares one per client. So the uncontended and
// 8-names columns, where nobody waits, compare the scripts; the contended
// columns understate the ports.
var (
	//go:embed redisson/cleanup.lua
	redissonCleanupSrc string
	//go:embed redisson/fair_acquire.lua
	redissonFairAcquireSrc string
	//go:embed redisson/fair_release.lua
	redissonFairReleaseSrc string
	//go:embed redisson/lock_acquire.lua
	redissonLockAcquireSrc string
	//go:embed redisson/lock_release.lua
	redissonLockReleaseSrc string

	redissonFairAcquire = redis.NewScript(redissonCleanupSrc + redissonFairAcquireSrc)
	redissonFairRelease = redis.NewScript(redissonCleanupSrc + redissonFairReleaseSrc)
	redissonLockAcquire = redis.NewScript(redissonLockAcquireSrc)
	redissonLockRelease = redis.NewScript(redissonLockReleaseSrc)
)

// Redisson's defaults: a 30 s lease (its watchdog's), and a fair-lock
// waiter keeps its place 5 s past the one ahead of it.
const (
	redissonLeaseMs    = 30000
	redissonThreadWait = 5000
)

// redissonHandles numbers the ports' handles, as Redisson numbers threads.
var redissonHandles atomic.Int64

// redissonLock is one handle of either port: one "thread" of a client.
type redissonLock struct {
	c       *redis.Client
	fair    bool
	keys    []string // the lock hash; the fair lock's queue and timeouts
	channel string   // the fair lock: its prefix, one channel per waiter
	thread  string
}

func newRedissonFair(c *redis.Client, name string) (locker, error) {
	base := "redisson:{" + name + "}"
	return &redissonLock{c: c, fair: true,
		keys:    []string{base, "redisson_lock_queue:{" + name + "}", "redisson_lock_timeout:{" + name + "}"},
		channel: "redisson_lock__channel:{" + name + "}",
		thread:  fmt.Sprintf("%s:%d", uuid.NewString(), redissonHandles.Add(1))}, nil
}

func newRedissonLock(c *redis.Client, name string) (locker, error) {
	return &redissonLock{c: c, keys: []string{"redisson:{" + name + "}"},
		channel: "redisson_lock__channel:{" + name + "}",
		thread:  fmt.Sprintf("%s:%d", uuid.NewString(), redissonHandles.Add(1))}, nil
}

// try makes one attempt: 0 when held, else how long to wait at most.
func (l *redissonLock) try(ctx context.Context) (time.Duration, error) {
	var err error
	var ttl int64
	if l.fair {
		ttl, err = redissonFairAcquire.Run(ctx, l.c, l.keys, redissonLeaseMs, l.thread, redissonThreadWait,
			time.Now().UnixMilli()).Int64()
	} else {
		ttl, err = redissonLockAcquire.Run(ctx, l.c, l.keys, redissonLeaseMs, l.thread).Int64()
	}
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return max(time.Duration(ttl)*time.Millisecond, time.Millisecond), nil
}

// Lock tries once, as Redisson does, and only on contention subscribes (the
// fair lock to its own channel, the plain lock to the lock's) and waits for
// a message or the ttl the script gave, trying again after each.
func (l *redissonLock) Lock(ctx context.Context) error {
	wait, err := l.try(ctx)
	if err != nil || wait == 0 {
		return err
	}
	channel := l.channel
	if l.fair {
		channel += ":" + l.thread
	}
	sub := l.c.Subscribe(ctx, channel)
	defer func() { _ = sub.Close() }()
	if _, err := sub.Receive(ctx); err != nil {
		return err
	}
	msgs := sub.Channel()
	for {
		if wait, err = l.try(ctx); err != nil || wait == 0 {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-msgs:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
}

func (l *redissonLock) Unlock(ctx context.Context) error {
	var err error
	if l.fair {
		err = redissonFairRelease.Run(ctx, l.c, append(l.keys, l.channel), redissonLeaseMs, l.thread,
			time.Now().UnixMilli()).Err()
	} else {
		err = redissonLockRelease.Run(ctx, l.c, append(l.keys, l.channel), redissonLeaseMs, l.thread).Err()
	}
	if errors.Is(err, redis.Nil) {
		return errors.New("redisson port: not held")
	}
	return err
}
