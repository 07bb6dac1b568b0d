package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fairlock/fairlock/internal/measures"
	"github.com/fairlock/fairlock/observe"
)

// meter is the demo's observer: the measures of the Prometheus module
// (extra/fairlockprom), made from the same definitions
// (internal/measures) and written in Prometheus's text format here, so
// that the demo serves /metrics without adding a metrics library to the
// library's own go.mod. The Prometheus module's tests scrape the demo and
// parse what it serves with Prometheus's own parser.
type meter struct {
	observe.Nop // spans: none

	mu       sync.Mutex
	families map[string]*family // the histograms and counters, by name
	queues   observe.QueueLengths
}

// family is one histogram or counter: its series by their label values.
type family struct {
	measures.Measure
	series map[string]*series // by the label values joined with \xff
}

type series struct {
	values  []string
	count   uint64
	sum     float64
	buckets []uint64 // histogram: observations at most durationBuckets[i]
}

func newMeter() *meter {
	m := &meter{families: map[string]*family{}}
	for _, d := range measures.All {
		if d.Kind != measures.Gauge {
			m.families[d.Prom] = &family{Measure: d, series: map[string]*series{}}
		}
	}
	return m
}

// add records v (a duration in seconds for a histogram, 1 for a counter)
// in the series of d with the label values (primitive first).
func (m *meter) add(d measures.Measure, v float64, values ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.families[d.Prom]
	key := strings.Join(values, "\xff")
	s := f.series[key]
	if s == nil {
		s = &series{values: values}
		if f.Kind == measures.Histogram {
			s.buckets = make([]uint64, len(durationBuckets))
		}
		f.series[key] = s
	}
	s.count++
	s.sum += v
	for i, le := range durationBuckets {
		if f.Kind == measures.Histogram && v <= le {
			s.buckets[i]++
		}
	}
}

func (m *meter) ObserveAcquisition(_ context.Context, a observe.Acquisition) {
	p := string(a.Primitive)
	m.add(measures.AcquireDuration, a.Wait.Seconds(), p, string(a.Outcome), strconv.FormatBool(a.Queued))
	m.add(measures.Acquisitions, 1, p, string(a.Outcome))
	if a.HandedOff {
		m.add(measures.HandOffDuration, a.HandOff.Seconds(), p)
	}
	m.queues.Acquisition(a)
}

func (m *meter) ObserveHoldEnd(h observe.Hold) {
	m.add(measures.HoldDuration, h.Held.Seconds(), string(h.Primitive), string(h.End))
	if h.End == observe.Lost {
		m.add(measures.HoldsLost, 1, string(h.Primitive))
	}
}

func (m *meter) ObserveRenewalFailure(r observe.RenewalFailure) {
	m.add(measures.RenewalsFailed, 1, string(r.Primitive))
}

func (m *meter) ObserveQueue(e observe.QueueEvent) {
	switch e.Kind {
	case observe.Evicted:
		m.add(measures.QueueEvictions, 1, string(e.Primitive))
	case observe.Rescued:
		m.add(measures.QueueRescues, 1, string(e.Primitive))
	}
	m.queues.Queue(e)
}

// write writes every measure in Prometheus's text format (version 0.0.4).
func (m *meter) write(w io.Writer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range measures.All {
		kind := map[measures.Kind]string{measures.Histogram: "histogram", measures.Counter: "counter", measures.Gauge: "gauge"}[d.Kind]
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", d.Prom, d.Help, d.Prom, kind)
		if d.Kind == measures.Gauge { // the queue length, summed per primitive
			sums := map[observe.Primitive]int{}
			m.queues.Each(func(p observe.Primitive, _ string, n int) { sums[p] += n })
			for _, p := range slices.Sorted(maps.Keys(sums)) {
				fmt.Fprintf(w, "%s{primitive=%q} %d\n", d.Prom, p, sums[p])
			}
			continue
		}
		f := m.families[d.Prom]
		labels := append([]string{"primitive"}, d.Labels...)
		for _, k := range slices.Sorted(maps.Keys(f.series)) {
			s := f.series[k]
			set := labelText(labels, s.values)
			if d.Kind == measures.Counter {
				fmt.Fprintf(w, "%s{%s} %d\n", d.Prom, set, s.count)
				continue
			}
			for i, le := range durationBuckets {
				fmt.Fprintf(w, "%s_bucket{%s,le=%q} %d\n", d.Prom, set, strconv.FormatFloat(le, 'g', -1, 64), s.buckets[i])
			}
			fmt.Fprintf(w, "%s_bucket{%s,le=\"+Inf\"} %d\n", d.Prom, set, s.count)
			fmt.Fprintf(w, "%s_sum{%s} %s\n", d.Prom, set, strconv.FormatFloat(s.sum, 'g', -1, 64))
			fmt.Fprintf(w, "%s_count{%s} %d\n", d.Prom, set, s.count)
		}
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

// durationBuckets are the histograms' bounds, computed once.
var durationBuckets = observe.DurationBuckets()
