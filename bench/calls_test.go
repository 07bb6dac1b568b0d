package main

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/fairlock/fairlock/internal/lua"
	"github.com/redis/go-redis/v9"
)

// BenchmarkCallWords weighs what a script call costs Redis before its
// script does anything: a function that only returns, called with as
// many words as fairlock's calls send (0; 1 key and 4 arguments; 3 keys
// and 5, the fair Lock's since round eight; 3 keys and 10, its earlier
// count), with fairlock's function library loaded beside it and without.
// Each figure is the median over the reps of Redis's µs per call (INFO
// commandstats), each rep's variants run in turn, in blocks of 3,000
// calls, so that the machine's drift touches all of them alike:
//
//	cd bench && go test -run XXX -bench CallWords -benchtime 15x
//
// It uses the Redis at FAIRLOCK_REDIS_ADDR, or starts its own; it deletes
// and loads fairlock's library there in turn, so give it a Redis that
// nothing else uses.
func BenchmarkCallWords(b *testing.B) {
	addr := benchRedis(b)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = c.Close() }()
	const empty = "#!lua name=fairlock_bench_empty\nredis.register_function('fairlock_bench_empty', function(keys, args) return 1 end)"
	if err := c.FunctionLoadReplace(ctx, empty).Err(); err != nil {
		b.Skip("no Redis Functions: ", err)
	}
	name, code := lua.Default().Library()
	defer func() { _ = c.FunctionLoadReplace(ctx, code).Err() }()
	keys := []string{"k1{a}", "k1{a}:queue", "k1{a}:deadlines"}
	owner := "QhOrGB6RQrKo9uyIgFu7VQ.1"
	args := []any{owner, owner + "/123", owner + "#123", 30000, 10000, "join", "bench-host\\t12345\\t", "PUBLISH", keys[0] + ":wake", -1}
	shapes := []struct {
		name       string
		keys, args int
	}{{"0-words", 0, 0}, {"1-key-4-args", 1, 4}, {"3-keys-5-args", 3, 5}, {"3-keys-10-args", 3, 10}}
	run := func(k []string, a []any) float64 {
		const n = 3000
		before := scriptUsec(ctx, c)
		for range n {
			if err := c.FCall(ctx, "fairlock_bench_empty", k, a...).Err(); err != nil {
				b.Fatal(err)
			}
		}
		return (scriptUsec(ctx, c) - before) / n
	}
	got := map[string][]float64{}
	for b.Loop() {
		for _, loaded := range []bool{false, true} {
			if loaded {
				if err := c.FunctionLoadReplace(ctx, code).Err(); err != nil {
					b.Fatal(err)
				}
			} else {
				_ = c.FunctionDelete(ctx, name).Err() // absent at the first rep when nothing loaded it
			}
			for _, s := range shapes {
				metric := fmt.Sprintf("%s-library-%v-µs/call", s.name, loaded)
				got[metric] = append(got[metric], run(keys[:s.keys], args[:s.args]))
			}
		}
	}
	for metric, v := range got {
		slices.Sort(v)
		b.ReportMetric(v[len(v)/2], metric)
	}
}
