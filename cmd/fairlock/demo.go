package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/redis/go-redis/v9"
)

// locker is what the demo needs of either lock.
type locker interface {
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
	Token() int64
}

type demoConfig struct {
	target   target
	workers  int
	jobs     int
	hold     time.Duration
	interval time.Duration
	permits  int
	metrics  string // -metrics: where to serve /metrics, "" for nowhere
	meter    *meter // with -metrics, every handle's observer
}

// report is one lock's run.
type report struct {
	lock       string
	served     int
	violations int
	waits      []time.Duration
	elapsed    time.Duration
	most       int // jobs running at once, at most
}

// semLocker runs a worker's jobs under a fair semaphore, one permit each.
type semLocker struct {
	s *fair.Semaphore
	p *fair.Permit
}

func (l *semLocker) Lock(ctx context.Context) (err error) {
	l.p, err = l.s.Acquire(ctx, 1)
	return err
}

func (l *semLocker) Unlock(ctx context.Context) error { return l.p.Release(ctx) }

func (l *semLocker) Token() int64 { return l.p.Token() }

func demo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c demoConfig
	c.target.register(fs) // none: an embedded miniredis
	fs.IntVar(&c.workers, "workers", 8, "workers, each a handle on its own client, as if on its own machine")
	fs.IntVar(&c.jobs, "jobs", 120, "jobs submitted per lock")
	fs.DurationVar(&c.hold, "hold", 15*time.Millisecond, "how long each job holds the lock")
	fs.DurationVar(&c.interval, "interval", 5*time.Millisecond, "time between two submissions")
	fs.IntVar(&c.permits, "permits", 1, "jobs that may run at once: above 1, the jobs run under a fair semaphore")
	fs.StringVar(&c.metrics, "metrics", "", "serve Prometheus metrics at http://`host:port`/metrics while the demo runs (raise -jobs to look longer)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, `Usage: fairlock demo [flags]

Workers submit jobs that must run one at a time, in submission order. The demo
runs them under the fair lock, then under the reentrant lock, and reports jobs
served, order violations (a job granted the lock before a job submitted earlier,
by the order of the grants' fencing tokens) and the
wait from submission to start, side by side. With -permits K above 1, up to K
jobs run at once, still started in submission order, under a fair semaphore.`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() != 0:
		fs.Usage()
		return fmt.Errorf("demo takes no arguments, got %q", fs.Args())
	case c.workers < 2:
		return fmt.Errorf("-workers must be at least 2, got %d", c.workers)
	case c.jobs < 1:
		return fmt.Errorf("-jobs must be at least 1, got %d", c.jobs)
	case c.permits < 1 || c.permits > fair.MaxPermits:
		return fmt.Errorf("-permits must be from 1 to %d, got %d", fair.MaxPermits, c.permits)
	case c.hold < 0 || c.interval < 0:
		return errors.New("-hold and -interval must not be negative")
	}

	real, err := c.target.given()
	if err != nil {
		return err
	}
	if !real {
		mr := miniredis.NewMiniRedis()
		if err := mr.Start(); err != nil {
			return fmt.Errorf("starting the embedded miniredis: %w", err)
		}
		defer mr.Close()
		mr.ClockTTL(true) // key expiry follows the wall clock
		c.target.redis = mr.Addr()
		fmt.Fprintf(stdout, "embedded miniredis on %s (use -redis, -cluster or -sentinel for real Redis)\n", mr.Addr())
	} else {
		probe := c.target.client()
		err := probe.Ping(ctx).Err()
		_ = probe.Close()
		if err != nil {
			return fmt.Errorf("cannot reach %s: %w", &c.target, err)
		}
		fmt.Fprintf(stdout, "%s\n", &c.target)
	}
	if c.metrics != "" {
		c.meter = newMeter()
		mctx, stop := context.WithCancel(ctx)
		defer stop()
		addr, err := serveMetrics(mctx, c.metrics, c.meter)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "metrics: http://%s/metrics (docs/observability.md says what each means)\n", addr)
	}
	name := fmt.Sprintf("demo-%d", time.Now().UnixNano())
	kinds := []string{"fair", "reentrant"}
	if c.permits > 1 {
		kinds = []string{"semaphore"}
		fmt.Fprintf(stdout, "%d workers, %d jobs, %d at a time, each running %v, one submitted every %v\n", c.workers, c.jobs, c.permits, c.hold, c.interval)
	} else {
		fmt.Fprintf(stdout, "%d workers, %d jobs per lock, each holding %v, one submitted every %v\n", c.workers, c.jobs, c.hold, c.interval)
		if real {
			fmt.Fprintf(stdout, "watch the queue: go run ./cmd/fairlock inspect %s %s\n", c.target.flags(), name)
		}
	}
	fmt.Fprintln(stdout)

	var reports []report
	for _, kind := range kinds {
		r, err := runJobs(ctx, c, name, kind, stdout)
		if err != nil {
			return err
		}
		reports = append(reports, r)
	}
	printReport(stdout, reports)
	return nil
}

// runJobs submits c.jobs jobs to c.workers workers, one lock kind.
func runJobs(ctx context.Context, c demoConfig, name, kind string, out io.Writer) (report, error) {
	type job struct {
		id        int
		submitted time.Time
	}
	var (
		mu       sync.Mutex
		started  = make([]bool, c.jobs)
		tokens   = make([]int64, c.jobs) // each job's grant, in grant order
		running  int                     // jobs running now
		rep      = report{lock: kind}
		firstErr error
	)
	type worker struct {
		label string
		inbox chan job
	}
	free := make(chan worker, c.workers)
	var wg sync.WaitGroup
	for w := 0; w < c.workers; w++ {
		client := c.target.client()
		defer func() { _ = client.Close() }()
		owner, err := fairlock.NewOwner(client)
		if err != nil {
			return rep, err
		}
		defer func() { _ = owner.Close(context.WithoutCancel(ctx)) }() // before the client's
		me := worker{label: fmt.Sprintf("demo worker %d", w), inbox: make(chan job)}
		var l locker
		fopts := []fair.Option{fair.WithLabel(me.label)}
		var ropts []reentrant.Option
		if c.meter != nil {
			fopts = append(fopts, fairlock.WithObserver(c.meter))
			ropts = append(ropts, fairlock.WithObserver(c.meter))
		}
		switch kind {
		case "fair":
			l, err = fair.New(owner, name, toMutexOptions(fopts)...)
		case "semaphore":
			var s *fair.Semaphore
			s, err = fair.NewSemaphore(owner, name, c.permits, fopts...)
			l = &semLocker{s: s}
		default:
			l, err = reentrant.New(owner, name, ropts...)
		}
		if err != nil {
			return rep, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range me.inbox {
				if err := l.Lock(ctx); err != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, err)
					mu.Unlock()
					free <- me
					continue
				}
				mu.Lock()
				rep.waits = append(rep.waits, time.Since(j.submitted))
				started[j.id], tokens[j.id] = true, l.Token()
				rep.served++
				running++
				rep.most = max(rep.most, running)
				mu.Unlock()
				time.Sleep(c.hold) // the job
				mu.Lock()
				running--
				mu.Unlock()
				_ = l.Unlock(context.Background())
				free <- me
			}
		}()
		free <- me
	}

	probe := c.target.client()
	defer func() { _ = probe.Close() }()
	begin := time.Now()
	ticker := time.NewTicker(500 * time.Millisecond)
	defer ticker.Stop()
	// On a terminal the count is redrawn in place; elsewhere (a pipe, a
	// file) only the final count is written, on a line of its own.
	live := isTerminal(out)
	progress := func() {
		if !live {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "\r%-9s %4d/%d jobs run", kind, rep.served, c.jobs)
	}
	isStarted := func(id int) bool {
		mu.Lock()
		defer mu.Unlock()
		return started[id]
	}
	for id := 0; id < c.jobs && ctx.Err() == nil; id++ {
		var w worker
		select {
		case w = <-free:
		case <-ctx.Done():
		}
		if w.inbox == nil {
			break
		}
		w.inbox <- job{id: id, submitted: time.Now()}
		if kind != "reentrant" {
			// A job counts as submitted once it stands in the lock's queue
			// (or runs): the next one is submitted after it.
			waitJoined(ctx, probe, name, kind, w.label, func() bool { return isStarted(id) })
		}
		select {
		case <-ticker.C:
			progress()
		case <-time.After(c.interval):
		case <-ctx.Done():
		}
	}
	for idle := 0; idle < c.workers; {
		select {
		case w := <-free:
			close(w.inbox)
			idle++
		case <-ticker.C:
			progress()
		}
	}
	wg.Wait()
	rep.elapsed = time.Since(begin)
	rep.violations = violations(tokens)
	if live {
		progress()
		fmt.Fprintln(out)
	} else {
		fmt.Fprintf(out, "%-9s %4d/%d jobs run\n", kind, rep.served, c.jobs)
	}
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}
	return rep, firstErr
}

func toMutexOptions(opts []fair.Option) []fair.MutexOption {
	out := make([]fair.MutexOption, len(opts))
	for i, o := range opts {
		out[i] = o
	}
	return out
}

// waitJoined waits until the fair lock's (or semaphore's) queue lists
// label, or started reports the job running.
func waitJoined(ctx context.Context, probe redis.UniversalClient, name, kind, label string, started func() bool) {
	deadline := time.Now().Add(5 * time.Second)
	for !started() && ctx.Err() == nil && time.Now().Before(deadline) {
		var queue []fair.Waiter
		if kind == "semaphore" {
			st, err := fair.InspectSemaphore(ctx, probe, name)
			if err != nil {
				return
			}
			queue = st.Queue
		} else {
			st, err := fair.Inspect(ctx, probe, name)
			if err != nil {
				return
			}
			queue = st.Queue
		}
		if slices.ContainsFunc(queue, func(w fair.Waiter) bool { return w.Label == label }) {
			return
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// violations counts the jobs granted the lock before a job submitted
// earlier: tokens, in submission order, are the grants' fencing tokens,
// which rise in grant order (0: not served). With K jobs at a time two
// grants can come microseconds apart, so the order in which Lock calls
// return is not the order of the grants; the tokens are.
func violations(tokens []int64) int {
	n := 0
	var highest int64 // the latest grant among jobs submitted so far
	for _, t := range tokens {
		if t == 0 {
			continue
		}
		if t < highest {
			n++
		}
		highest = max(highest, t)
	}
	return n
}

func printReport(w io.Writer, reports []report) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "lock\tjobs served\torder violations\tmost at once\twait p50\twait p99\truntime\t")
	for _, r := range reports {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%v\t%v\t%v\t\n", r.lock, r.served, r.violations, r.most,
			percentile(r.waits, 50), percentile(r.waits, 99), r.elapsed.Round(time.Millisecond))
	}
	_ = tw.Flush() // to stdout: nothing to do if it fails
	fmt.Fprintln(w, "\nwait: from a job's submission to its start. An order violation is a job that")
	fmt.Fprintln(w, "was granted the lock before a job submitted before it (by fencing token).")
	explain(w, reports)
}

// explain says what a newcomer misreads in the table: the fair lock's
// higher median wait is the price of order, and the reentrant lock's p99
// shows the jobs it starved.
func explain(w io.Writer, reports []report) {
	var f, r *report
	for i := range reports {
		switch reports[i].lock {
		case "fair":
			f = &reports[i]
		case "reentrant":
			r = &reports[i]
		}
	}
	if f == nil || r == nil || len(f.waits) == 0 || len(r.waits) == 0 {
		return
	}
	fp50, fp99 := percentile(f.waits, 50), percentile(f.waits, 99)
	rp50, rp99 := percentile(r.waits, 50), percentile(r.waits, 99)
	fmt.Fprintln(w, "\nWhat the numbers say:")
	fmt.Fprintf(w, "  - fair: each job waited for the jobs submitted before it, and for no other:\n")
	fmt.Fprintf(w, "    waiting its turn is the price of order, paid evenly by every job. Its median\n")
	fmt.Fprintf(w, "    wait is %v (the reentrant lock's %v)", fp50, rp50)
	if fp50 > rp50 {
		fmt.Fprintf(w, ":\n    higher because no job jumps the queue, not because the lock is slower")
	}
	fmt.Fprintln(w, ".")
	fmt.Fprintf(w, "  - reentrant: whoever asks at the right moment gets the lock, so a lucky job\n")
	fmt.Fprintf(w, "    starts at once and an unlucky one is passed over again and again. Its p99\n")
	fmt.Fprintf(w, "    wait, %v (the fair lock's %v), is the jobs it starved", rp99, fp99)
	if r.violations > 0 {
		fmt.Fprintf(w, ";\n    %d of %d jobs started before a job submitted earlier", r.violations, r.served)
	}
	fmt.Fprintln(w, ".")
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(i, len(s))-1)].Round(100 * time.Microsecond)
}

// isTerminal reports whether w is a terminal (a character device), where
// progress can be redrawn in place with a carriage return.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
