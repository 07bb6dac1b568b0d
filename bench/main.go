// Command bench measures fairlock against the physical floor of a Redis lock
// and against the Go peers, in one run, and prints a markdown table. Among
// the peers are ports of Redisson's fair lock and plain lock (redisson.go,
// written here from their published algorithm), to compare the scripts'
// cost in Redis.
//
//	cd bench && go run . [-redis host:port] [-seconds S] [-reps R] [-plot FILE]
//
// Without -redis it starts its own redis-server on loopback. Repetitions are
// interleaved across implementations (rep 1 of each, then rep 2, ...) because
// a shared machine's speed drifts; every figure is a median over reps, and
// throughputs are shown as ratios to the floor of the same rep.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	if candidateMain() { // a child of the election benchmark
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type config struct {
	addr    string
	seconds float64
	reps    int
	plot    string
	queue   string
	cpuprof string
	only    string
	permits string
	semHold time.Duration
	fanout  string
	scale   string
	shared  string
	elect   int
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.StringVar(&c.addr, "redis", "", "Redis address (default: start a redis-server on loopback)")
	fs.Float64Var(&c.seconds, "seconds", 2, "duration of each measurement, in seconds")
	fs.IntVar(&c.reps, "reps", 3, "interleaved repetitions (0: only the queue cost)")
	fs.StringVar(&c.cpuprof, "cpuprofile", "", "write a CPU profile of the client side to this file")
	fs.StringVar(&c.plot, "plot", "", "write a chart of the ratios to the floor to this PNG file")
	fs.StringVar(&c.only, "only", "", "run only the floor and the implementations whose name contains one of these comma-separated strings")
	fs.StringVar(&c.permits, "permits", "1,4", "numbers of permits for the semaphore scenario (empty: skip it and the read-write one)")
	fs.DurationVar(&c.semHold, "sem-hold", time.Millisecond, "how long each semaphore holder keeps its permit")
	fs.StringVar(&c.queue, "queue", "0,100,1000,10000", "queue lengths for the fair lock's head-acquisition cost (empty: skip)")
	fs.StringVar(&c.scale, "scale", "4,64,256", "numbers of clients, each with go-redis's default options, taking one lock in turn, for what N costs each lock (1000 too, say; empty: skip)")
	fs.StringVar(&c.shared, "shared", "8,64", "numbers of goroutines sharing one client (PoolSize 32) and owner, each with its own handle of one lock, on a ctx with a deadline (empty: skip)")
	fs.StringVar(&c.fanout, "fanout", "", "numbers of clients taking one lock in turn, for the bytes Redis sends per acquisition (2,4,16,64, say; empty: skip)")
	fs.IntVar(&c.elect, "election", 0, "measure only leader election's failover: this many changes for each way a leader goes, with fair.Election and with one built by hand on fair.Mutex (20, say; 0: skip)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.seconds <= 0 || c.reps < 0 {
		return fmt.Errorf("-seconds must be positive and -reps not negative")
	}
	// The lists are read before anything runs: a bad entry is told at once.
	var queueNs, fanNs, scaleNs, sharedNs, permitKs []int
	for _, l := range []struct {
		to         *[]int
		flag, list string
		least      int
		what       string
	}{
		{&queueNs, "queue", c.queue, 0, "a queue length"},
		{&fanNs, "fanout", c.fanout, 2, "a number of clients"},
		{&scaleNs, "scale", c.scale, 2, "a number of clients"},
		{&sharedNs, "shared", c.shared, 1, "a number of goroutines"},
		{&permitKs, "permits", c.permits, 1, "a number of permits"},
	} {
		ns, err := counts(l.flag, l.list, l.least, l.what)
		if err != nil {
			return err
		}
		*l.to = ns
	}
	if c.only != "" {
		var keep []impl
		for _, im := range impls {
			for _, part := range strings.Split(c.only, ",") {
				if im.name == "floor" || (part != "" && strings.Contains(im.name, part)) {
					keep = append(keep, im)
					break
				}
			}
		}
		impls = keep
	}
	if c.cpuprof != "" {
		f, err := os.Create(c.cpuprof)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	addr := c.addr
	if addr == "" {
		a, stopServer, err := startRedis()
		if err != nil {
			return err
		}
		defer stopServer()
		addr = a
	}
	e := &env{addr: addr} // go-redis's default options, for every implementation
	probe := e.client()
	defer func() { _ = probe.Close() }()
	ver, err := probe.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("cannot reach Redis at %s: %w", addr, err)
	}
	fmt.Fprintf(stderr, "Redis %s at %s, %d cores, %s\n", field(ver, "redis_version"), addr, runtime.NumCPU(), runtime.Version())
	if c.elect > 0 {
		return electionBench(ctx, addr, c.elect, stdout, stderr)
	}

	r := newResults(c.reps)
	dur := time.Duration(c.seconds * float64(time.Second))
	for rep := 0; rep < c.reps; rep++ {
		rtt := e.rtt(ctx)
		r.rtt[rep] = rtt
		fmt.Fprintf(stderr, "rep %d/%d: round trip %v\n", rep+1, c.reps, rtt)
		for _, im := range impls {
			// Uncontended, on context.Background and on a ctx with a
			// deadline sooner than go-redis's own bound of a call (a
			// request's or a job's), which the library must keep itself.
			fmt.Fprintf(stderr, "  %-20s uncontended", im.name)
			v, cost, err := e.pairs(context.Background(), im, 1, dur)
			if err != nil {
				return err
			}
			r.uncontended[im.name][rep], r.cpu1[im.name][rep] = v, cost
			fmt.Fprintf(stderr, " %.0f/s, with a deadline", v)
			dl, cancel := context.WithTimeout(context.Background(), dur+30*time.Second)
			v, cost, err = e.pairs(dl, im, 1, dur)
			cancel()
			if err != nil {
				return err
			}
			r.deadline[im.name][rep], r.cpuDeadline[im.name][rep] = v, cost
			fmt.Fprintf(stderr, " %.0f/s, 8 names", v)
			v, cost, err = e.pairs(ctx, im, 8, dur)
			if err != nil {
				return err
			}
			r.names[im.name][rep], r.cpu8[im.name][rep] = v, cost
			fmt.Fprintf(stderr, " %.0f/s, contended", v)
			ct, err := e.contend(ctx, im, 8, dur)
			if err != nil {
				return err
			}
			r.contended[im.name][rep] = ct
			fmt.Fprintf(stderr, " %.0f acq/s\n", ct.acqPerSec)
		}
	}
	var queue []queueCost
	if c.queue != "" {
		for _, n := range queueNs {
			fmt.Fprintf(stderr, "fair lock, head acquisition with %d queued\n", n)
			q, err := e.headAcquisition(ctx, n)
			if err != nil {
				return err
			}
			queue = append(queue, q)
		}
	}
	var fan []fanRow
	if c.fanout != "" {
		for _, n := range fanNs {
			for _, im := range impls {
				if im.name == "redislock" || im.name == "redsync" {
					continue // no messages to fan out
				}
				ct, err := e.contend(ctx, im, n, dur)
				if err != nil {
					return err
				}
				fmt.Fprintf(stderr, "fan-out %d clients %-20s %.0f acq/s\n", n, im.name, ct.acqPerSec)
				fan = append(fan, fanRow{impl: im.name, ct: ct})
			}
		}
	}
	var scaled map[scaleKey][]scaleRun
	if c.scale != "" {
		reps := max(c.reps, 1)
		if scaled, err = e.runScale(ctx, scaleNs, reps, dur, stderr); err != nil {
			return err
		}
	}
	sharedRuns := map[scaleKey][]float64{}
	if c.shared != "" {
		for rep := range max(c.reps, 1) {
			for _, n := range sharedNs {
				for _, im := range impls {
					if im.name == "floor" {
						continue
					}
					v, err := e.shared(im, n, dur)
					if err != nil {
						return err
					}
					fmt.Fprintf(stderr, "shared client, rep %d, %d goroutines %-20s %.0f acq/s\n", rep+1, n, im.name, v)
					sharedRuns[scaleKey{im.name, n}] = append(sharedRuns[scaleKey{im.name, n}], v)
				}
			}
		}
	}
	var sems []*semResult
	if c.permits != "" {
		for _, k := range permitKs {
			for _, im := range semImpls {
				res, err := e.semaphoreRun(ctx, im, k, c.semHold, dur)
				if err != nil {
					return err
				}
				if res == nil {
					continue
				}
				fmt.Fprintf(stderr, "semaphore K=%d %-24s %.0f acq/s\n", k, im.name, res.perSec)
				if res.overK {
					return fmt.Errorf("%s held %d permits of %d at once", im.name, res.heldMost, k)
				}
				sems = append(sems, res)
			}
		}
	}
	var rws []*rwResult
	if c.permits != "" {
		for _, impl := range []string{"fairlock/fair.RWMutex", "fairlock/fair.Mutex"} {
			res, err := e.rwRun(ctx, impl, c.semHold, dur)
			if err != nil {
				return err
			}
			if res.readerBesideWrt && impl == "fairlock/fair.RWMutex" {
				return fmt.Errorf("%s let a reader in beside a writer", impl)
			}
			fmt.Fprintf(stderr, "read-write %-24s %.0f turns/s\n", impl, res.reads+res.writes)
			rws = append(rws, res)
		}
	}
	if c.reps > 0 {
		r.print(stdout)
	}
	printQueue(stdout, queue)
	printFanout(stdout, fan)
	printScale(stdout, scaleNs, scaled)
	printShared(stdout, sharedNs, sharedRuns)
	printSemaphores(stdout, sems, c.semHold)
	printRW(stdout, rws, c.semHold)
	if c.plot != "" && c.reps > 0 {
		if err := r.chart(c.plot); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "chart written to %s\n", c.plot)
	}
	return nil
}

func field(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return "?"
}

// startRedis starts a throwaway redis-server on a free loopback port.
func startRedis() (string, func(), error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("redis-server not found: install it or pass -redis host:port")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	dir, err := os.MkdirTemp("", "fairlock-bench-")
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "log"), "--maxclients", "10000")
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = os.RemoveAll(dir)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = c.Close() }()
	for start := time.Now(); c.Ping(context.Background()).Err() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			stop()
			return "", nil, fmt.Errorf("redis-server on %s did not start", addr)
		}
	}
	return addr, stop, nil
}

// results holds every rep's figures.
type results struct {
	reps        int
	rtt         []time.Duration
	uncontended map[string][]float64 // on context.Background
	deadline    map[string][]float64 // uncontended, on a ctx with a deadline
	names       map[string][]float64
	contended   map[string][]contention
	cpu1, cpu8  map[string][]cpuCost // CPU per pair: uncontended, 8 names
	cpuDeadline map[string][]cpuCost // uncontended, with a deadline
}

func newResults(reps int) *results {
	r := &results{reps: reps, rtt: make([]time.Duration, reps), uncontended: map[string][]float64{},
		deadline: map[string][]float64{}, names: map[string][]float64{}, contended: map[string][]contention{},
		cpu1: map[string][]cpuCost{}, cpu8: map[string][]cpuCost{}, cpuDeadline: map[string][]cpuCost{}}
	for _, im := range impls {
		r.deadline[im.name] = make([]float64, reps)
		r.cpuDeadline[im.name] = make([]cpuCost, reps)
		r.cpu1[im.name] = make([]cpuCost, reps)
		r.cpu8[im.name] = make([]cpuCost, reps)
		r.uncontended[im.name] = make([]float64, reps)
		r.names[im.name] = make([]float64, reps)
		r.contended[im.name] = make([]contention, reps)
	}
	return r
}

// ratio is the median over reps of v / the floor's v in the same rep.
func ratio(v, floor []float64) float64 {
	var out []float64
	for i := range v {
		if floor[i] > 0 {
			out = append(out, v[i]/floor[i])
		}
	}
	return medianF(out)
}

func (r *results) contendedRates(name string) []float64 {
	var out []float64
	for _, c := range r.contended[name] {
		out = append(out, c.acqPerSec)
	}
	return out
}

func (r *results) print(w io.Writer) {
	rtt := median(r.rtt)
	fmt.Fprintf(w, "Round trip (median PING): %v. Ratios are to the floor of the same rep; medians of %d interleaved reps.\n", rtt.Round(time.Microsecond), r.reps)
	if f := medianF(r.uncontended["floor"]); f > 0 {
		// PING in a tight loop keeps both processes on CPU; a lock call in a
		// loop that does other work too may not, on a virtual machine.
		fmt.Fprintf(w, "One uncontended floor call (a trivial script's round trip, half a floor pair): %v.\n",
			time.Duration(float64(time.Second)/(2*f)).Round(time.Microsecond))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintln(tw, "| implementation\t| uncontended\t| uncontended, deadline\t| 8 names\t| contended acq/s\t| hand-off p50\t| hand-off p99\t| out of FIFO\t| max/min per handle\t| PUBLISH per hand-off\t| pub/sub conns (8 clients)\t|")
	fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|")
	for _, im := range impls {
		var p50, p99, fifo, maxMin, pubs []float64
		var p50us, p99us []time.Duration
		subs := 0
		for i, c := range r.contended[im.name] {
			p50us = append(p50us, percentile(c.handoffs, 50))
			p99us = append(p99us, percentile(c.handoffs, 99))
			p50 = append(p50, float64(percentile(c.handoffs, 50))/float64(r.rtt[i]))
			p99 = append(p99, float64(percentile(c.handoffs, 99))/float64(r.rtt[i]))
			if c.acquisition > 0 {
				fifo = append(fifo, 100*float64(c.outOfFIFO)/float64(c.acquisition))
				pubs = append(pubs, float64(c.publishes)/float64(c.acquisition))
			}
			maxMin = append(maxMin, c.maxMin)
			subs = max(subs, c.subConns)
		}
		fmt.Fprintf(tw, "| %s\t| %.0f/s (%.2fx)\t| %.0f/s (%.2fx)\t| %.0f/s (%.2fx)\t| %.0f (%.2fx)\t| %v (%.1f RTT)\t| %v (%.1f RTT)\t| %.1f %%\t| %.2f\t| %.2f\t| %d\t|\n",
			im.name,
			medianF(r.uncontended[im.name]), ratio(r.uncontended[im.name], r.uncontended["floor"]),
			medianF(r.deadline[im.name]), ratio(r.deadline[im.name], r.deadline["floor"]),
			medianF(r.names[im.name]), ratio(r.names[im.name], r.names["floor"]),
			medianF(r.contendedRates(im.name)), ratio(r.contendedRates(im.name), r.contendedRates("floor")),
			median(p50us).Round(time.Microsecond), medianF(p50), median(p99us).Round(time.Microsecond), medianF(p99),
			medianF(fifo), medianF(maxMin), medianF(pubs), subs)
	}
	_ = tw.Flush()

	fmt.Fprintln(w, "\nCPU time per Lock+Unlock pair, µs (the benchmark process, the client side; redis-server, from INFO cpu; its time in scripts, from INFO commandstats):")
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintln(tw, "| implementation\t| uncontended: client\t| uncontended: Redis\t| uncontended: scripts\t| deadline: client\t| deadline: Redis\t| deadline: scripts\t| 8 names: client\t| 8 names: Redis\t| 8 names: total\t|")
	fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|")
	for _, im := range impls {
		pick := func(cs []cpuCost, f func(cpuCost) float64) float64 {
			var v []float64
			for _, c := range cs {
				v = append(v, f(c))
			}
			return medianF(v)
		}
		client := func(c cpuCost) float64 { return c.client }
		rds := func(c cpuCost) float64 { return c.redis }
		sum := func(c cpuCost) float64 { return c.client + c.redis }
		scripts := func(c cpuCost) float64 { return c.scripts }
		fmt.Fprintf(tw, "| %s\t| %.1f\t| %.1f\t| %.1f\t| %.1f\t| %.1f\t| %.1f\t| %.1f\t| %.1f\t| %.1f\t|\n", im.name,
			pick(r.cpu1[im.name], client), pick(r.cpu1[im.name], rds), pick(r.cpu1[im.name], scripts),
			pick(r.cpuDeadline[im.name], client), pick(r.cpuDeadline[im.name], rds), pick(r.cpuDeadline[im.name], scripts),
			pick(r.cpu8[im.name], client), pick(r.cpu8[im.name], rds), pick(r.cpu8[im.name], sum))
	}
	_ = tw.Flush()
}

func printQueue(w io.Writer, queue []queueCost) {
	if len(queue) == 0 {
		return
	}
	fmt.Fprintln(w, "\nFair lock, head acquisition with N queued (10 % dead); Redis-side time from INFO commandstats,")
	fmt.Fprintln(w, "80 acquisitions per N, in chunks of 10 alternating with chunks on a lock nobody waits for:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| queued | Redis µs per acquisition | same moment, 0 queued | ratio | bytes per queued waiter |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, q := range queue {
		mem := "-"
		if q.queued > 0 {
			mem = fmt.Sprintf("%.0f", q.bytesPerWaitr)
		}
		fmt.Fprintf(w, "| %d | %.1f | %.1f | %.2fx | %s |\n", q.queued, q.usecPerAcq, q.usecEmpty, q.usecPerAcq/q.usecEmpty, mem)
	}
}

// fanRow is one implementation's contended run with some number of
// clients, for the fan-out table.
type fanRow struct {
	impl string
	ct   contention
}

// printFanout prints, per number of clients taking one lock in turn, the
// bytes Redis sent per acquisition: a hand-off broadcast on a shared
// channel reaches every client waiting, one sent to the next waiter alone
// does not grow with them.
func printFanout(w io.Writer, rows []fanRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\nFan-out: clients taking one lock in turn (each its own client, as if on its own machine):")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintln(tw, "| implementation\t| clients\t| bytes out of Redis per acquisition\t| PUBLISH per hand-off\t| hand-off p50\t| acq/s\t|")
	fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|---\t|---\t|")
	for _, r := range rows {
		per, pubs := 0.0, 0.0
		if r.ct.acquisition > 0 {
			per = float64(r.ct.outBytes) / float64(r.ct.acquisition)
			pubs = float64(r.ct.publishes) / float64(r.ct.acquisition)
		}
		fmt.Fprintf(tw, "| %s\t| %d\t| %.0f\t| %.2f\t| %v\t| %.0f\t|\n", r.impl, r.ct.clients, per, pubs,
			median(r.ct.handoffs).Round(time.Microsecond), r.ct.acqPerSec)
	}
	_ = tw.Flush()
}

// counts reads flag's comma-separated list of whole numbers, each at least
// least (what says what a number counts, for the error); none if list is
// empty.
func counts(flag, list string, least int, what string) ([]int, error) {
	if list == "" {
		return nil, nil
	}
	var ns []int
	for _, f := range strings.Split(list, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(f), &n); err != nil || n < least {
			return nil, fmt.Errorf("bad -%s entry %q: want %s, at least %d", flag, f, what, least)
		}
		ns = append(ns, n)
	}
	return ns, nil
}
