package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
)

// sharedPool is the pool of the one client a shared run's goroutines use:
// a service's client, sized for its workers; every other option is
// go-redis's default.
const sharedPool = 32

// shared is the shape a service takes: one client (and, for fairlock, one
// owner) shared by n goroutines, each with a handle of its own, taking one
// lock in turn with Lock then Unlock on a ctx with a deadline sooner than
// go-redis's own bound of a call (a request's or a job's). It returns the
// acquisitions per second.
func (e *env) shared(im impl, n int, dur time.Duration) (float64, error) {
	o := e.opts
	o.Addr, o.PoolSize = e.addr, sharedPool
	c := redis.NewClient(&o)
	defer func() { _ = c.Close() }()
	defer closeOwner(context.Background(), c)
	ctx, cancel := context.WithTimeout(context.Background(), dur+30*time.Second)
	defer cancel()
	name := lockName("shared")
	handles := make([]locker, n)
	for i := range handles {
		h, err := im.new(c, name)
		if err != nil {
			return 0, err
		}
		handles[i] = h
	}
	start := time.Now()
	count, err := turns(ctx, handles, dur)
	if err != nil {
		return 0, fmt.Errorf("%s, %d goroutines on one client: %w", im.name, n, err)
	}
	return float64(count) / time.Since(start).Seconds(), nil
}

// printShared prints the shared runs: acquisitions per second, per number
// of goroutines, and each against the Redisson port's (fair) of the same
// rep.
func printShared(w io.Writer, ns []int, runs map[scaleKey][]float64) {
	if len(ns) == 0 {
		return
	}
	fmt.Fprintf(w, "\nContended on one shared client (PoolSize %d, one owner), each goroutine its own handle, on a ctx with a deadline: acquisitions/s, and against the Redisson port (fair) in the same rep; medians:\n\n", sharedPool)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprint(tw, "| implementation\t|")
	for _, n := range ns {
		fmt.Fprintf(tw, " %d goroutines\t|", n)
	}
	fmt.Fprintln(tw)
	fmt.Fprint(tw, "|---\t|")
	for range ns {
		fmt.Fprint(tw, "---\t|")
	}
	fmt.Fprintln(tw)
	for _, im := range impls {
		if im.name == "floor" {
			continue
		}
		fmt.Fprintf(tw, "| %s\t|", im.name)
		for _, n := range ns {
			v := runs[scaleKey{im.name, n}]
			fmt.Fprintf(tw, " %.0f (%.2fx)\t|", medianF(v), ratio(v, runs[scaleKey{"redisson-port/fair", n}]))
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
}
