package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/fairlock/fairlock/internal/wire"
	"github.com/redis/go-redis/v9"
)

// BenchmarkScriptsAgainstBase times this version's fair and reentrant
// pair scripts against another version's (FAIRLOCK_BASE_LUA names its
// internal/lua folder, a git worktree's), called directly as the library
// calls them on an uncontended pair, with the Redisson port's pair beside
// them. It reports the median of Redis's µs in scripts per pair (INFO
// commandstats) over blocks of 100 pairs, the variants taking turns in a
// rotating order, each block after 20 pairs of its own, so that the
// machine's drift touches all alike.
//
// The variant whose keys were made first measured up to 1.6 µs a pair
// slower, whatever its scripts (2026-12-02), so a throwaway one is made
// first; FAIRLOCK_AB_SWAP=1 makes the base's before this version's, and
// runs of both orders should be averaged. FAIRLOCK_BASE_ARGS=7 sends the
// base the arguments of round seven's scripts (internal/lua before 8
// words a fair Lock):
//
//	git worktree add /tmp/base 48c7540
//	cd bench && for i in 1 2 3 4 5; do for s in "" 1; do FAIRLOCK_AB_SWAP=$s FAIRLOCK_BASE_ARGS=7 FAIRLOCK_BASE_LUA=/tmp/base/internal/lua go test -run XXX -bench ScriptsAgainstBase -benchtime 200x; done; done
//
// It uses the Redis at FAIRLOCK_REDIS_ADDR, or starts its own.
func BenchmarkScriptsAgainstBase(b *testing.B) {
	dir := os.Getenv("FAIRLOCK_BASE_LUA")
	if dir == "" {
		b.Skip("FAIRLOCK_BASE_LUA names no base version")
	}
	base, err := luaFolder(dir)
	if err != nil {
		b.Fatal(err)
	}
	old := os.Getenv("FAIRLOCK_BASE_ARGS") == "7"
	addr := benchRedis(b)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = c.Close() }()
	type variant struct {
		name string
		pair func() error
	}
	n := 0
	vs := []variant{{"first-made", abFair(ctx, c, lua.Default(), "ab-first", false, &n)}}
	mine := []variant{
		{"fair", abFair(ctx, c, lua.Default(), "ab", false, &n)},
		{"reentrant", abReentrant(ctx, c, lua.Default(), "ab", false, &n)},
	}
	theirs := []variant{
		{"base-fair", abFair(ctx, c, base, "ab-base", old, &n)},
		{"base-reentrant", abReentrant(ctx, c, base, "ab-base", old, &n)},
	}
	if os.Getenv("FAIRLOCK_AB_SWAP") != "" {
		mine, theirs = theirs, mine
	}
	vs = append(append(vs, mine...), theirs...)
	port, err := newRedissonFair(c, lockName("ab-port"))
	if err != nil {
		b.Fatal(err)
	}
	vs = append(vs, variant{"redisson-port-fair", func() error {
		if err := port.Lock(ctx); err != nil {
			return err
		}
		return port.Unlock(ctx)
	}})
	run := func(v variant, times int) {
		for range times {
			if err := v.pair(); err != nil {
				b.Fatal(v.name, ": ", err)
			}
		}
	}
	const block = 100
	per := make([][]float64, len(vs))
	turn := 0
	for b.Loop() {
		turn++
		for j := range vs {
			i := (j + turn) % len(vs)
			run(vs[i], 20)
			before := scriptUsec(ctx, c)
			run(vs[i], block)
			per[i] = append(per[i], (scriptUsec(ctx, c)-before)/block)
		}
	}
	for i, v := range vs {
		slices.Sort(per[i])
		b.ReportMetric(per[i][len(per[i])/2], v.name+"-redis-µs/pair")
	}
}

// abFair is a pair of set's fair_acquire and fair_release, with the
// arguments the library sends (old: those round seven's scripts took).
func abFair(ctx context.Context, c *redis.Client, set *lua.Scripts, name string, old bool, n *int) func() error {
	mode, base := &transport.Mode{}, wire.FairBase(lockName(name))
	keys, channel := wire.QueueKeys(base), wire.Channel(base)
	const owner = "QhOrGB6RQrKo9uyIgFu7VQ.1"
	origin := wire.EscapeJSON(wire.EncodeOrigin("bench-host", 12345, ""))
	return func() error {
		*n++
		id, entry := owner+"#"+strconv.Itoa(*n), owner+"/"+strconv.Itoa(*n)
		args := wire.FairAcquire{Owner: owner, Entry: entry, Request: id, Lease: 30000, Wait: 10000,
			Mode: wire.ModeJoin, Origin: origin, Publish: "PUBLISH", Channel: channel, Stale: wire.AnyStale}.Args()
		if old {
			args = []any{owner, entry, id, 30000, 10000, wire.ModeJoin, origin, "PUBLISH", channel, wire.AnyStale}
		}
		v, err := set.FairAcquire.Run(ctx, c, mode, keys, args...).Result()
		if err != nil {
			return err
		}
		r, err := wire.DecodeFairAcquire(v)
		if err != nil || !r.Held {
			return fmt.Errorf("fair_acquire did not acquire: %v, %v", v, err)
		}
		return set.FairRelease.Run(ctx, c, mode, keys, wire.Release{
			Owner: owner, Request: id + "r", Token: r.Token, Publish: "PUBLISH", Channel: channel,
		}.Args()...).Err()
	}
}

// abReentrant is abFair for reentrant_acquire and reentrant_release, as a
// Lock that may wait makes them.
func abReentrant(ctx context.Context, c *redis.Client, set *lua.Scripts, name string, old bool, n *int) func() error {
	mode, base := &transport.Mode{}, wire.ReentrantKey(lockName(name))
	keys, channel := wire.QueueKeys(base), wire.Channel(base)
	const owner = "QhOrGB6RQrKo9uyIgFu7VQ.1"
	return func() error {
		*n++
		id, waiter := owner+"#"+strconv.Itoa(*n), owner+"/"+strconv.Itoa(*n)
		args := wire.ReentrantAcquire{Owner: owner, Request: id, Lease: 30000, Stale: wire.AnyStale,
			Waiter: waiter, Wait: 10000}.Args()
		if old {
			args = []any{owner, id, 30000, wire.AnyStale, "0", waiter, 10000}
		}
		v, err := set.ReentrantAcquire.Run(ctx, c, mode, keys, args...).Result()
		if err != nil {
			return err
		}
		r, err := wire.DecodeReentrantAcquire(v)
		if err != nil || !r.Held {
			return fmt.Errorf("reentrant_acquire did not acquire: %v, %v", v, err)
		}
		return set.ReentrantRelease.Run(ctx, c, mode, keys, wire.Release{
			Owner: owner, Request: id + "r", Token: r.Token, Publish: "PUBLISH", Channel: channel,
		}.Args()...).Err()
	}
}
