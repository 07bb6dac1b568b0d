package lua_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

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
	type step struct{ name, from, to string }
	steps := []step{
		{"unchanged", "", ""},
		{"no layout check", "local function layout_error(s, key)", "local function layout_error(s, key) do return nil end"},
		{"no release memory r", "local function note_released(s, w, token)", "local function note_released(s, w, token) do return end"},
		{"no TTL bookkeeping", "local function commit(s, w, now, force, others)", "local function commit(s, w, now, force, others) do return save(s, w) end"},
		// Not removals: the release memory moved off the hold, to a key of
		// its own written only by a final release, as the same 4 tokens (a
		// GET and a SET) or as the newest one alone (one SET).
		{"r in its own key", "local function note_released(s, w, token)", "local function note_released(s, w, token) do " +
			"local key = KEYS[1] .. ':released'; local old = redis.call('GET', key) or ''; " +
			"redis.call('SET', key, string.format('%016d', token) .. string.sub(old, 1, 48), 'PX', 40000) return end"},
		{"r in its own key, 1 token", "local function note_released(s, w, token)", "local function note_released(s, w, token) do " +
			"redis.call('SET', KEYS[1] .. ':released', string.format('%016d', token), 'PX', 40000) return end"},
	}
	const pairs = 5000
	for _, kind := range []string{"fair", "reentrant"} {
		for _, st := range steps {
			b.Run(kind+"/"+st.name, func(b *testing.B) {
				text := helpers.String()
				if st.from != "" {
					if !strings.Contains(text, st.from) {
						b.Fatalf("the helpers no longer have %q", st.from)
					}
					text = strings.Replace(text, st.from, st.to, 1)
				}
				var sum, base float64
				for b.Loop() {
					name := redistest.Name(b)
					base += pairLoop(ctx, b, client, src, helpers.String(), kind, name+":base", pairs)
					sum += pairLoop(ctx, b, client, src, text, kind, name, pairs)
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
		acquire = fmt.Sprintf("{%[1]q, %[1]q .. '/' .. i, %[1]q .. '#a' .. i, '30000', '10000', 'join', 'host\\t1234\\t', 'PUBLISH', 'fairlock:f:{' .. N .. '}:wake', '0'}", owner)
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
  if v[1] ~= 1 then return redis.error_reply('not acquired') end
  v = release(keys, %s)
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
