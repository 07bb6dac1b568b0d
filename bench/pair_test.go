package main

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// BenchmarkPair times one uncontended Lock+Unlock pair of each
// implementation, with its allocations: fairlock's allocation goal is set
// against redislock's (docs/performance.md).
//
//	cd bench && go test -run XXX -bench Pair -benchmem
//
// It uses the Redis at FAIRLOCK_REDIS_ADDR, or starts its own.
func BenchmarkPair(b *testing.B) {
	addr := os.Getenv("FAIRLOCK_REDIS_ADDR")
	if addr == "" {
		a, stop, err := startRedis()
		if err != nil {
			b.Skip(err)
		}
		defer stop()
		addr = a
	}
	ctx := context.Background()
	for _, im := range impls {
		b.Run(im.name, func(b *testing.B) {
			c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 16, MaxRetries: -1})
			defer c.Close()
			l, err := im.new(c, lockName("pair"))
			if err != nil {
				b.Fatal(err)
			}
			// One pair first: the first call of a client learns how its
			// server runs scripts.
			if err := l.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := l.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
