package main

import (
	"context"
	"testing"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/redis/go-redis/v9"
)

// BenchmarkEvalMode times the uncontended pair where the server runs no
// Functions for fairlock (an ACL user without FCALL and FUNCTION, as some
// managed services give): each script runs with EVALSHA, its text
// carrying the helpers it calls. It reports Redis's µs in scripts per pair
// (INFO commandstats) beside the pair's time:
//
//	cd bench && go test -run XXX -bench EvalMode -benchtime 5000x
//
// It uses the Redis at FAIRLOCK_REDIS_ADDR, or starts its own, and adds
// an ACL user there.
func BenchmarkEvalMode(b *testing.B) {
	addr := benchRedis(b)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = admin.Close() }()
	const user, password = "fairlock-bench-eval", "fairlock-bench"
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">"+password, "~*", "&*", "+@all", "-fcall", "-function").Err(); err != nil {
		b.Skip("no ACL: ", err)
	}
	defer admin.Do(ctx, "ACL", "DELUSER", user)
	c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: password})
	defer func() { _ = c.Close() }()
	owner, err := fairlock.NewOwner(c)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = owner.Close(ctx) }()
	for _, kind := range []string{"fair", "reentrant"} {
		b.Run(kind, func(b *testing.B) {
			var m fairlock.MutexHandle
			if kind == "fair" {
				m, err = fair.New(owner, lockName("eval"))
			} else {
				m, err = reentrant.New(owner, lockName("eval"))
			}
			if err != nil {
				b.Fatal(err)
			}
			pair := func() {
				if err := m.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := m.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
			pair() // the scripts loaded, the mode learned
			before := scriptUsec(ctx, admin)
			for b.Loop() {
				pair()
			}
			b.ReportMetric((scriptUsec(ctx, admin)-before)/float64(b.N), "redis-µs/pair")
		})
	}
}
