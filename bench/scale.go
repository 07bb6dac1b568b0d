package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
)

// The scale scenario: N clients, each its own go-redis client with
// go-redis's default options and its own owner (as if on N machines, each
// with its own connections and subscriptions), take one lock in turn with
// an empty critical section. It measures what N costs: acquisitions per
// second, and Redis's output bytes and CPU per acquisition (INFO stats and
// INFO cpu). A lock whose release wakes every waiting client pays for N
// in all three; one that wakes one waiter does not.
//
//	go run . -reps 5 -scale 4,64,256 -only fairlock/ -queue '' -permits ''
//
// 1,000 clients take about 2,000 connections (a command pool and a pub/sub
// connection each): the redis-server the benchmark starts allows 10,000.

// scaleImpls are the locks the scale scenario compares.
var scaleImpls = []string{"fairlock/fair", "fairlock/reentrant"}

// scaleRun is one run of one implementation with n clients.
type scaleRun struct {
	acqPerSec float64
	outBytes  float64 // per acquisition
	redisUsec float64 // per acquisition
	calls     string  // Redis's calls per acquisition, by command (the log's)
}

// allCalls is every command's call count so far (INFO commandstats).
func allCalls(ctx context.Context, c *redis.Client) map[string]int64 {
	out := map[string]int64{}
	info, _ := c.Info(ctx, "commandstats").Result()
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(fields, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				out[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return out
}

// callsPer is the calls made between before and after, per acquisition, by
// command, the most frequent first.
func callsPer(before, after map[string]int64, acq float64) string {
	type kv struct {
		cmd string
		n   float64
	}
	var all []kv
	for cmd, n := range after {
		if d := float64(n - before[cmd]); d > 0 {
			all = append(all, kv{cmd, d / acq})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n })
	var parts []string
	for _, c := range all {
		if c.n >= 0.01 {
			parts = append(parts, fmt.Sprintf("%s %.2f", c.cmd, c.n))
		}
	}
	return strings.Join(parts, ", ")
}

// scaleKey names one cell of the table.
type scaleKey struct {
	impl    string
	clients int
}

// scale runs n clients of im on one lock for dur.
func (e *env) scale(ctx context.Context, im impl, n int, dur time.Duration) (scaleRun, error) {
	admin := e.client()
	defer func() { _ = admin.Close() }()
	name := lockName("scale")
	handles := make([]locker, n)
	for i := range handles {
		c := redis.NewClient(&redis.Options{Addr: e.addr}) // go-redis's defaults
		defer func() {
			closeOwner(ctx, c)
			_ = c.Close()
		}()
		h, err := im.new(c, name)
		if err != nil {
			return scaleRun{}, err
		}
		handles[i] = h
	}
	// Every client takes the lock once first, all at once, so that most
	// wait: connecting, and each client's subscription to its inbox (its
	// first wait's), are not counted. Taken one after another, each found
	// the lock free and subscribed to nothing, and 1,000 clients then
	// subscribed inside the measured window (HELLO and SUBSCRIBE on 0.2
	// acquisitions in 1 s, and a second try at each confirmation).
	var warm sync.WaitGroup
	warmErrs := make(chan error, n)
	for _, h := range handles {
		warm.Go(func() {
			if err := h.Lock(ctx); err != nil {
				warmErrs <- err
				return
			}
			if err := h.Unlock(ctx); err != nil {
				warmErrs <- err
			}
		})
	}
	warm.Wait()
	close(warmErrs)
	for err := range warmErrs {
		return scaleRun{}, err
	}
	var (
		mu    sync.Mutex
		total int
		wg    sync.WaitGroup
	)
	errs := make(chan error, n)
	out0, cpu0, calls0 := netOut(ctx, admin), redisCPU(ctx, admin), allCalls(ctx, admin)
	start := time.Now()
	deadline := start.Add(dur)
	for _, h := range handles {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				if err := h.Lock(ctx); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				total++
				mu.Unlock()
				if err := h.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start) // the last Lock may end after the deadline
	close(errs)
	for err := range errs {
		return scaleRun{}, fmt.Errorf("%s with %d clients: %w", im.name, n, err)
	}
	acq := float64(total)
	return scaleRun{
		acqPerSec: acq / elapsed.Seconds(),
		outBytes:  float64(netOut(ctx, admin)-out0) / acq,
		redisUsec: float64(redisCPU(ctx, admin)-cpu0) / float64(time.Microsecond) / acq,
		calls:     callsPer(calls0, allCalls(ctx, admin), acq),
	}, nil
}

// runScale runs every implementation of scaleImpls at each number of
// clients, interleaved within each repetition, and returns every run.
func (e *env) runScale(ctx context.Context, ns []int, reps int, dur time.Duration, log io.Writer) (map[scaleKey][]scaleRun, error) {
	runs := map[scaleKey][]scaleRun{}
	for rep := 0; rep < reps; rep++ {
		for _, n := range ns {
			for _, name := range scaleImpls {
				i := slices.IndexFunc(impls, func(im impl) bool { return im.name == name })
				if i < 0 {
					continue
				}
				r, err := e.scale(ctx, impls[i], n, dur)
				if err != nil {
					return nil, err
				}
				fmt.Fprintf(log, "scale rep %d/%d: %-20s %5d clients %8.0f acq/s %6.0f B/acq %6.1f µs Redis CPU/acq; calls/acq: %s\n",
					rep+1, reps, name, n, r.acqPerSec, r.outBytes, r.redisUsec, r.calls)
				k := scaleKey{name, n}
				runs[k] = append(runs[k], r)
			}
		}
	}
	return runs, nil
}

// printScale prints the medians, and each against the same lock with the
// fewest clients: the goals are ratios (docs/performance.md).
func printScale(w io.Writer, ns []int, runs map[scaleKey][]scaleRun) {
	if len(runs) == 0 {
		return
	}
	reps := 0
	for _, r := range runs {
		reps = len(r)
		break
	}
	fmt.Fprintf(w, "\nScale: N clients (each its own go-redis client, default options) taking one lock in turn; medians of %d interleaved reps\n\n", reps)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintln(tw, "| lock\t| clients\t| acq/s\t| vs fewest\t| Redis output B/acq\t| vs fewest\t| Redis CPU µs/acq\t| vs fewest\t|")
	fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|---\t|---\t|---\t|---\t|")
	for _, name := range scaleImpls {
		base := scaleMedian(runs[scaleKey{name, ns[0]}])
		for _, n := range ns {
			rs := runs[scaleKey{name, n}]
			if len(rs) == 0 {
				continue
			}
			m := scaleMedian(rs)
			fmt.Fprintf(tw, "| %s\t| %d\t| %.0f\t| %.2fx\t| %.0f\t| %.2fx\t| %.1f\t| %.2fx\t|\n", name, n,
				m.acqPerSec, m.acqPerSec/base.acqPerSec, m.outBytes, m.outBytes/base.outBytes,
				m.redisUsec, m.redisUsec/base.redisUsec)
		}
	}
	_ = tw.Flush()
}

// scaleMedian is the median of each measure, taken apart.
func scaleMedian(rs []scaleRun) scaleRun {
	pick := func(f func(scaleRun) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		sort.Float64s(v)
		if len(v) == 0 {
			return 0
		}
		return v[len(v)/2]
	}
	return scaleRun{
		acqPerSec: pick(func(r scaleRun) float64 { return r.acqPerSec }),
		outBytes:  pick(func(r scaleRun) float64 { return r.outBytes }),
		redisUsec: pick(func(r scaleRun) float64 { return r.redisUsec }),
	}
}
