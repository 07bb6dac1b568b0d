package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/fairlock/fairlock/fair"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// The semaphore scenario: 16 handles on 4 clients each take 1 permit of K,
// hold it for a moment and give it back, for a while. Beside fairlock's
// semaphore (and, for K = 1, its mutex), what a user would otherwise write:
// a sorted set of permit holders scored by expiry, taken by a Lua script
// that drops expired holders and adds one if fewer than K remain, retried
// at once until it succeeds (no Go library for Redis offers a semaphore;
// redsync and redislock have none).

// permitter is one handle of a semaphore-like implementation.
type permitter interface {
	acquire(ctx context.Context) (release func(context.Context) error, err error)
}

type semImpl struct {
	name string
	new  func(c *redis.Client, name string, k int) (permitter, error)
}

var semImpls = []semImpl{
	{"spinning zset", newSpinSem},
	{"fairlock/fair.Semaphore", func(c *redis.Client, name string, k int) (permitter, error) {
		s, err := fair.NewSemaphore(ownerOf(c), name, k)
		return fairSem{s}, err
	}},
	{"fairlock/fair.Mutex", func(c *redis.Client, name string, k int) (permitter, error) {
		if k != 1 {
			return nil, nil // a mutex is one permit
		}
		m, err := fair.New(ownerOf(c), name)
		return fairMutex{m}, err
	}},
}

type fairSem struct{ s *fair.Semaphore }

func (f fairSem) acquire(ctx context.Context) (func(context.Context) error, error) {
	p, err := f.s.Acquire(ctx, 1)
	if err != nil {
		return nil, err
	}
	return p.Release, nil
}

type fairMutex struct{ m *fair.Mutex }

func (f fairMutex) acquire(ctx context.Context) (func(context.Context) error, error) {
	if err := f.m.Lock(ctx); err != nil {
		return nil, err
	}
	return f.m.Unlock, nil
}

var (
	spinAcquire = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1`)
	spinRelease = redis.NewScript(`return redis.call('ZREM', KEYS[1], ARGV[1])`)
)

type spinSem struct {
	c   *redis.Client
	key string
	k   int
}

func newSpinSem(c *redis.Client, name string, k int) (permitter, error) {
	return &spinSem{c: c, key: "spinsem:{" + name + "}", k: k}, nil
}

func (s *spinSem) acquire(ctx context.Context) (func(context.Context) error, error) {
	id := uuid.NewString()
	for {
		ok, err := spinAcquire.Run(ctx, s.c, []string{s.key}, id, s.k, 30000).Int()
		if err != nil {
			return nil, err
		}
		if ok == 1 {
			return func(ctx context.Context) error { return spinRelease.Run(ctx, s.c, []string{s.key}, id).Err() }, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// clients returns n clients of their own (as if on n machines).
func (e *env) clients(n int) []*redis.Client {
	cs := make([]*redis.Client, n)
	for i := range cs {
		cs[i] = e.client()
	}
	return cs
}

func closeAll(cs []*redis.Client) {
	for _, c := range cs {
		_ = c.Close()
	}
}

// raise sets most to v if v is greater.
func raise(most *atomic.Int64, v int64) {
	for old := most.Load(); v > old && !most.CompareAndSwap(old, v); old = most.Load() {
	}
}

// semResult is one implementation's run at one K.
type semResult struct {
	impl     string
	k        int
	perSec   float64
	spread   float64 // most / fewest acquisitions of one handle
	overK    bool    // more than K held at once
	heldMost int
}

func (e *env) semaphoreRun(ctx context.Context, im semImpl, k int, hold, dur time.Duration) (*semResult, error) {
	const handles, clients = 16, 4
	cs := e.clients(clients)
	defer closeAll(cs)
	name := lockName("sem")
	ps := make([]permitter, handles)
	for i := range ps {
		p, err := im.new(cs[i%clients], name, k)
		if err != nil {
			return nil, err
		}
		if p == nil {
			return nil, nil
		}
		ps[i] = p
	}
	counts := make([]int, handles)
	var held, most atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, handles)
	deadline := time.Now().Add(dur)
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				release, err := p.acquire(ctx)
				if err != nil {
					errs <- err
					return
				}
				now := held.Add(1)
				raise(&most, now)
				time.Sleep(hold)
				held.Add(-1)
				if err := release(ctx); err != nil {
					errs <- err
					return
				}
				counts[i]++
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return nil, fmt.Errorf("%s: %w", im.name, err)
	}
	total := 0
	for _, c := range counts {
		total += c
	}
	lo, hi := slices.Min(counts), slices.Max(counts)
	spread := float64(hi)
	if lo > 0 {
		spread = float64(hi) / float64(lo)
	}
	return &semResult{impl: im.name, k: k, perSec: float64(total) / dur.Seconds(), spread: spread,
		overK: int(most.Load()) > k, heldMost: int(most.Load())}, nil
}

func printSemaphores(w io.Writer, rs []*semResult, hold time.Duration) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "\nSemaphores: 16 handles on 4 clients, each taking 1 permit of K and holding it %v\n\n", hold)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "implementation\tK\tacquisitions/s\tmost/fewest per handle\tmost held at once\t")
	for _, r := range rs {
		spread := fmt.Sprintf("%.2f", r.spread)
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%d\t\n", r.impl, r.k, r.perSec, spread, r.heldMost)
	}
	_ = tw.Flush()
}

// The read-write scenario: 16 handles on 4 clients, 12 readers and 4
// writers, each holding about 1 ms per turn, under fairlock's RWMutex and,
// for comparison, under its Mutex (what a user without a read-write lock
// does: everyone exclusive).
type rwResult struct {
	impl            string
	reads, writes   float64 // per second
	mostReaders     int
	readerBesideWrt bool
}

func (e *env) rwRun(ctx context.Context, impl string, hold, dur time.Duration) (*rwResult, error) {
	const handles, clients = 16, 4
	cs := e.clients(clients)
	defer closeAll(cs)
	name := lockName("rw")
	var reads, writes, readers, writers, most atomic.Int64
	var beside atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, handles)
	deadline := time.Now().Add(dur)
	for i := 0; i < handles; i++ {
		write := i%4 == 0
		var lock, unlock func(context.Context) error
		switch impl {
		case "fairlock/fair.RWMutex":
			m, err := fair.NewRWMutex(ownerOf(cs[i%clients]), name)
			if err != nil {
				return nil, err
			}
			lock, unlock = m.RLock, m.RUnlock
			if write {
				lock, unlock = m.Lock, m.Unlock
			}
		default:
			m, err := fair.New(ownerOf(cs[i%clients]), name)
			if err != nil {
				return nil, err
			}
			lock, unlock = m.Lock, m.Unlock
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if err := lock(ctx); err != nil {
					errs <- err
					return
				}
				if write {
					writers.Add(1)
					if readers.Load() != 0 {
						beside.Store(true)
					}
				} else {
					n := readers.Add(1)
					raise(&most, n)
					if writers.Load() != 0 {
						beside.Store(true)
					}
				}
				time.Sleep(hold)
				if write {
					writers.Add(-1)
					writes.Add(1)
				} else {
					readers.Add(-1)
					reads.Add(1)
				}
				if err := unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return nil, fmt.Errorf("%s: %w", impl, err)
	}
	return &rwResult{impl: impl, reads: float64(reads.Load()) / dur.Seconds(), writes: float64(writes.Load()) / dur.Seconds(),
		mostReaders: int(most.Load()), readerBesideWrt: beside.Load()}, nil
}

func printRW(w io.Writer, rs []*rwResult, hold time.Duration) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "\nRead-write: 16 handles on 4 clients, 12 readers and 4 writers, each holding %v per turn\n\n", hold)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "implementation\treads/s\twrites/s\tturns/s\tmost readers at once\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%d\t\n", r.impl, r.reads, r.writes, r.reads+r.writes, r.mostReaders)
	}
	_ = tw.Flush()
}
