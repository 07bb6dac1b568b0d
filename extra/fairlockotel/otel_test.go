package fairlockotel_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/extra/fairlockotel"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/observe"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

type rig struct {
	t      *testing.T
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	obs    *fairlockotel.Observer
	client *redis.Client
	name   string // the test's lock
}

func newRig(t *testing.T, opts ...fairlockotel.Option) *rig {
	r := &rig{t: t, reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	r.client, r.name = redistest.RealOrMini(t), redistest.Name(t)
	obs, err := fairlockotel.New(append([]fairlockotel.Option{
		fairlockotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))),
		fairlockotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	r.obs = obs
	return r
}

func (r *rig) lock(name string) *fair.Mutex {
	m, err := fair.New(redistest.Owner(r.client), name, fairlock.WithObserver(r.obs))
	if err != nil {
		r.t.Fatal(err)
	}
	return m
}

// collect reads every instrument back, by name.
func (r *rig) collect() map[string]metricdata.Aggregation {
	r.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		r.t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != fairlockotel.ScopeName {
			r.t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

func sumOf(t *testing.T, data metricdata.Aggregation, kv ...attribute.KeyValue) int64 {
	t.Helper()
	s, ok := data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("not an int64 sum: %T", data)
	}
	var n int64
	for _, p := range s.DataPoints {
		if hasAll(p.Attributes, kv) {
			n += p.Value
		}
	}
	return n
}

func histCount(t *testing.T, data metricdata.Aggregation, kv ...attribute.KeyValue) uint64 {
	t.Helper()
	h, ok := data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("not a float64 histogram: %T", data)
	}
	var n uint64
	for _, p := range h.DataPoints {
		if hasAll(p.Attributes, kv) {
			n += p.Count
			if len(p.Bounds) != 17 || p.Bounds[0] != 0.001 || p.Bounds[16] != 300 {
				t.Errorf("buckets: %v", p.Bounds)
			}
		}
	}
	return n
}

func hasAll(set attribute.Set, kv []attribute.KeyValue) bool {
	for _, want := range kv {
		if got, ok := set.Value(want.Key); !ok || got != want.Value {
			return false
		}
	}
	return true
}

func TestMetricsAndSpansOfAFairLock(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	a, b, c := r.lock(r.name), r.lock(r.name), r.lock(r.name)
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- b.Lock(ctx) }()

	// While b waits, the gauge shows its queue: b alone.
	fair := attribute.String("fairlock.primitive", "fair")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if g, ok := r.collect()["fairlock.queue.length"].(metricdata.Gauge[int64]); ok && len(g.DataPoints) == 1 {
			p := g.DataPoints[0]
			if p.Value != 1 || !hasAll(p.Attributes, []attribute.KeyValue{fair}) {
				t.Fatalf("queue length: %+v", p)
			}
			if _, named := p.Attributes.Value("fairlock.lock.name"); named {
				t.Fatal("the lock's name is an attribute without WithLockNames")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the queue's length never showed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if ok, err := c.TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("TryLock: %v, %v", ok, err)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	m := r.collect()
	outcome := func(s string) attribute.KeyValue { return attribute.String("fairlock.outcome", s) }
	if n := sumOf(t, m["fairlock.acquisitions"], fair, outcome("acquired")); n != 2 {
		t.Errorf("acquired: %d, want 2", n)
	}
	if n := sumOf(t, m["fairlock.acquisitions"], fair, outcome("timed_out")); n != 1 {
		t.Errorf("timed out: %d, want 1", n)
	}
	if n := histCount(t, m["fairlock.acquire.duration"], fair); n != 3 {
		t.Errorf("waits: %d, want 3", n)
	}
	if n := histCount(t, m["fairlock.acquire.duration"], attribute.Bool("fairlock.queued", true)); n != 1 {
		t.Errorf("queued waits: %d, want 1 (b's)", n)
	}
	if n := histCount(t, m["fairlock.hold.duration"], attribute.String("fairlock.hold.end", "released")); n != 2 {
		t.Errorf("holds: %d, want 2", n)
	}
	if n := histCount(t, m["fairlock.handoff.duration"], fair); n != 1 {
		t.Errorf("hand-offs: %d, want 1", n)
	}
	if g, ok := m["fairlock.queue.length"].(metricdata.Gauge[int64]); ok && len(g.DataPoints) != 0 {
		t.Errorf("the queue gauge after the wait: %+v", g.DataPoints)
	}

	spans := r.spans.Ended()
	if len(spans) != 5 {
		t.Fatalf("spans: got %d, want 5 (3 acquisitions, 2 releases)", len(spans))
	}
	for _, s := range spans {
		attrs := attribute.NewSet(s.Attributes()...)
		sys, _ := attrs.Value("db.system.name")
		proc, _ := attrs.Value("db.stored_procedure.name")
		addr, _ := attrs.Value("server.address")
		if sys.AsString() != "redis" || !strings.HasPrefix(proc.AsString(), "fairlock_") || addr.AsString() != "127.0.0.1" {
			t.Errorf("span %q: %v", s.Name(), s.Attributes())
		}
		if s.Name() != "fair acquire" && s.Name() != "fair release" {
			t.Errorf("span name %q", s.Name())
		}
	}
}

// WithLockNames puts the name on every measure.
func TestWithLockNames(t *testing.T) {
	r := newRig(t, fairlockotel.WithLockNames())
	m := r.lock(r.name)
	if err := m.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	data := r.collect()
	if n := sumOf(t, data["fairlock.acquisitions"], attribute.String("fairlock.lock.name", r.name)); n != 1 {
		t.Fatalf("acquisitions of %s: %d", r.name, n)
	}
}

func TestNewRejectsNilOptions(t *testing.T) {
	for _, o := range []fairlockotel.Option{nil, fairlockotel.WithMeterProvider(nil), fairlockotel.WithTracerProvider(nil)} {
		if _, err := fairlockotel.New(o); err == nil {
			t.Error("no error")
		}
	}
}

// A rescue counts in fairlock.queue.rescues, by primitive, and nowhere else.
func TestRescuesAreCounted(t *testing.T) {
	r := newRig(t)
	for _, p := range []observe.Primitive{observe.Fair, observe.Reentrant, observe.Fair} {
		r.obs.ObserveQueue(observe.QueueEvent{Primitive: p, Lock: r.name, Kind: observe.Rescued})
	}
	m := r.collect()
	if n := sumOf(t, m["fairlock.queue.rescues"], attribute.String("fairlock.primitive", "fair")); n != 2 {
		t.Errorf("fair rescues: %d, want 2", n)
	}
	if n := sumOf(t, m["fairlock.queue.rescues"], attribute.String("fairlock.primitive", "reentrant")); n != 1 {
		t.Errorf("reentrant rescues: %d, want 1", n)
	}
	if n := sumOf(t, m["fairlock.queue.evictions"]); n != 0 {
		t.Errorf("evictions: %d, want 0: a rescue counted as an eviction", n)
	}
}

// Before any event every counter has a data point at 0 for each attribute
// set known at start; with WithLockNames a lock's start at its first event.
func TestCountersStartAtZero(t *testing.T) {
	m := newRig(t).collect()
	primitives, outcomes := len(observe.Primitives()), len(observe.Outcomes())
	for name, want := range map[string]int{
		"fairlock.acquisitions":    primitives * outcomes,
		"fairlock.holds.lost":      primitives,
		"fairlock.renewals.failed": primitives,
		"fairlock.queue.evictions": 4, // the primitives that queue: fair, election, semaphore, rwmutex
		"fairlock.queue.rescues":   4,
	} {
		s, ok := m[name].(metricdata.Sum[int64])
		if !ok {
			t.Errorf("%s: no sum before any event", name)
			continue
		}
		for _, p := range s.DataPoints {
			if p.Value != 0 {
				t.Errorf("%s %v = %d before any event", name, p.Attributes, p.Value)
			}
		}
		if len(s.DataPoints) != want {
			t.Errorf("%s: %d data points, want %d", name, len(s.DataPoints), want)
		}
	}
	if _, ok := newRig(t, fairlockotel.WithLockNames()).collect()["fairlock.holds.lost"]; ok {
		t.Error("with lock names, lost holds have data points before any event")
	}
}
