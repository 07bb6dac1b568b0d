package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// benchRedis is the Redis at FAIRLOCK_REDIS_ADDR, or one it starts for b.
func benchRedis(b *testing.B) string {
	if addr := os.Getenv("FAIRLOCK_REDIS_ADDR"); addr != "" {
		return addr
	}
	addr, stop, err := startRedis()
	if err != nil {
		b.Skip(err)
	}
	b.Cleanup(stop)
	return addr
}

// BenchmarkPair times one uncontended Lock+Unlock pair of each
// implementation, with its allocations: fairlock's allocation goal is set
// against redislock's (docs/performance.md).
//
//	cd bench && go test -run XXX -bench Pair -benchmem
//
// It uses the Redis at FAIRLOCK_REDIS_ADDR, or starts its own.
func BenchmarkPair(b *testing.B) {
	addr := benchRedis(b)
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

// The bench's functions: busy keeps Redis busy for ARGV[1] µs of its own
// clock (TIME, read in a loop) and returns 1, a script call whose body
// costs what the caller asks and little else; rw and json are the least a
// script that keeps a lock's state in one string can do: read it, read the
// clock, write it (rw, a short string), and json the same with the string
// a JSON object as fairlock's hold is, decoded, changed as a Lock (ARGV[1]
// "a") or an Unlock ("r") changes it, and encoded.
const busyLibrary = `#!lua name=fairlock_bench_busy
redis.register_function('fairlock_bench_busy', function(keys, args)
  local us = tonumber(args[1])
  if us <= 0 then return 1 end
  local t = redis.call('TIME')
  local start = t[1] * 1000000 + t[2]
  repeat
    t = redis.call('TIME')
  until t[1] * 1000000 + t[2] - start >= us
  return 1
end)
redis.register_function('fairlock_bench_rw', function(keys, args)
  local v = redis.call('GET', keys[1])
  local t = redis.call('TIME')
  redis.call('SET', keys[1], args[2] .. t[2], 'PX', 60000)
  return {1, 1, 0}
end)
-- json's body, with the hold decoded and encoded by the codec given.
local function codec_pair(keys, args, decode, encode)
  local raw = redis.call('GET', keys[1])
  local s = {v = '7', f = '1', r = '', k = '0'}
  if raw then s = decode(raw) end
  local t = redis.call('TIME')
  local now, now_us = t[1] * 1000 + math.floor(t[2] / 1000), t[1] * 1000000 + t[2]
  if args[1] == 'a' then
    s.f = string.format('%d', now_us)
    s.o, s.c, s.x, s.b = args[2], '1', string.format('%d', now + 30000), 'bench-host\t12345\t'
  else
    s.r = string.format('%016d', tonumber(s.f)) .. string.sub(s.r, 1, 48)
    s.o, s.c, s.x, s.b = nil, nil, nil, nil
  end
  s.q = args[3]
  redis.call('SET', keys[1], encode(s), 'PX', 60000)
  if args[1] == 'a' then return {1, tonumber(s.f), 0} end
  return {1}
end
redis.register_function('fairlock_bench_json', function(keys, args)
  return codec_pair(keys, args, cjson.decode, cjson.encode)
end)
-- msgpack: json with the hold in MessagePack (cmsgpack) instead of JSON.
redis.register_function('fairlock_bench_msgpack', function(keys, args)
  return codec_pair(keys, args, cmsgpack.unpack, cmsgpack.pack)
end)
-- Layouts tried for the hold's hot path (issue 47), each doing what json
-- does: read the hold, Redis's clock, a Lock's or an Unlock's change, write.
-- hash: the hold as a Redis hash, the fields read with HMGET, the changed
-- ones written with HSET (and HDEL for an Unlock's).
redis.register_function('fairlock_bench_hash', function(keys, args)
  local v = redis.call('HMGET', keys[1], 'v', 'o', 'c', 'x', 'f', 'q', 'k', 'h', 'r')
  local t = redis.call('TIME')
  local now, now_us = t[1] * 1000 + math.floor(t[2] / 1000), t[1] * 1000000 + t[2]
  local f = v[5] or '1'
  if args[1] == 'a' then
    f = string.format('%d', now_us)
    redis.call('HSET', keys[1], 'v', '7', 'o', args[2], 'c', '1', 'x', string.format('%d', now + 30000),
      'f', f, 'b', 'bench-host\t12345\t', 'q', args[3])
    if not v[7] then redis.call('PEXPIRE', keys[1], 60000) end
    return {1, tonumber(f), 0}
  end
  redis.call('HDEL', keys[1], 'o', 'c', 'x', 'b')
  redis.call('HSET', keys[1], 'r', string.format('%016d', tonumber(f)) .. string.sub(v[9] or '', 1, 48), 'q', args[3])
  return {1}
end)
-- packed: the hold as one string of fields in a fixed order, split with one
-- string.match and joined with table.concat.
local PACKED = {'v', 'o', 'c', 'x', 'f', 'q', 'k', 'h', 'r', 'b'}
local PATTERN = '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$'
redis.register_function('fairlock_bench_packed', function(keys, args)
  local raw = redis.call('GET', keys[1])
  local s = {v = '7', f = '1', r = '', k = '0'}
  if raw then
    local got = {string.match(raw, PATTERN)}
    for i, name in ipairs(PACKED) do s[name] = got[i] end
  end
  local t = redis.call('TIME')
  local now, now_us = t[1] * 1000 + math.floor(t[2] / 1000), t[1] * 1000000 + t[2]
  if args[1] == 'a' then
    s.f = string.format('%d', now_us)
    s.o, s.c, s.x, s.b = args[2], '1', string.format('%d', now + 30000), 'bench-host 12345 '
  else
    s.r = string.format('%016d', tonumber(s.f)) .. string.sub(s.r, 1, 48)
    s.o, s.c, s.x, s.b = '', '', '', ''
  end
  s.q = args[3]
  local out = {}
  for i, name in ipairs(PACKED) do out[i] = s[name] or '' end
  redis.call('SET', keys[1], table.concat(out, '|'), 'PX', 60000)
  if args[1] == 'a' then return {1, tonumber(s.f), 0} end
  return {1}
end)
-- split: the fields every call needs (the layout, the waiters' horizon,
-- the holder, its count, expiry and token, the last request) in a short
-- string; the release memory r in a key of its own, read and written by a
-- final release only.
redis.register_function('fairlock_bench_split', function(keys, args)
  local raw = redis.call('GET', keys[1])
  local v, h, o, c, x, f, q = '7', '0', '', '', '', '1', ''
  if raw then v, h, o, c, x, f, q = string.match(raw, '^([^ ]*) ([^ ]*) ([^ ]*) ([^ ]*) ([^ ]*) ([^ ]*) ([^ ]*)$') end
  local t = redis.call('TIME')
  local now, now_us = t[1] * 1000 + math.floor(t[2] / 1000), t[1] * 1000000 + t[2]
  if args[1] == 'a' then
    f = string.format('%d', now_us)
    o, c, x = args[2], '1', string.format('%d', now + 30000)
  else
    local rk = keys[1] .. ':released'
    local r = redis.call('GET', rk) or ''
    redis.call('SET', rk, string.format('%016d', tonumber(f)) .. string.sub(r, 1, 48), 'PX', 60000)
    o, c, x = '', '', ''
  end
  redis.call('SET', keys[1], table.concat({v, h, o, c, x, f, args[3]}, ' '), 'PX', 60000)
  if args[1] == 'a' then return {1, tonumber(f), 0} end
  return {1}
end)
-- lean: fair_acquire's and fair_release's uncontended path, on the same
-- hold, keys and arguments, with every check the scripts make on that path
-- (layout, retry answer, an election's key, waiters, holder, stale token,
-- fence, TTL bookkeeping, release memory) written straight, without the
-- helpers' tables and closures; any other case is an error. What a fast
-- path in the scripts could save.
redis.register_function('fairlock_bench_lean_acquire', function(keys, args)
  local raw = redis.call('GET', keys[1])
  local s = {}
  if raw then
    s = cjson.decode(raw)
    if s.v ~= '7' then return redis.error_reply('layout') end
    if s.q == args[2] then return {1, tonumber(s.f), 0} end
  end
  if string.sub(keys[1], 1, 11) == 'fairlock:e:' then return redis.error_reply('election') end
  local t = redis.call('TIME')
  local now, now_us = t[1] * 1000 + math.floor(t[2] / 1000), t[1] * 1000000 + t[2]
  if tonumber(s.h or '0') > now then return redis.error_reply('waiters') end
  if s.o and tonumber(s.x) > now and not (s.o == args[1] and tonumber(s.f) == tonumber(string.match(args[5], '^%S+ %d+ %l+ (%-?%d+)'))) then
    return redis.error_reply('held')
  end
  local token = math.max(tonumber(s.f or '0') + 1, now_us)
  local x = now + tonumber(args[3])
  s.v, s.f, s.o, s.c, s.x, s.b, s.q = '7', string.format('%d', token), args[1], '1', string.format('%d', x), args[4], args[2]
  s.a, s.e, s.g = nil, nil, nil
  local keep = x + 30000
  if keep > tonumber(s.k or '0') then
    keep = keep + 10000
    s.k = string.format('%d', keep)
    redis.call('SET', keys[1], cjson.encode(s), 'PX', keep - now)
    redis.call('PEXPIRE', keys[2], keep - now)
    redis.call('PEXPIRE', keys[3], keep - now)
  else
    redis.call('SET', keys[1], cjson.encode(s), 'KEEPTTL')
  end
  return {1, token, 0}
end)
redis.register_function('fairlock_bench_lean_release', function(keys, args)
  local raw = redis.call('GET', keys[1])
  if not raw then return {0} end
  local s = cjson.decode(raw)
  if s.v ~= '7' then return redis.error_reply('layout') end
  if s.q == args[2] then if s.a then return {2} end return {1} end
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  if s.o ~= args[1] or tonumber(s.x) <= now or tonumber(s.f) ~= tonumber(args[3]) then return redis.error_reply('not held') end
  if s.c ~= '1' or tonumber(s.h or '0') > now then return redis.error_reply('re-entered, or waiters') end
  s.r = string.format('%016d', tonumber(s.f)) .. string.sub(s.r or '', 1, 48)
  s.o, s.c, s.x, s.b, s.e, s.g, s.a, s.q = nil, nil, nil, nil, nil, nil, nil, args[2]
  redis.call('SET', keys[1], cjson.encode(s), 'KEEPTTL')
  return {1}
end)
-- flat: a layout whose uncontended pair decodes nothing, weighed before it
-- is built. KEYS[1] the hold, present only while held, its TTL the lease:
-- "<owner> <token, 16 digits> <count> <label>", so a release compares a
-- prefix it can build itself, and a live hold needs no clock. KEYS[4] the
-- lock's memory, fixed-width fields read with string.sub: the last token
-- (16 digits), the waiters' horizon h (13, ms), the tokens of the last 4
-- final releases (4 x 16), then the last request's id (retry answers).
-- An uncontended pair is GET, GET, TIME, SET, SET and GET, GET, TIME, DEL,
-- SET; what it does not find on that path (a hold, a retry, waiters, an
-- election, a hold another owns or has re-entered) is an error here, where
-- a built version would go to the general path.
redis.register_function('fairlock_bench_flat_acquire', function(keys, args)
  if redis.call('GET', keys[1]) then return redis.error_reply('held') end
  if string.sub(keys[1], 1, 11) == 'fairlock:e:' then return redis.error_reply('election') end
  local m = redis.call('GET', keys[4]) or string.rep('0', 93)
  if string.sub(m, 94) == args[2] then return redis.error_reply('retry') end
  local t = redis.call('TIME')
  local now, now_us = t[1] * 1000 + math.floor(t[2] / 1000), t[1] * 1000000 + t[2]
  if tonumber(string.sub(m, 17, 29)) > now then return redis.error_reply('waiters') end
  local token = string.format('%016d', math.max(tonumber(string.sub(m, 1, 16)) + 1, now_us))
  redis.call('SET', keys[1], args[1] .. ' ' .. token .. ' 1 ' .. args[4], 'PX', args[3])
  redis.call('SET', keys[4], token .. string.sub(m, 17, 93) .. args[2], 'PX', tonumber(args[3]) + 30000)
  return {1, tonumber(token), 0}
end)
redis.register_function('fairlock_bench_flat_release', function(keys, args)
  local hold = redis.call('GET', keys[1])
  local m = redis.call('GET', keys[4]) or ''
  if string.sub(m, 94) == args[2] then return redis.error_reply('retry') end
  local token = string.format('%016d', tonumber(args[3]))
  local want = args[1] .. ' ' .. token .. ' 1 '
  if not hold or string.sub(hold, 1, #want) ~= want then return redis.error_reply('not held, or re-entered') end
  local t = redis.call('TIME')
  if tonumber(string.sub(m, 17, 29)) > t[1] * 1000 + math.floor(t[2] / 1000) then return redis.error_reply('waiters') end
  redis.call('DEL', keys[1])
  redis.call('SET', keys[4], string.sub(m, 1, 29) .. token .. string.sub(m, 30, 77) .. args[2], 'KEEPTTL')
  return {1}
end)`

// BenchmarkPairParts takes an uncontended pair apart end to end, on one
// client, as one goroutine makes it. Its variants run interleaved, in
// blocks of 50 pairs:
//
//   - busy-N: two FCALLs of a function that keeps Redis busy N µs: what a
//     µs of script time costs a caller, with nothing else changed;
//   - rw and json: two FCALLs of the least a script that keeps a lock's
//     state in one string can do (busyLibrary); msgpack, hash, packed and
//     split: the same as json with the hold laid out otherwise
//     (MessagePack, a Redis hash, a string of fields in a fixed order, the
//     hot fields apart from the release memory);
//   - flat: a layout whose uncontended pair decodes nothing (a hold key
//     that lives as long as the hold, a memory of fixed-width fields),
//     with that pair's checks;
//   - floor and redislock: the floor's and redislock's pairs;
//   - floor+timers and floor+context: the floor's pair with one part of
//     what the library does around its calls: a hold's two timers, and an
//     acquisition's context;
//   - json+words: json called with the words of the fair scripts' calls
//     (three keys, five arguments each), which it ignores;
//   - fair-scripts and reentrant-scripts: each lock's acquire and release
//     scripts called directly, with the arguments the library sends,
//     without the library around them; base-fair-scripts and
//     base-reentrant-scripts the same with the scripts of another version,
//     when FAIRLOCK_BASE_LUA names its internal/lua folder (a git
//     worktree's), so that a change to the scripts is timed against what
//     it changed in one interleaved run (with this version's arguments:
//     a version before round eight takes others, which
//     BenchmarkScriptsAgainstBase sends it);
//   - lean: fair-scripts' calls to functions that do what those scripts
//     did on an uncontended pair's path before round six, written
//     straight (busyLibrary): the target of round six's straight paths;
//   - fair and reentrant: fair.Mutex's and reentrant.Mutex's Lock and
//     Unlock on context.Background, and (+deadline) on a ctx with a
//     deadline sooner than go-redis's own bound of a call.
//
// It reports each variant's median µs per pair and the mean of Redis's
// time in its scripts per pair (INFO commandstats). Were a caller's time
// its round trips plus Redis's time, every variant would sit on the line
// through busy-0 with a slope of 1; where the client's and Redis's threads
// sleep while they wait, longer calls cost more than that
// (docs/performance.md):
//
//	cd bench && go test -run XXX -bench PairParts -benchtime 40x -count 3
//	git worktree add /tmp/base <rev> && cd bench && FAIRLOCK_BASE_LUA=/tmp/base/internal/lua go test -run XXX -bench PairParts -benchtime 40x -count 3
func BenchmarkPairParts(b *testing.B) {
	addr := benchRedis(b)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = c.Close() }()
	if err := c.FunctionLoadReplace(ctx, busyLibrary).Err(); err != nil {
		if strings.Contains(strings.ToLower(err.Error()), "unknown command") {
			b.Skip("no Redis Functions: ", err)
		}
		b.Fatal(err) // the library's own error
	}
	type variant struct {
		name string
		pair func() error
	}
	lockPair := func(l locker, ctx context.Context) func() error {
		return func() error {
			if err := l.Lock(ctx); err != nil {
				return err
			}
			return l.Unlock(ctx)
		}
	}
	// A request's deadline, sooner than go-redis's own bound of a call.
	deadline, cancel := context.WithTimeout(ctx, 100*time.Second)
	defer cancel()
	var variants []variant
	for _, im := range impls {
		if im.name == "floor" || im.name == "redislock" || strings.HasPrefix(im.name, "fairlock/") {
			l, err := im.new(c, lockName("parts"))
			if err != nil {
				b.Fatal(err)
			}
			name := strings.TrimPrefix(im.name, "fairlock/")
			variants = append(variants, variant{name, lockPair(l, ctx)})
			if name != im.name {
				variants = append(variants, variant{name + "+deadline", lockPair(l, deadline)})
			}
		}
	}
	// The floor's pair with what the library's client side adds around
	// its two calls, one part at a time: a hold's two timers (its
	// watchdog's, at lease/3, and its loss deadline's), armed by Lock and
	// stopped by Unlock; an acquisition's context, which also ends when
	// its owner is closed (Owner.enter).
	fl, err := newFloor(c, lockName("parts-floor"))
	if err != nil {
		b.Fatal(err)
	}
	nothing := func() {}
	closing, closeAll := context.WithCancel(ctx)
	defer closeAll()
	variants = append(variants, variant{"floor+timers", func() error {
		if err := fl.Lock(ctx); err != nil {
			return err
		}
		watchdog, loss := time.AfterFunc(10*time.Second, nothing), time.AfterFunc(29*time.Second, nothing)
		err := fl.Unlock(ctx)
		watchdog.Stop()
		loss.Stop()
		return err
	}}, variant{"floor+context", func() error {
		call, cancel := context.WithCancelCause(ctx)
		stop := context.AfterFunc(closing, func() { cancel(context.Canceled) })
		err := fl.Lock(call)
		stop()
		cancel(nil)
		if err != nil {
			return err
		}
		return fl.Unlock(ctx)
	}})
	key := []string{"busy:{" + lockName("busy") + "}"}
	for _, us := range []int{0, 4, 8, 16, 32} {
		variants = append(variants, variant{fmt.Sprintf("busy-%d", us), func() error {
			for range 2 {
				if err := c.FCall(ctx, "fairlock_bench_busy", key, us).Err(); err != nil {
					return err
				}
			}
			return nil
		}})
	}
	for _, fn := range []string{"rw", "json", "msgpack", "hash", "packed", "split"} {
		key := []string{"busy:{" + lockName(fn) + "}"}
		n := 0
		variants = append(variants, variant{fn, func() error {
			n++
			id := strconv.Itoa(n)
			for _, step := range []string{"a", "r"} {
				if err := c.FCall(ctx, "fairlock_bench_"+fn, key, step, "QhOrGB6RQrKo9uyIgFu7VQ.1", "QhOrGB6RQrKo9uyIgFu7VQ.1#"+step+id).Err(); err != nil {
					return err
				}
			}
			return nil
		}})
	}
	// json with the words of fair_acquire's and fair_release's calls
	// (three keys, five arguments each), which it ignores: what the
	// calls' size adds to json.
	{
		keys := []string{"busy:{" + lockName("json-words") + "}", "busy:{x}:queue", "busy:{x}:deadlines"}
		keys[1], keys[2] = keys[0]+":queue", keys[0]+":deadlines"
		n := 0
		variants = append(variants, variant{"json+words", func() error {
			n++
			id := strconv.Itoa(n)
			owner := "QhOrGB6RQrKo9uyIgFu7VQ.1"
			if err := c.FCall(ctx, "fairlock_bench_json", keys, "a", owner, owner+"#a"+id, "bench-host\t12345\t",
				owner+"/"+id+" 10000 join -1 PUBLISH "+keys[0]+":wake").Err(); err != nil {
				return err
			}
			return c.FCall(ctx, "fairlock_bench_json", keys, "r", owner, owner+"#r"+id, "1764250000123456", "PUBLISH", keys[0]+":wake").Err()
		}})
	}
	origin, n := transport.EscapeJSON(transport.EncodeOrigin("bench-host", 12345, "")), 0
	variants = append(variants,
		variant{"fair-scripts", abFair(ctx, c, lua.Default(), "parts-scripts", false, &n)},
		variant{"reentrant-scripts", abReentrant(ctx, c, lua.Default(), "parts-scripts", false, &n)})
	if dir := os.Getenv("FAIRLOCK_BASE_LUA"); dir != "" {
		base, err := luaFolder(dir)
		if err != nil {
			b.Fatal(err)
		}
		variants = append(variants,
			variant{"base-fair-scripts", abFair(ctx, c, base, "parts-base", false, &n)},
			variant{"base-reentrant-scripts", abReentrant(ctx, c, base, "parts-base", false, &n)})
	}
	owner := "QhOrGB6RQrKo9uyIgFu7VQ.1"
	leanBase := transport.FairBase(lockName("parts-lean"))
	leanKeys, channel := transport.QueueKeys(leanBase), transport.Channel(leanBase)
	variants = append(variants, variant{"lean", func() error {
		n++
		id := owner + "#" + strconv.Itoa(n)
		v, err := c.FCall(ctx, "fairlock_bench_lean_acquire", leanKeys, transport.FairAcquire{
			Owner: owner, Entry: owner + "/" + strconv.Itoa(n), Request: id, Lease: 30000, Wait: 10000,
			Mode: transport.ModeJoin, Origin: origin, Publish: "PUBLISH", Channel: channel,
		}.Args()...).Slice()
		if err != nil {
			return err
		}
		return c.FCall(ctx, "fairlock_bench_lean_release", leanKeys, transport.Release{
			Owner: owner, Request: id + "r", Token: v[1].(int64), Publish: "PUBLISH", Channel: channel,
		}.Args()...).Err()
	}})
	flatBase := transport.FairBase(lockName("parts-flat"))
	flatKeys := append(transport.QueueKeys(flatBase), flatBase+":memory")
	variants = append(variants, variant{"flat", func() error {
		n++
		id := owner + "#" + strconv.Itoa(n)
		v, err := c.FCall(ctx, "fairlock_bench_flat_acquire", flatKeys, transport.FairAcquire{
			Owner: owner, Entry: owner + "/" + strconv.Itoa(n), Request: id, Lease: 30000, Wait: 10000,
			Mode: transport.ModeJoin, Origin: origin, Publish: "PUBLISH", Channel: channel,
		}.Args()...).Slice()
		if err != nil {
			return err
		}
		return c.FCall(ctx, "fairlock_bench_flat_release", flatKeys, transport.Release{
			Owner: owner, Request: id + "r", Token: v[1].(int64), Publish: "PUBLISH", Channel: channel,
		}.Args()...).Err()
	}})
	const block = 50
	took := make([][]time.Duration, len(variants))
	inRedis := make([]float64, len(variants))
	for _, v := range variants { // warm up: scripts loaded, connections made
		if err := v.pair(); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		for i, v := range variants {
			before := scriptUsec(ctx, c)
			start := time.Now()
			for range block {
				if err := v.pair(); err != nil {
					b.Fatal(err)
				}
			}
			took[i] = append(took[i], time.Since(start)/block)
			inRedis[i] += (scriptUsec(ctx, c) - before) / block
		}
	}
	for i, v := range variants {
		slices.Sort(took[i])
		b.ReportMetric(float64(took[i][len(took[i])/2].Nanoseconds())/1e3, v.name+"-µs/pair")
		b.ReportMetric(inRedis[i]/float64(b.N), v.name+"-redis-µs/pair")
	}
}

// luaFolder builds a set of scripts from the .lua files of dir (another
// version's internal/lua, from a git worktree, say).
func luaFolder(dir string) (*lua.Scripts, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.lua"))
	if err != nil || len(names) == 0 {
		return nil, fmt.Errorf("FAIRLOCK_BASE_LUA=%s: no .lua files (%v)", dir, err)
	}
	src := map[string]string{}
	for _, name := range names {
		text, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		src[filepath.Base(name)] = string(text)
	}
	return lua.MustBuild(src), nil
}
