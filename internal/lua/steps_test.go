package lua_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// step is a variant of a script's text: from replaced by to.
type step struct{ name, from, to string }

// removals take out, one at a time, the steps of an uncontended pair that
// keep a guarantee: the layout check (a client of another version fails
// loudly), the release memory r (a retried final release answers as its
// first run did) and the TTL bookkeeping (every key outlives every hold
// and deadline, and no more).
var removals = []step{
	{"no layout check", "local function layout_error(s, key)", "local function layout_error(s, key) do return nil end"},
	{"no release memory r", "local function note_released(s, w, token)", "local function note_released(s, w, token) do return end"},
	{"no TTL bookkeeping", "local function commit(s, w, now, force, ...)", "local function commit(s, w, now, force, ...) do return save(s, w) end"},
	// The fencing token's computation (above every token issued before and
	// Redis's clock in µs): a constant token instead.
	{"no fencing token", "local token = math.max(tonumber(s.f or '0') + 1, now_us)", "local token = 1"},
	// An election's check of its key name, in every script that may change
	// who holds a fair lock.
	{"no election check", "local function watch_leader(publish, channel)", "local function watch_leader(publish, channel) do return end"},
	// The retry answers of an acquisition: its look for its own request
	// id (q), and the write of it (fair and reentrant bodies).
	{"no acquisition retry answer", "if s.q == req then return acquired_answer(s, entry) end", ""},
}

// relocations are not removals but the alternative to the release memory r
// that the lean release proposed: a key of its own, written only by a
// final release, as the same 4 tokens (a GET and a SET) or as the newest
// one alone (one SET).
var relocations = []step{
	{"r in its own key", "local function note_released(s, w, token)", "local function note_released(s, w, token) do " +
		"local key = KEYS[1] .. ':released'; local old = redis.call('GET', key) or ''; " +
		"redis.call('SET', key, string.format('%016d', token) .. string.sub(old, 1, 48), 'PX', 40000) return end"},
	{"r in its own key, 1 token", "local function note_released(s, w, token)", "local function note_released(s, w, token) do " +
		"redis.call('SET', KEYS[1] .. ':released', string.format('%016d', token), 'PX', 40000) return end"},
}

// vary returns the sources with the one file that holds st.from changed.
func vary(src map[string]string, st step) map[string]string {
	out := maps.Clone(src)
	for name, text := range out {
		if strings.Contains(text, st.from) {
			out[name] = strings.Replace(text, st.from, st.to, 1)
			return out
		}
	}
	panic("no script has " + st.from)
}

// BenchmarkScriptSteps is where the Redis time of an uncontended
// Lock+Unlock pair goes inside the scripts, without FCALL's own cost (the
// call, its arguments, the reply): one EVAL runs the pair's two script
// bodies, with the helpers in front of them as lua.go puts them, pairs times
// in a loop, and times the loop with Redis's clock. Each sub-benchmark
// removes one step (a variant of the helpers' text) and reports the pair's
// µs, and its difference to the unchanged scripts measured just before:
//
//	go test -run XXX -bench ScriptSteps -count 5 ./internal/lua/
//
// The last two are not removals but the alternative to the release memory
// r that the lean release proposed: a key of its own, written only by a
// final release (its reads, on a retry's rare path, are left out).
//
// Only variants that leave the pair's path unchanged are measured (a hold
// the next call could not read would measure an error path instead). The
// "unchanged" sub-benchmark compares the scripts with themselves: its
// difference is the noise of the others'.
func BenchmarkScriptSteps(b *testing.B) {
	client := redistest.Real(b)
	ctx := context.Background()
	src := lua.Sources()
	var helpers strings.Builder
	for _, name := range lua.HelperFiles() {
		helpers.WriteString(src[name] + "\n")
	}
	steps := slices.Concat([]step{{"unchanged", "", ""}}, removals, relocations)
	const pairs = 5000
	for _, kind := range []string{"fair", "reentrant"} {
		for _, st := range steps {
			b.Run(kind+"/"+st.name, func(b *testing.B) {
				// A step is in the helpers, or in the scripts' bodies.
				text, bodies := helpers.String(), src
				if st.from != "" {
					switch {
					case strings.Contains(text, st.from):
						text = strings.Replace(text, st.from, st.to, 1)
					case strings.Contains(src[kind+"_acquire.lua"], st.from):
						bodies = maps.Clone(src)
						bodies[kind+"_acquire.lua"] = strings.Replace(src[kind+"_acquire.lua"], st.from, st.to, 1)
					default:
						b.Skipf("neither the helpers nor %s_acquire.lua have %q", kind, st.from)
					}
				}
				var sum, base float64
				for b.Loop() {
					name := redistest.Name(b)
					base += pairLoop(ctx, b, client, src, helpers.String(), kind, name+":base", pairs)
					sum += pairLoop(ctx, b, client, bodies, text, kind, name, pairs)
				}
				n := float64(b.N)
				b.ReportMetric(sum/n, "pair-µs")
				b.ReportMetric((sum-base)/n, "vs-unchanged-µs")
			})
		}
	}
}

// pairLoop runs pairs Lock+Unlock pairs of kind on lock name in one EVAL,
// the bodies of src behind helpers, and returns Redis's µs per pair.
func pairLoop(ctx context.Context, b *testing.B, client *redis.Client, src map[string]string, helpers, kind, name string, pairs int) float64 {
	owner := "QhOrGB6RQrKo9uyIgFu7VQ.1" // as long as a real one
	// The lock's name comes as ARGV[1] (N), so that Redis caches one
	// script per variant, not one per run.
	var keys, acquire, release string
	if kind == "fair" {
		keys = "{'fairlock:f:{' .. N .. '}', 'fairlock:f:{' .. N .. '}:queue', 'fairlock:f:{' .. N .. '}:deadlines'}"
		acquire = fmt.Sprintf("{%[1]q, %[1]q .. '/' .. i, %[1]q .. '#a' .. i, '30000', '10000', 'join', 'host\\\\t1234\\\\t', 'PUBLISH', 'fairlock:f:{' .. N .. '}:wake', '0'}", owner)
		release = fmt.Sprintf("{%[1]q, %[1]q .. '#r' .. i, string.format('%%d', v[2]), 'PUBLISH', 'fairlock:f:{' .. N .. '}:wake'}", owner)
	} else {
		keys = "{'fairlock:r:{' .. N .. '}'}"
		acquire = fmt.Sprintf("{%[1]q, %[1]q .. '#a' .. i, '30000', '0'}", owner)
		release = fmt.Sprintf("{%[1]q, %[1]q .. '#r' .. i, string.format('%%d', v[2]), 'PUBLISH', 'fairlock:r:{' .. N .. '}:wake'}", owner)
	}
	var script strings.Builder
	fmt.Fprintf(&script, "local N = ARGV[1]\nlocal KEYS, ARGV\n%s\n", helpers)
	// Each body starts as lua.go's functions do (see MustBuild): it sets
	// the per-call variables.
	for _, f := range []struct{ name, body string }{{"acquire", src[kind+"_acquire.lua"]}, {"release", src[kind+"_release.lua"]}} {
		fmt.Fprintf(&script, "local function %s(keys, args)\nKEYS, ARGV, missing, changed, announce = keys, args, false, false, nil\n%s\nend\n", f.name, f.body)
	}
	fmt.Fprintf(&script, `local keys = %s
local t0 = redis.call('TIME')
for i = 1, %d do
  local v = acquire(keys, %s)
  if type(v) == 'number' then v = {1, v, 0} end -- the uncontended path's bare token
  if v[1] ~= 1 then return redis.error_reply('not acquired') end
  v = release(keys, %s)
  if type(v) == 'number' then v = {v} end
  if v[1] ~= 1 then return redis.error_reply('not released') end
end
local t1 = redis.call('TIME')
return tostring(((t1[1] - t0[1]) * 1e6 + (t1[2] - t0[2])) / %d)
`, keys, pairs, acquire, release, pairs)
	out, err := client.Eval(ctx, script.String(), nil, name).Text()
	if err != nil {
		b.Fatal(err)
	}
	us, err := strconv.ParseFloat(out, 64)
	if err != nil {
		b.Fatal(err)
	}
	return us
}

// BenchmarkScriptCalls is the other half of BenchmarkScriptSteps: what an
// uncontended pair's two script calls cost Redis as real calls, FCALL by
// FCALL, each timed by Redis itself (SLOWLOG, every call logged), beside
// the floor (SET NX PX, and a compare-and-delete, by EVALSHA). For each
// lock it times the scripts as they are, and the same calls with bodies
// that return at once (the uncontended paths' answers: a token, 1), which leaves the call itself:
// its words, the function's entry and its reply. It reports the µs per
// call (the mean of the middle 90 % of calls) of each, and of the scripts
// with each guarantee's steps removed (removals), as BenchmarkScriptSteps
// removes them from its loop:
//
//	go test -run XXX -bench ScriptCalls -count 5 ./internal/lua/
//
// It sets slowlog-log-slower-than to 0 while it runs: give it a server of
// its own.
func BenchmarkScriptCalls(b *testing.B) {
	client := redistest.Real(b)
	ctx := context.Background()
	old, err := client.ConfigGet(ctx, "slowlog-*").Result()
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		for k, v := range old {
			client.ConfigSet(ctx, k, v)
		}
	}()
	client.ConfigSet(ctx, "slowlog-log-slower-than", "0")
	client.ConfigSet(ctx, "slowlog-max-len", "10000")
	src := lua.Sources()
	atOnce := maps.Clone(src)
	for file, answer := range map[string]string{
		"reentrant_acquire.lua": "1", "reentrant_release.lua": "1",
		"fair_acquire.lua": "1", "fair_release.lua": "1",
	} {
		atOnce[file] = "do return " + answer + " end\n" + atOnce[file]
	}
	full, bare := lua.Default(), lua.MustBuild(atOnce)
	owner := "QhOrGB6RQrKo9uyIgFu7VQ.1" // as long as a real one
	floorAcquire := redis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) and 1 or 0`)
	floorRelease := redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	const pairs = 2000
	// measure runs pairs pairs of pair and returns Redis's µs per call.
	measure := func(pair func(i int)) float64 {
		for i := range 100 {
			pair(i)
		}
		client.SlowLogReset(ctx)
		for i := range pairs {
			pair(i)
		}
		logs, err := client.SlowLogGet(ctx, 2*pairs).Result()
		if err != nil {
			b.Fatal(err)
		}
		var us []float64
		for _, l := range logs {
			if len(l.Args) > 0 && (strings.EqualFold(l.Args[0], "fcall") || strings.EqualFold(l.Args[0], "evalsha")) {
				us = append(us, float64(l.Duration.Nanoseconds())/1e3)
			}
		}
		slices.Sort(us)
		mid := us[len(us)/20 : len(us)-len(us)/20]
		sum := 0.0
		for _, x := range mid {
			sum += x
		}
		return sum / float64(len(mid))
	}
	name := redistest.Name(b)
	var mode transport.Mode
	reentrant := func(s *lua.Scripts) func(i int) {
		keys := []string{"fairlock:r:{" + name + "}", "fairlock:r:{" + name + "}:queue", "fairlock:r:{" + name + "}:deadlines"}
		return func(i int) {
			v, err := s.ReentrantAcquire.Run(ctx, client, &mode, keys, transport.ReentrantAcquire{Owner: owner, Request: owner + "#a" + strconv.Itoa(i),
				Lease: 30000, Waiter: owner + "/" + strconv.Itoa(i), Wait: 10000}.Args()...).Result()
			if err != nil {
				b.Fatal(err)
			}
			r, err := transport.DecodeReentrantAcquire(v)
			if err != nil || !r.Held {
				b.Fatalf("reentrant_acquire: %v, %v", v, err)
			}
			if err := s.ReentrantRelease.Run(ctx, client, &mode, keys, owner, owner+"#r"+strconv.Itoa(i), r.Token, "PUBLISH", keys[0]+":wake").Err(); err != nil {
				b.Fatal(err)
			}
		}
	}
	fair := func(s *lua.Scripts) func(i int) {
		keys := []string{"fairlock:f:{" + name + "}", "fairlock:f:{" + name + "}:queue", "fairlock:f:{" + name + "}:deadlines"}
		return func(i int) {
			v, err := s.FairAcquire.Run(ctx, client, &mode, keys, transport.FairAcquire{Owner: owner, Entry: owner + "/" + strconv.Itoa(i),
				Request: owner + "#a" + strconv.Itoa(i), Lease: 30000, Wait: 10000, Mode: transport.ModeJoin,
				Origin: transport.EscapeJSON("host\t1234\t"), Publish: "PUBLISH", Channel: keys[0] + ":wake"}.Args()...).Result()
			if err != nil {
				b.Fatal(err)
			}
			r, err := transport.DecodeFairAcquire(v)
			if err != nil || !r.Held {
				b.Fatalf("fair_acquire: %v, %v", v, err)
			}
			if err := s.FairRelease.Run(ctx, client, &mode, keys, owner, owner+"#r"+strconv.Itoa(i), r.Token, "PUBLISH", keys[0]+":wake").Err(); err != nil {
				b.Fatal(err)
			}
		}
	}
	floor := func(i int) {
		key, token := []string{"floor:{" + name + "}"}, owner+strconv.Itoa(i)
		if err := floorAcquire.Run(ctx, client, key, token, 30000).Err(); err != nil {
			b.Fatal(err)
		}
		if err := floorRelease.Run(ctx, client, key, token).Err(); err != nil {
			b.Fatal(err)
		}
	}
	type run struct {
		name string
		pair func(int)
	}
	runs := []run{
		{"floor", floor},
		{"reentrant-call", reentrant(bare)}, {"reentrant", reentrant(full)},
		{"fair-call", fair(bare)}, {"fair", fair(full)},
	}
	// What each guarantee's steps cost in real calls (BenchmarkScriptSteps
	// measures them in a hot loop), and the reentrant Lock's ZREM of a
	// waiter that never waited.
	for _, st := range slices.Concat(removals, []step{{"no ZREM", "if waiter and may_have_waiters(s, w, now) then redis.call('ZREM', KEYS[3], waiter) end", ""}}) {
		v := lua.MustBuild(vary(src, st))
		tag := strings.ReplaceAll(st.name, " ", "-")
		runs = append(runs, run{"reentrant-" + tag, reentrant(v)})
		if st.name != "no ZREM" {
			runs = append(runs, run{"fair-" + tag, fair(v)})
		}
	}
	sums := make([]float64, len(runs))
	for b.Loop() {
		for i, r := range runs {
			sums[i] += measure(r.pair)
		}
	}
	for i, r := range runs {
		b.ReportMetric(sums[i]/float64(b.N), r.name+"-µs/call")
	}
}
