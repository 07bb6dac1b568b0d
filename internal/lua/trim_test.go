package lua

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// The helper files keep the shape evalText relies on: every line at column
// 0 is a "local" declaration, an "end", a comment or blank, so that each
// declaration runs from its "local" line to the next; and the declarations
// declsOf finds, joined, are the file again (its comments after the last
// one aside): no line is lost or moved.
func TestHelperFilesSplitIntoTheirDeclarations(t *testing.T) {
	src := Sources()
	for _, name := range helperFiles {
		text := src[name] + "\n"
		for i, line := range strings.Split(text, "\n") {
			if line == "" || line == "end" || strings.HasPrefix(line, "local ") || strings.HasPrefix(line, "--") ||
				line[0] == ' ' || line[0] == '\t' {
				continue
			}
			t.Errorf("%s:%d: %q: a top-level line that is not a local declaration, an end or a comment", name, i+1, line)
		}
		decls := declsOf(text)
		var joined strings.Builder
		for _, d := range decls {
			if len(d.names) == 0 || d.names[0] == "" {
				t.Errorf("%s: a declaration with no name: %q", name, d.text)
			}
			joined.WriteString(d.text)
		}
		before, after, ok := strings.Cut(text, joined.String())
		if !ok {
			t.Errorf("%s: its declarations, joined, are not a run of the file", name)
		} else if !onlyComments(before) || !onlyComments(after) {
			t.Errorf("%s: code outside its declarations: before them %q, after them %q", name, before, after)
		}
	}
}

func onlyComments(s string) bool {
	for _, line := range strings.Split(s, "\n") {
		if line != "" && !strings.HasPrefix(line, "--") {
			return false
		}
	}
	return true
}

// Each script's EVAL text has every helper it names, and those they name:
// a name a kept declaration or the body uses that a helper declares is
// declared in the text. A text that lacked one would fail only when its
// path ran.
func TestEvalTextsCarryWhatTheyCall(t *testing.T) {
	src := Sources()
	decls := helperDecls(src)
	declaredBy := map[string]bool{}
	for _, d := range decls {
		for _, n := range d.names {
			declaredBy[n] = true
		}
	}
	for name, body := range src {
		if isHelper(name) {
			continue
		}
		text := evalText(decls, body)
		have := map[string]bool{}
		for _, d := range declsOf(strings.TrimSuffix(text, body)) {
			for _, n := range d.names {
				have[n] = true
			}
		}
		for n := range identifiers(text) {
			if declaredBy[n] && !have[n] {
				t.Errorf("%s: its EVAL text uses %s, which it does not declare", name, n)
			}
		}
	}
	// A script that names no helper gets none; fair_acquire gets take_free
	// and what it calls, not the semaphore's permits.
	if text := evalText(decls, "return 1\n"); text != "return 1\n" {
		t.Errorf("a script that calls no helper got %d bytes of them", len(text)-len("return 1\n"))
	}
	fa := evalText(decls, src["fair_acquire.lua"])
	if !strings.Contains(fa, "local function take_free(") || strings.Contains(fa, "local function permit_holds(") {
		t.Errorf("fair_acquire's EVAL text: take_free kept %v, the permits' helpers dropped %v",
			strings.Contains(fa, "local function take_free("), !strings.Contains(fa, "local function permit_holds("))
	}
}

func isHelper(name string) bool {
	for _, h := range helperFiles {
		if h == name {
			return true
		}
	}
	return false
}

// Every script's EVAL text compiles: SCRIPT LOAD parses it (miniredis's
// Lua 5.1, as Redis's; this package's tests cannot use redistest, which
// imports it).
func TestEvalTextsCompile(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	src := Sources()
	decls := helperDecls(src)
	for name, body := range src {
		if isHelper(name) {
			continue
		}
		if err := c.ScriptLoad(context.Background(), evalText(decls, body)).Err(); err != nil {
			t.Errorf("%s: SCRIPT LOAD of its EVAL text: %v", name, err)
		}
	}
}

// BenchmarkEvalTextDefinitions weighs what an EVALSHA call pays to define
// the helpers its text carries, before its body runs: fair_acquire's and
// fair_release's texts with a body that returns at once, carrying every
// helper or only those each calls, beside a bare "return 1". Each rep runs
// every variant in turn, 500 calls each; the figures are Redis's µs per
// call (INFO commandstats), averaged over the reps:
//
//	FAIRLOCK_REDIS_ADDR=127.0.0.1:6379 go test -run XXX -bench EvalTextDefinitions -benchtime 20x ./internal/lua/
//
// It resets the server's command statistics: give it a Redis that nothing
// else uses.
func BenchmarkEvalTextDefinitions(b *testing.B) {
	addr := os.Getenv("FAIRLOCK_REDIS_ADDR")
	if addr == "" {
		b.Skip("FAIRLOCK_REDIS_ADDR not set")
	}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = c.Close() }()
	src := Sources()
	decls := helperDecls(src)
	var lib strings.Builder
	for _, n := range helperFiles {
		lib.WriteString(src[n] + "\n")
	}
	returns := func(script string) string { return "do return 1 end\n" + src[script] }
	variants := []struct{ name, text string }{
		{"bare", "return 1"},
		{"fair_acquire-every-helper", lib.String() + returns("fair_acquire.lua")},
		{"fair_acquire-its-helpers", evalText(decls, returns("fair_acquire.lua"))},
		{"fair_release-every-helper", lib.String() + returns("fair_release.lua")},
		{"fair_release-its-helpers", evalText(decls, returns("fair_release.lua"))},
	}
	shas := make([]string, len(variants))
	for i, v := range variants {
		var err error
		if shas[i], err = c.ScriptLoad(ctx, v.text).Result(); err != nil {
			b.Fatal(err)
		}
	}
	usec := make([]float64, len(variants))
	for b.Loop() {
		for i := range variants {
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			for range 500 {
				if err := c.EvalSha(ctx, shas[i], []string{"fairlock-bench-defs"}).Err(); err != nil {
					b.Fatal(err)
				}
			}
			stats, err := c.Info(ctx, "commandstats").Result()
			if err != nil {
				b.Fatal(err)
			}
			_, rest, _ := strings.Cut(stats, "cmdstat_evalsha:")
			_, rest, _ = strings.Cut(rest, "usec_per_call=")
			v, _ := strconv.ParseFloat(strings.Split(rest, ",")[0], 64)
			usec[i] += v
		}
	}
	for i, v := range variants {
		b.ReportMetric(usec[i]/float64(b.N), v.name+"-µs/call")
	}
}
