package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
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
	name, code := loadedLibrary(b, c)
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

// luaOps times, inside one script call, what the uncontended paths are
// made of: each operation run ARGV[1] times in a loop, timed by Redis's
// own clock, the empty loop's time taken off. It returns "name=µs" per
// operation. The hold is a 244-byte text as release_own leaves it.
const luaOps = `
local n = tonumber(ARGV[1])
local function t() local r = redis.call('TIME'); return tonumber(r[1]) * 1e6 + tonumber(r[2]) end
local a = t()
for i = 1, n do end
local empty = t() - a
local out = {}
local function run(name, f)
  local s = t()
  f()
  out[#out + 1] = name .. '=' .. string.format('%.4f', (t() - s - empty) / n)
end
local raw = redis.call('GET', KEYS[1])
local s10, s100, s300 = string.rep('a', 10), string.rep('b', 100), string.rep('c', 300)
local p = {'x', 'y', 'z', 'w', 'v', 'u', 't', 's', 'r'}
run('find', function() for i = 1, n do local _ = string.find(raw, '0000000000000', 44, true) end end)
run('sub-13', function() for i = 1, n do local _ = string.sub(raw, 84 + i % 2, 96) end end)
run('sub-250', function() for i = 1, n do local _ = string.sub(raw, 1 + i % 9, 250) end end)
run('tonumber-sub', function() for i = 1, n do local _ = tonumber(string.sub(raw, 84, 96)) end end)
run('concat-20', function() for i = 1, n do local _ = s10 .. p[i % 9 + 1] end end)
run('concat-110', function() for i = 1, n do local _ = s100 .. p[i % 9 + 1] end end)
run('concat-310', function() for i = 1, n do local _ = s300 .. p[i % 9 + 1] end end)
run('format-16', function() for i = 1, n do local _ = string.format('%016d', 1796221944051744 + i) end end)
run('number-to-text', function() for i = 1, n do local _ = '' .. (1796221944051 + i) end end)
run('TIME', function() for i = 1, n do local _ = redis.call('TIME') end end)
run('GET-244', function() for i = 1, n do local _ = redis.call('GET', KEYS[1]) end end)
run('SET-244', function() for i = 1, n do redis.call('SET', KEYS[1], raw, 'KEEPTTL') end end)
return out
`

// BenchmarkLuaOps weighs what the uncontended pair's scripts are made of,
// inside Redis: a string search, substrings, concatenations of growing
// length, number formats, TIME, GET and SET of a hold's text. Each figure
// is the median over the reps of Redis's µs per operation, 100,000 of each
// per rep in one EVAL (docs/performance.md, round nine):
//
//	cd bench && go test -run XXX -bench LuaOps -benchtime 5x
//
// It uses the Redis at FAIRLOCK_REDIS_ADDR, or starts its own.
func BenchmarkLuaOps(b *testing.B) {
	addr := benchRedis(b)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = c.Close() }()
	key := "fairlock:f:{bench-lua-ops}"
	hold := `{"~":0,"v":"8","f":"1796222045405830","x":"0000000000000","h":"0000000000000","k":"9000000000000",` +
		`"r":"0000000000000123000000000000000000000000000000000000000000000000","q":"Yf3kq9-ZcUu2W1zN8rLq0w.1#b",` +
		`"o":"","c":"","a":"","n":"","b":"","~~":0}`
	if err := c.Set(ctx, key, hold, 0).Err(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Del(ctx, key).Err() }()
	got := map[string][]float64{}
	for b.Loop() {
		lines, err := c.Eval(ctx, luaOps, []string{key}, 100000).StringSlice()
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range lines {
			name, value, _ := strings.Cut(l, "=")
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				b.Fatalf("%q: %v", l, err)
			}
			got[name+"-µs/op"] = append(got[name+"-µs/op"], v)
		}
	}
	for metric, v := range got {
		slices.Sort(v)
		b.ReportMetric(v[len(v)/2], metric)
	}
}

// loadedLibrary returns the name and code of fairlock's function library,
// once a fair Lock and Unlock on c have loaded it.
func loadedLibrary(b *testing.B, c *redis.Client) (name, code string) {
	ctx := context.Background()
	owner, err := fairlock.NewOwner(c)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = owner.Close(ctx) }()
	m, err := fair.New(owner, "fairlock-bench-calls")
	if err != nil {
		b.Fatal(err)
	}
	if err := m.Lock(ctx); err != nil {
		b.Fatal(err)
	}
	if err := m.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
	libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "fairlock_*", WithCode: true}).Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range libs {
		for _, f := range l.Functions {
			if f.Name == l.Name+"_fair_acquire" { // the library of the fair lock this binary ran
				return l.Name, l.Code
			}
		}
	}
	b.Fatal("no fairlock library has a fair_acquire function")
	return "", ""
}
