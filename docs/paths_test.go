package docs_test

import (
	"bufio"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// architecture.md's path tables are made from the code, so that they cannot
// go stale: which Go functions a fair.Mutex's Lock and Unlock run, as a
// coverage build counts them. TestArchitecturePathTables builds this
// package's tests with coverage of the whole module, runs
// TestPathWorkload in it five times (each a workload below, against a real
// Redis), and takes each path as the blocks whose count grew by at least
// half pathReps between two workloads: run once by each of the pathReps
// calls measured. The owner's background work (a presence PING every 50
// ms while it holds, on a timer of its own) moves a count by as much as
// the workloads' lengths differ: each owner holds a lock throughout every
// workload, so that it runs at one rate, which the idle workload
// measures, and each block's growth is taken less that rate times the
// difference in length. It then checks the tables between the markers in
// architecture.md against what it made:
//
//	FAIRLOCK_UPDATE_PATHS=1 go test -run TestArchitecturePathTables ./docs/
//
// rewrites them.

const (
	pathReps     = 20
	idleFor      = time.Second
	pathsBegin   = "<!-- paths: made by TestArchitecturePathTables (docs/paths_test.go); do not edit by hand -->"
	pathsEnd     = "<!-- end of paths -->"
	workloadEnv  = "FAIRLOCK_PATH_WORKLOAD"
	elapsedEnv   = "FAIRLOCK_PATH_ELAPSED" // where a workload writes how long it ran, in seconds
	updatePaths  = "FAIRLOCK_UPDATE_PATHS"
	modulePrefix = "github.com/fairlock/fairlock/"
)

// TestPathWorkload is one workload of TestArchitecturePathTables, run only
// in the coverage build it makes (FAIRLOCK_PATH_WORKLOAD set):
//
//   - setup: two owners made as fairlock.NewOwner makes them (a presence,
//     the real clock), each holding a lock of its own throughout, and
//     pathReps fair handles on each, one on a lock of its own and one
//     waiting for it, each of which has made one Lock and Unlock (a
//     long-lived handle, its scripts loaded);
//   - lock: setup, then each first handle's Lock on context.Background,
//     the lock free;
//   - idle: lock, then a pause of idleFor, in which only the owner's
//     background work runs (the presence PING while it holds);
//   - unlock: lock, then each of those holds' Unlock, with nobody waiting;
//   - queued: setup, then for each lock: its first handle's Lock, the
//     second's Lock, which queues, the first's Unlock once Redis has the
//     second in the queue and listening, which hands the lock to it.
//
// Each ends with a few polls' pause, in which what its calls left to do a
// poll later is done.
func TestPathWorkload(t *testing.T) {
	workload := os.Getenv(workloadEnv)
	if workload == "" {
		t.Skip("a workload of TestArchitecturePathTables, run in its coverage build")
	}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: os.Getenv("FAIRLOCK_REDIS_ADDR")})
	defer func() { _ = c.Close() }()
	owner := func() *fairlock.Owner {
		o, err := fairlock.NewOwner(redis.NewClient(&redis.Options{Addr: c.Options().Addr}))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	holders, waiters := owner(), owner()
	prefix := fmt.Sprintf("paths-%d-", time.Now().UnixNano())
	// Each owner holds a lock throughout, so that it PINGs at one rate from
	// here to the end, whatever the workload: the background that
	// TestArchitecturePathTables takes off in proportion to the time.
	for i, o := range []*fairlock.Owner{holders, waiters} {
		m, err := fair.New(o, prefix+"steady-"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	var first, second []*fair.Mutex
	var bases []string // made here, so that every workload makes them
	for i := range pathReps {
		name := prefix + strconv.Itoa(i)
		bases = append(bases, transport.FairBase(name))
		for _, side := range []struct {
			o  *fairlock.Owner
			to *[]*fair.Mutex
		}{{holders, &first}, {waiters, &second}} {
			m, err := fair.New(side.o, name)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			*side.to = append(*side.to, m)
		}
	}
	switch workload {
	case "setup":
	case "lock", "idle", "unlock":
		for _, m := range first {
			if err := m.Lock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if workload == "idle" {
			time.Sleep(idleFor)
		}
		if workload == "unlock" {
			for _, m := range first {
				if err := m.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
	case "queued":
		for i, base := range bases {
			if err := first[i].Lock(ctx); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- second[i].Lock(ctx) }()
			// Queued and listening on its inbox (the lock's channel,
			// ":<client>"), so that the Unlock hands it the lock.
			for {
				queued, err := c.LLen(ctx, base+":queue").Result()
				if err != nil {
					t.Fatal(err)
				}
				inboxes, err := c.PubSubChannels(ctx, base+":wake:*").Result()
				if err != nil {
					t.Fatal(err)
				}
				if queued == 1 && len(inboxes) > 0 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			if err := first[i].Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	default:
		t.Fatalf("%s=%q: no such workload", workloadEnv, workload)
	}
	// What the calls left to do a poll later (a hand-off's watch, a presence
	// poll) is done before the counts are written, whatever the machine's
	// speed: a few polls.
	time.Sleep(4 * core.PresencePoll)
	took := strconv.FormatFloat(time.Since(start).Seconds(), 'f', 6, 64)
	if err := os.WriteFile(os.Getenv(elapsedEnv), []byte(took), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestArchitecturePathTables(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the module with coverage")
	}
	addr := redistest.Real(t).Options().Addr
	dir := t.TempDir()
	bin := filepath.Join(dir, "paths.test")
	build := exec.Command("go", "test", "-c", "-o", bin, "-covermode=count", "-coverpkg="+modulePrefix+"...", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the coverage binary: %v\n%s", err, out)
	}
	runs := map[string]workloadRun{}
	for _, w := range []string{"setup", "lock", "idle", "unlock", "queued"} {
		profile, elapsed := filepath.Join(dir, w+".cov"), filepath.Join(dir, w+".elapsed")
		run := exec.Command(bin, "-test.run=^TestPathWorkload$", "-test.count=1", "-test.coverprofile="+profile)
		run.Env = append(os.Environ(), workloadEnv+"="+w, elapsedEnv+"="+elapsed, "FAIRLOCK_REDIS_ADDR="+addr)
		if out, err := run.CombinedOutput(); err != nil {
			t.Fatalf("workload %s: %v\n%s", w, err, out)
		}
		took, err := os.ReadFile(elapsed)
		if err != nil {
			t.Fatal(err)
		}
		r := workloadRun{counts: readProfile(t, profile)}
		if r.seconds, err = strconv.ParseFloat(string(took), 64); err != nil {
			t.Fatal(err)
		}
		runs[w] = r
	}
	funcs := moduleFuncs(t)
	// The owners' background work, each block's count a second: what idle
	// added to lock in the time it took longer.
	rate := map[covBlock]float64{}
	for b, n := range runs["idle"].counts {
		rate[b] = float64(n-runs["lock"].counts[b]) / (runs["idle"].seconds - runs["lock"].seconds)
	}
	free, freeRan := onPath(runs["lock"], runs["setup"], rate, funcs)
	unlock, unlockRan := onPath(runs["unlock"], runs["lock"], rate, funcs)
	whole, queuedRan := onPath(runs["queued"], runs["setup"], rate, funcs)
	queued := slices.DeleteFunc(slices.Clone(whole), func(f fn) bool { return slices.Contains(free, f) || slices.Contains(unlock, f) })
	var dirs []string
	for _, f := range slices.Concat(free, unlock, whole) {
		if d := filepath.Dir(f.file); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	typed := checkModule(t, dirs)
	made := pathsBegin + "\n\n" +
		pathTable("A free Lock", "A `fair.Mutex.Lock` on `context.Background` that finds the lock free and nobody waiting, from a handle that has locked before", free, nil) +
		readingLine("Following it", typed.read(free, freeRan)) +
		ctxLine(typed.ctxStops(free, freeRan, "fair.Mutex.Lock")) +
		pathTable("What a Lock that queues adds", "The functions a Lock that waits for a holder, and the holder's Unlock that hands the lock to it, run beyond the free Lock's and the plain Unlock's", queued, free) +
		readingLine("Following the whole of that Lock and Unlock, the free Lock's part included", typed.read(whole, queuedRan)) +
		pathTable("An Unlock", "The `Unlock` of that free Lock's hold, nobody waiting", unlock, nil) +
		readingLine("Following it", typed.read(unlock, unlockRan)) +
		pathsEnd
	const doc = "architecture.md"
	text, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(text), pathsBegin)
	_, after, ok2 := strings.Cut(rest, pathsEnd)
	if !ok1 || !ok2 {
		t.Fatalf("%s has no paths markers (%q ... %q)", doc, pathsBegin, pathsEnd)
	}
	if os.Getenv(updatePaths) != "" {
		if err := os.WriteFile(doc, []byte(before+made+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if had := pathsBegin + rest[:len(rest)-len(after)]; had != made {
		t.Errorf("%s's path tables are stale (%s=1 go test -run TestArchitecturePathTables ./docs/ rewrites them):\n%s",
			doc, updatePaths, lineDiff(had, made))
	}
}

// lineDiff lists the lines only in had ("-") and only in made ("+").
func lineDiff(had, made string) string {
	a, b := strings.Split(had, "\n"), strings.Split(made, "\n")
	var out []string
	for _, l := range a {
		if !slices.Contains(b, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range b {
		if !slices.Contains(a, l) {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

// covBlock is one counted block of a coverage profile: its file in the module
// and its first and last lines.
type covBlock struct {
	file        string
	start, stop int
}

// readProfile returns the counts of a coverage profile's blocks (summed:
// a profile may list a block once per package that covered it).
func readProfile(t *testing.T, path string) map[covBlock]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	out := map[covBlock]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "mode:") {
			continue
		}
		// github.com/fairlock/fairlock/mutex.go:23.45,25.3 2 10
		where, nums, _ := strings.Cut(line, " ")
		file, span, _ := strings.Cut(where, ":")
		from, to, _ := strings.Cut(span, ",")
		fields := strings.Fields(nums)
		if len(fields) != 2 {
			t.Fatalf("%s: a line not in the profile's form: %q", path, line)
		}
		startLine, _, _ := strings.Cut(from, ".")
		stopLine, _, _ := strings.Cut(to, ".")
		b := covBlock{file: strings.TrimPrefix(file, modulePrefix)}
		b.start, _ = strconv.Atoi(startLine)
		b.stop, _ = strconv.Atoi(stopLine)
		n, _ := strconv.Atoi(fields[1])
		out[b] += n
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// fn is a function or method of the module, signature to closing brace.
type fn struct {
	file, name  string
	start, stop int
}

func (f fn) lines() int { return f.stop - f.start + 1 }

// pkg is f's package, as its directory in the module.
func (f fn) pkg() string {
	if d := filepath.Dir(f.file); d != "." {
		return d
	}
	return "fairlock"
}

// qualified is f's name as a reader finds it: after its package's name
// (core.Mutex.Begin), since two packages may have types of one name.
func (f fn) qualified() string { return filepath.Base(f.pkg()) + "." + f.name }

// moduleFuncs returns every function and method declared in the module's
// own packages (not its tests, not the nested modules), by file.
func moduleFuncs(t *testing.T) map[string][]fn {
	t.Helper()
	out := map[string][]fn{}
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || exists(filepath.Join(path, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			d, ok := decl.(*ast.FuncDecl)
			if !ok || d.Body == nil {
				continue
			}
			name := d.Name.Name
			if d.Recv != nil && len(d.Recv.List) == 1 {
				name = receiverType(d.Recv.List[0].Type) + "." + name
			}
			out[filepath.ToSlash(rel)] = append(out[filepath.ToSlash(rel)], fn{
				file: filepath.ToSlash(rel), name: name,
				start: fset.Position(d.Pos()).Line, stop: fset.Position(d.End()).Line,
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// receiverType is the name of a method's receiver type, without its
// pointer or type parameters.
func receiverType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiverType(e.X)
	case *ast.IndexExpr:
		return receiverType(e.X)
	case *ast.IndexListExpr:
		return receiverType(e.X)
	case *ast.Ident:
		return e.Name
	}
	return "?"
}

// workloadRun is what one workload's run counted, and how long it took.
type workloadRun struct {
	counts  map[covBlock]int
	seconds float64
}

// onPath returns the functions holding a block whose count grew by at
// least half pathReps from before to after, less what the background's
// rate makes of the time after took longer, in file and line order, and
// those blocks.
func onPath(after, before workloadRun, rate map[covBlock]float64, funcs map[string][]fn) ([]fn, map[covBlock]bool) {
	var out []fn
	ran := map[covBlock]bool{}
	for b, n := range after.counts {
		grew := float64(n-before.counts[b]) - rate[b]*(after.seconds-before.seconds)
		if grew < pathReps/2 {
			continue
		}
		ran[b] = true
		for _, f := range funcs[b.file] {
			if f.start <= b.start && b.stop <= f.stop && !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	slices.SortFunc(out, func(a, b fn) int {
		if c := strings.Compare(a.file, b.file); c != 0 {
			return c
		}
		return a.start - b.start
	})
	return out, ran
}

// pathTable renders one path: its measures, then a row per file with the
// functions it runs there and their lines. Files already on base are
// marked, so that a reader sees where the path leaves what it knows.
func pathTable(title, what string, path, base []fn) string {
	var b strings.Builder
	files, pkgs, lines := map[string]bool{}, map[string]bool{}, 0
	var order []string
	byFile := map[string][]fn{}
	for _, f := range path {
		if !files[f.file] {
			order = append(order, f.file)
		}
		files[f.file], pkgs[f.pkg()] = true, true
		byFile[f.file] = append(byFile[f.file], f)
		lines += f.lines()
	}
	fmt.Fprintf(&b, "#### %s\n\n%s: %d functions, %d lines of Go (each function from its signature to its closing brace), in %d files of %d packages.\n\n",
		title, what, len(path), lines, len(files), len(pkgs))
	b.WriteString("| file | functions run | lines |\n|---|---|---|\n")
	for _, file := range order {
		var names []string
		n := 0
		for _, f := range byFile[file] {
			names = append(names, "`"+f.qualified()+"`")
			n += f.lines()
		}
		mark := ""
		if slices.ContainsFunc(base, func(f fn) bool { return f.file == file }) {
			mark = " (also on the free Lock's path)"
		}
		fmt.Fprintf(&b, "| `%s`%s | %s | %d |\n", file, mark, strings.Join(names, ", "), n)
	}
	b.WriteString("\n")
	return b.String()
}

// readingLine renders what a reader meets on a path.
func readingLine(lead string, r pathReading) string {
	names := make([]string, len(r.types))
	for i, n := range r.types {
		names[i] = "`" + n + "`"
	}
	return fmt.Sprintf("%s, a reader meets %d of the module's named types (%s), and %d calls through an interface, in the lines it runs.\n\n",
		lead, len(r.types), strings.Join(names, ", "), r.interfaces)
}

// ctxLine renders where the caller's ctx goes on a path (typedModule.ctxStops).
func ctxLine(stops, files, names []string, returns int) string {
	distinct := map[string]bool{}
	for _, f := range stops {
		distinct[f] = true
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = "`" + n + "`"
	}
	return fmt.Sprintf("The caller's ctx, followed from `fair.Mutex.Lock` through every call the path runs that passes it (or the `core.Turn` that carries it), makes %d stops in %d files, under %d names (%s: the parameters it arrives in and the expressions it is passed as). Going down those calls it comes back %d times to a file it had left; counting the reader's return to the caller's file after each call, %d times.\n\n",
		len(stops), len(distinct), len(names), strings.Join(quoted, ", "), comebacks(stops), returns)
}
