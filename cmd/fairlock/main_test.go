package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { redistest.Exit(m) }

func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestDemoReportsTheFairLockInOrder(t *testing.T) {
	redistest.NoLeaks(t)
	out, _, err := runCLI(t, "demo", "-workers", "4", "-jobs", "30", "-hold", "5ms", "-interval", "2ms")
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	fairRow := regexp.MustCompile(`(?m)^\s*fair\s+30\s+0\s`)
	if !fairRow.MatchString(out) {
		t.Fatalf("report does not show 30 jobs served by the fair lock with 0 order violations:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^\s*reentrant\s+30\s+\d+\s`).MatchString(out) {
		t.Fatalf("report has no reentrant row with 30 jobs:\n%s", out)
	}
	for _, col := range []string{"order violations", "wait p50", "wait p99", "What the numbers say:", "price of order", "the jobs it starved"} {
		if !strings.Contains(out, col) {
			t.Fatalf("report lacks %q:\n%s", col, out)
		}
	}
	// Not a terminal: no progress redrawn with carriage returns, one line
	// per lock with its final count.
	if strings.Contains(out, "\r") {
		t.Fatalf("output to a pipe holds carriage returns:\n%q", out)
	}
	for _, kind := range []string{"fair", "reentrant"} {
		if !regexp.MustCompile(`(?m)^` + kind + `\s+30/30 jobs run$`).MatchString(out) {
			t.Fatalf("output lacks the line %q:\n%s", kind+" 30/30 jobs run", out)
		}
	}
}

// "fairlock demo -h" and "fairlock inspect -h" print their usage and exit
// 0, as "fairlock -h" does: asking for help is not an error. The test
// binary runs main itself, in a child process.
func TestHelpExitsZero(t *testing.T) {
	if args := os.Getenv("FAIRLOCK_TEST_MAIN"); args != "" {
		os.Args = append([]string{"fairlock"}, strings.Fields(args)...)
		main()
		os.Exit(0) // main returned: exit status 0
	}
	for _, args := range []string{"-h", "demo -h", "inspect -h", "ls -h"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelpExitsZero$")
		cmd.Env = append(os.Environ(), "FAIRLOCK_TEST_MAIN="+args)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Usage") {
			t.Errorf("fairlock %s: %v\n%s", args, err, out)
		}
	}
}

// With -permits 3 the jobs run under a fair semaphore: all served, in
// submission order, and never more than 3 at once (and, with 6 workers
// holding each job 20 ms, 3 at once at some point).
func TestDemoWithPermitsRunsKAtATimeInOrder(t *testing.T) {
	redistest.NoLeaks(t)
	out, _, err := runCLI(t, "demo", "-permits", "3", "-workers", "6", "-jobs", "30", "-hold", "20ms", "-interval", "1ms")
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^\s*semaphore\s+30\s+0\s+3\s`).MatchString(out) {
		t.Fatalf("report does not show 30 jobs served by the semaphore, 0 order violations, 3 at most at once:\n%s", out)
	}
	if strings.Contains(out, "reentrant") {
		t.Fatalf("a -permits run compares with the reentrant lock:\n%s", out)
	}
}

func TestInspectPrintsHolderAndQueue(t *testing.T) {
	redistest.NoLeaks(t)
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()
	holder, _ := fair.New(redistest.Owner(client), "reports", fair.WithLabel("nightly"))
	waiter, _ := fair.New(redistest.Owner(client), "reports", fair.WithLabel("adhoc"))
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- waiter.Lock(wctx) }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		st, _ := fair.Inspect(ctx, client, "reports")
		if len(st.Queue) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("waiter never queued")
		}
		time.Sleep(time.Millisecond)
	}
	out, _, err := runCLI(t, "inspect", "-redis", mr.Addr(), "reports")
	cancel()
	<-done
	_ = holder.Unlock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`fair lock "reports"`, "HOLDER", "nightly", "WAITER", "adhoc", "waiting"} {
		if !strings.Contains(out, want) {
			t.Fatalf("inspect output lacks %q:\n%s", want, out)
		}
	}
}

func TestInspectPrintsASemaphore(t *testing.T) {
	redistest.NoLeaks(t)
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()
	s, _ := fair.NewSemaphore(redistest.Owner(client), "encoders", 3, fair.WithLabel("encoder"))
	p, err := s.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)
	out, _, err := runCLI(t, "inspect", "-redis", mr.Addr(), "-kind", "semaphore", "encoders")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`semaphore "encoders": 2 of 3 permits in use`, "HOLDER", "encoder", "PERMITS", "queue: empty"} {
		if !strings.Contains(out, want) {
			t.Fatalf("inspect output lacks %q:\n%s", want, out)
		}
	}
	rw, _ := fair.NewRWMutex(redistest.Owner(client), "catalog", fair.WithLabel("editor"))
	if err := rw.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer rw.Unlock(ctx)
	out, _, err = runCLI(t, "inspect", "-redis", mr.Addr(), "-kind", "rw", "catalog")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`read-write lock "catalog"`, "editor", "write"} {
		if !strings.Contains(out, want) {
			t.Fatalf("inspect -kind rw output lacks %q:\n%s", want, out)
		}
	}
}

// The demo and inspect run on a cluster of 3 masters and behind Sentinel,
// named by -cluster or -sentinel with -master.
func TestDemoAndInspectOnClusterAndSentinel(t *testing.T) {
	for _, d := range []redistest.Deployment{redistest.Cluster3, redistest.Sentinel} {
		t.Run(string(d), func(t *testing.T) {
			redistest.NoLeaks(t)
			at := []string{"-cluster", strings.Join(redistest.Addrs(t, d), ",")}
			if d == redistest.Sentinel {
				at = []string{"-sentinel", strings.Join(redistest.Addrs(t, d), ","), "-master", redistest.SentinelMaster}
			}
			out, _, err := runCLI(t, append(append([]string{"demo"}, at...), "-workers", "4", "-jobs", "20", "-hold", "2ms", "-interval", "1ms")...)
			if err != nil {
				t.Fatalf("demo: %v\n%s", err, out)
			}
			if !regexp.MustCompile(`(?m)^\s*fair\s+20\s+0\s`).MatchString(out) {
				t.Fatalf("report does not show 20 jobs served by the fair lock in order:\n%s", out)
			}
			if !strings.Contains(out, "watch the queue: go run ./cmd/fairlock inspect "+strings.Join(at, " ")) {
				t.Fatalf("the demo does not say how to inspect its queue here:\n%s", out)
			}

			client := redistest.Client(t, d)
			name := redistest.Name(t)
			m, err := fair.New(redistest.Owner(client), name, fair.WithLabel("holder"))
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Lock(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer m.Unlock(context.Background())
			out, _, err = runCLI(t, append(append([]string{"inspect"}, at...), name)...)
			if err != nil || !strings.Contains(out, "holder") {
				t.Fatalf("inspect: %v\n%s", err, out)
			}
		})
	}
}

func TestCLIErrors(t *testing.T) {
	cases := map[string][]string{
		"no command":       {},
		"unknown command":  {"frobnicate"},
		"inspect no redis": {"inspect", "x"},
		"inspect no name":  {"inspect", "-redis", "127.0.0.1:1"},
		"inspect bad name": {"inspect", "-redis", "127.0.0.1:1", "a{b}"},
		"inspect bad kind": {"inspect", "-redis", "127.0.0.1:1", "-kind", "queue", "x"},
		"demo one worker":  {"demo", "-workers", "1"},
		"demo no jobs":     {"demo", "-jobs", "0"},
		"demo no permits":  {"demo", "-permits", "0"},
		"demo stray arg":   {"demo", "extra"},
		"demo bad metrics": {"demo", "-metrics", "256.0.0.1:99999"},
		"demo bad redis":   {"demo", "-redis", "127.0.0.1:1"},
		"demo two targets": {"demo", "-redis", "127.0.0.1:1", "-cluster", "127.0.0.1:2"},
		"inspect two":      {"inspect", "-cluster", "127.0.0.1:1", "-sentinel", "127.0.0.1:2", "x"},
		"sentinel no name": {"inspect", "-sentinel", "127.0.0.1:1", "-master", "", "x"},
		"ls no redis":      {"ls"},
		"ls stray arg":     {"ls", "-redis", "127.0.0.1:1", "x"},
		"ls bad match":     {"ls", "-redis", "127.0.0.1:1", "-match", "["},
		"inspect watch":    {"inspect", "-redis", "127.0.0.1:1", "-watch", "1ms", "x"},
	}
	for name, args := range cases {
		_, _, err := runCLI(t, args...)
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if line := errorLine(err); !strings.HasPrefix(line, "fairlock: ") || strings.HasPrefix(line, "fairlock: fairlock:") {
			t.Errorf("%s prints %q: want one \"fairlock: \" in front", name, line)
		}
	}
	for _, cmd := range []string{"demo", "inspect", "ls"} {
		_, stderr, err := runCLI(t, cmd, "-h")
		if !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr, "Usage: fairlock "+cmd) {
			t.Errorf("%s -h: %v, %q", cmd, err, stderr)
		}
	}
}
