package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fairlock/fairlock/observe"
)

// meter is the demo's observer: the measures of the Prometheus module
// (extra/fairlockprom), under the same names, kept here and written in
// Prometheus's text format, so that the demo serves /metrics without
// adding a metrics library to the library's own go.mod. The Prometheus
// module's tests scrape the demo and parse what it serves with
// Prometheus's own parser.
type meter struct {
	observe.Nop // spans: none

	mu       sync.Mutex
	families map[string]*family
	queues   observe.QueueLengths
}

// family is one metric: its series by their label values.
type family struct {
	name, help, kind string // kind: counter or histogram
	labels           []string
	series           map[string]*series // by the label values joined with \xff
}

type series struct {
	values  []string
	count   uint64
	sum     float64
	buckets []uint64 // histogram: observations at most observe.DurationBuckets[i]
}

// The demo's metric families, as fairlockprom names them.
var demoFamilies = []family{
	{name: "fairlock_acquire_duration_seconds", kind: "histogram", labels: []string{"primitive", "outcome", "queued"},
		help: "How long an acquisition took, from the call to its return, whatever its outcome."},
	{name: "fairlock_hold_duration_seconds", kind: "histogram", labels: []string{"primitive", "end"},
		help: "How long a hold lasted, from its acquisition to its end."},
	{name: "fairlock_handoff_duration_seconds", kind: "histogram", labels: []string{"primitive"},
		help: "A direct hand-off's latency as the new holder saw it: from the grant to the acquisition's return."},
	{name: "fairlock_acquisitions_total", kind: "counter", labels: []string{"primitive", "outcome"},
		help: "Acquisitions, by outcome."},
	{name: "fairlock_holds_lost_total", kind: "counter", labels: []string{"primitive"},
		help: "Holds lost: found gone or taken, or their lease ran out before a renewal succeeded."},
	{name: "fairlock_renewals_failed_total", kind: "counter", labels: []string{"primitive"},
		help: "Renewals of a lease that failed (the watchdog tries again)."},
	{name: "fairlock_queue_evictions_total", kind: "counter", labels: []string{"primitive"},
		help: "Waiters of this process evicted from a fair queue after falling silent."},
}

func newMeter() *meter {
	m := &meter{families: map[string]*family{}}
	for _, f := range demoFamilies {
		f.series = map[string]*series{}
		m.families[f.name] = &f
	}
	return m
}

// add records v (a duration in seconds for a histogram, 1 for a counter)
// in the series of family name with the label values.
func (m *meter) add(name string, v float64, values ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.families[name]
	key := strings.Join(values, "\xff")
	s := f.series[key]
	if s == nil {
		s = &series{values: values}
		if f.kind == "histogram" {
			s.buckets = make([]uint64, len(observe.DurationBuckets))
		}
		f.series[key] = s
	}
	s.count++
	s.sum += v
	for i, le := range observe.DurationBuckets {
		if f.kind == "histogram" && v <= le {
			s.buckets[i]++
		}
	}
}

func (m *meter) ObserveAcquisition(_ context.Context, a observe.Acquisition) {
	p := string(a.Primitive)
	m.add("fairlock_acquire_duration_seconds", a.Wait.Seconds(), p, string(a.Outcome), strconv.FormatBool(a.Queued))
	m.add("fairlock_acquisitions_total", 1, p, string(a.Outcome))
	if a.HandedOff {
		m.add("fairlock_handoff_duration_seconds", a.HandOff.Seconds(), p)
	}
	m.queues.Acquisition(a)
}

func (m *meter) ObserveHoldEnd(h observe.Hold) {
	m.add("fairlock_hold_duration_seconds", h.Held.Seconds(), string(h.Primitive), string(h.End))
	if h.End == observe.Lost {
		m.add("fairlock_holds_lost_total", 1, string(h.Primitive))
	}
}

func (m *meter) ObserveRenewalFailure(r observe.RenewalFailure) {
	m.add("fairlock_renewals_failed_total", 1, string(r.Primitive))
}

func (m *meter) ObserveQueue(e observe.QueueEvent) {
	if e.Kind == observe.Evicted {
		m.add("fairlock_queue_evictions_total", 1, string(e.Primitive))
	}
	m.queues.Queue(e)
}

// write writes every family in Prometheus's text format (version 0.0.4).
func (m *meter) write(w io.Writer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range demoFamilies {
		f := m.families[d.name]
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", f.name, f.help, f.name, f.kind)
		keys := make([]string, 0, len(f.series))
		for k := range f.series {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			s := f.series[k]
			labels := labelText(f.labels, s.values)
			if f.kind == "counter" {
				fmt.Fprintf(w, "%s{%s} %d\n", f.name, labels, s.count)
				continue
			}
			for i, le := range observe.DurationBuckets {
				fmt.Fprintf(w, "%s_bucket{%s,le=%q} %d\n", f.name, labels, strconv.FormatFloat(le, 'g', -1, 64), s.buckets[i])
			}
			fmt.Fprintf(w, "%s_bucket{%s,le=\"+Inf\"} %d\n", f.name, labels, s.count)
			fmt.Fprintf(w, "%s_sum{%s} %s\n", f.name, labels, strconv.FormatFloat(s.sum, 'g', -1, 64))
			fmt.Fprintf(w, "%s_count{%s} %d\n", f.name, labels, s.count)
		}
	}
	fmt.Fprintf(w, "# HELP fairlock_queue_length The length of the fair queues this process has waiters in, as Redis last told them.\n# TYPE fairlock_queue_length gauge\n")
	sums := map[observe.Primitive]int{}
	m.queues.Each(func(p observe.Primitive, _ string, n int) { sums[p] += n })
	for _, p := range slices.Sorted(func(yield func(observe.Primitive) bool) {
		for p := range sums {
			if !yield(p) {
				return
			}
		}
	}) {
		fmt.Fprintf(w, "fairlock_queue_length{primitive=%q} %d\n", p, sums[p])
	}
}

func labelText(names, values []string) string {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s=%q", n, values[i])
	}
	return strings.Join(parts, ",")
}

// serveMetrics serves m at http://addr/metrics until ctx ends; it returns
// the address it listens on (addr may give port 0).
func serveMetrics(ctx context.Context, addr string, m *meter) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("-metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		m.write(w)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	return ln.Addr().String(), nil
}
