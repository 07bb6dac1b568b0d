package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bsm/redislock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// locker is one handle of any implementation.
type locker interface {
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
}

// impl makes handles of one implementation.
type impl struct {
	name string
	new  func(c *redis.Client, name string) (locker, error)
}

var impls = []impl{
	{"floor", newFloor},
	{"redislock", newRedislock},
	{"redsync", newRedsync},
	{"fairlock/fair", func(c *redis.Client, name string) (locker, error) { return fair.New(ownerOf(c), name) }},
	{"fairlock/reentrant", func(c *redis.Client, name string) (locker, error) { return reentrant.New(ownerOf(c), name) }},
	{"redisson-port/fair", newRedissonFair},
	{"redisson-port/lock", newRedissonLock},
}

// floor: the least a Redis lock can do. Two EVALSHA round trips of trivial
// scripts (SET NX PX; compare-and-delete), retrying at once on contention.
var (
	floorAcquire = redis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) and 1 or 0`)
	floorRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
)

type floor struct {
	c     *redis.Client
	key   string
	token string
}

func newFloor(c *redis.Client, name string) (locker, error) {
	return &floor{c: c, key: "floor:{" + name + "}", token: uuid.NewString()}, nil
}

func (f *floor) Lock(ctx context.Context) error {
	for {
		ok, err := floorAcquire.Run(ctx, f.c, []string{f.key}, f.token, 30000).Int()
		if err != nil || ok == 1 {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

func (f *floor) Unlock(ctx context.Context) error {
	return floorRelease.Run(ctx, f.c, []string{f.key}, f.token).Err()
}

// redislock with the linear back-off retry of its documentation's examples.
type redislockHandle struct {
	client *redislock.Client
	key    string
	held   *redislock.Lock
}

func newRedislock(c *redis.Client, name string) (locker, error) {
	return &redislockHandle{client: redislock.New(c), key: "redislock:" + name}, nil
}

func (r *redislockHandle) Lock(ctx context.Context) error {
	l, err := r.client.Obtain(ctx, r.key, 30*time.Second, &redislock.Options{
		RetryStrategy: redislock.LinearBackoff(100 * time.Millisecond),
	})
	if err != nil {
		return err
	}
	r.held = l
	return nil
}

func (r *redislockHandle) Unlock(ctx context.Context) error {
	if r.held == nil {
		return errors.New("redislock: not held")
	}
	err := r.held.Release(ctx)
	r.held = nil
	return err
}

// redsync with its defaults, on one node.
type redsyncHandle struct{ m *redsync.Mutex }

func newRedsync(c *redis.Client, name string) (locker, error) {
	rs := redsync.New(goredis.NewPool(c))
	return &redsyncHandle{m: rs.NewMutex("redsync:" + name)}, nil
}

func (r *redsyncHandle) Lock(ctx context.Context) error {
	// redsync gives up after its default 32 tries; a benchmark handle keeps
	// asking, as Lock does for the others.
	for {
		err := r.m.LockContext(ctx)
		var taken *redsync.ErrTaken
		if err == nil || ctx.Err() != nil || !(errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken)) {
			return err
		}
	}
}

func (r *redsyncHandle) Unlock(ctx context.Context) error {
	ok, err := r.m.UnlockContext(ctx)
	if err == nil && !ok {
		return fmt.Errorf("redsync: unlock failed")
	}
	return err
}
