package fairlockprom_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/extra/fairlockprom"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/observe"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape GETs url and parses it with Prometheus's text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return fams
}

// value sums the counters, or the histograms' counts, of the series of f
// that have every label given (name, value, name, value, ...).
// serve registers c on a registry of its own, pedantic, and serves it over
// HTTP until the test ends; it returns the URL to scrape.
func serve(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func value(f *dto.MetricFamily, labels ...string) float64 {
	if f == nil {
		return 0
	}
	var n float64
	for _, m := range f.GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			n += m.GetCounter().GetValue()
		case m.Histogram != nil:
			n += float64(m.GetHistogram().GetSampleCount())
		case m.Gauge != nil:
			n += m.GetGauge().GetValue()
		}
	}
	return n
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// The collector's measures, registered and served over HTTP as a service
// would, read back with Prometheus's own parser.
func TestCollectorOverHTTP(t *testing.T) {
	client, name := redistest.RealOrMini(t), redistest.Name(t)
	c, err := fairlockprom.New(fairlockprom.WithConstLabels(prometheus.Labels{"service": "test"}))
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, c)

	ctx := context.Background()
	lock := func() *fair.Mutex {
		m, err := fair.New(redistest.Owner(client), name, fairlock.WithObserver(c))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	a, b := lock(), lock()
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- b.Lock(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for value(scrape(t, url)["fairlock_queue_length"], "primitive", "fair") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the queue's length never showed 1")
		}
		time.Sleep(5 * time.Millisecond)
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
	r, err := reentrant.New(redistest.Owner(client), name, fairlock.WithObserver(c))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.TryLock(ctx, 0, 0); ok || err != nil { // another turn of the same handle: taken
		t.Fatalf("TryLock: %v, %v", ok, err)
	}
	if err := r.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	fams := scrape(t, url)
	for _, check := range []struct {
		family string
		labels []string
		want   float64
	}{
		{"fairlock_acquisitions_total", []string{"primitive", "fair", "outcome", "acquired", "service", "test"}, 2},
		{"fairlock_acquisitions_total", []string{"primitive", "reentrant", "outcome", "acquired"}, 1},
		{"fairlock_acquisitions_total", []string{"primitive", "reentrant", "outcome", "timed_out"}, 1},
		{"fairlock_acquire_duration_seconds", []string{"primitive", "fair", "queued", "true"}, 1},
		{"fairlock_acquire_duration_seconds", []string{"primitive", "fair", "queued", "false"}, 1},
		{"fairlock_hold_duration_seconds", []string{"end", "released"}, 3},
		{"fairlock_handoff_duration_seconds", []string{"primitive", "fair"}, 1},
		{"fairlock_queue_length", nil, 0},
	} {
		if got := value(fams[check.family], check.labels...); got != check.want {
			t.Errorf("%s%v: got %v, want %v", check.family, check.labels, got, check.want)
		}
	}
	h := fams["fairlock_acquire_duration_seconds"].GetMetric()[0].GetHistogram()
	if b := h.GetBucket(); len(b) < 17 || b[0].GetUpperBound() != 0.001 || b[16].GetUpperBound() != 300 {
		t.Errorf("buckets: %v", b)
	}
	if got := value(fams["fairlock_holds_lost_total"], "primitive", "fair"); got != 0 {
		t.Errorf("lost holds: %v with none lost", got) // present at 0 from the start
	}
}

func TestWithLockNamesAndBadOptions(t *testing.T) {
	c, err := fairlockprom.New(fairlockprom.WithLockNames())
	if err != nil {
		t.Fatal(err)
	}
	client, name := redistest.RealOrMini(t), redistest.Name(t)
	m, err := fair.New(redistest.Owner(client), name, fairlock.WithObserver(c))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = m.Unlock(context.Background())
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range fams {
		if f.GetName() == "fairlock_acquisitions_total" {
			found = value(f, "lock", name) == 1
		}
	}
	if !found {
		t.Errorf("no acquisitions of the lock named %s", name)
	}
	if _, err := fairlockprom.New(nil); err == nil {
		t.Error("a nil option: no error")
	}
	if _, err := fairlockprom.New(fairlockprom.WithConstLabels(prometheus.Labels{"primitive": "x"})); err == nil {
		t.Error("a constant label named as one of the collector's: no error")
	}
}

// A rescue counts in fairlock_queue_rescues_total, by primitive, and
// nowhere else.
func TestRescuesAreCounted(t *testing.T) {
	c, err := fairlockprom.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []observe.Primitive{observe.Fair, observe.Reentrant, observe.Fair} {
		c.ObserveQueue(observe.QueueEvent{Primitive: p, Lock: "jobs", Kind: observe.Rescued})
	}
	fams := scrape(t, serve(t, c))
	if got := value(fams["fairlock_queue_rescues_total"], "primitive", "fair"); got != 2 {
		t.Errorf("fair rescues: %v, want 2", got)
	}
	if got := value(fams["fairlock_queue_rescues_total"], "primitive", "reentrant"); got != 1 {
		t.Errorf("reentrant rescues: %v, want 1", got)
	}
	if got := value(fams["fairlock_queue_evictions_total"]); got != 0 {
		t.Errorf("evictions: %v, want 0: a rescue counted as an eviction", got)
	}
}

// Before any event every counter has a sample at 0 for each label set
// known at start, so that increase() shows 0 rather than nothing; with
// WithLockNames a lock's series start at its first event.
func TestCountersStartAtZero(t *testing.T) {
	c, err := fairlockprom.New()
	if err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, serve(t, c))
	samples := func(name string) int {
		n := 0
		for _, m := range fams[name].GetMetric() {
			if m.GetCounter().GetValue() != 0 {
				t.Errorf("%s%v = %v before any event", name, m.GetLabel(), m.GetCounter().GetValue())
			}
			n++
		}
		return n
	}
	primitives, outcomes := len(observe.Primitives()), len(observe.Outcomes())
	for name, want := range map[string]int{
		"fairlock_acquisitions_total":    primitives * outcomes,
		"fairlock_holds_lost_total":      primitives,
		"fairlock_renewals_failed_total": primitives,
		"fairlock_queue_evictions_total": 4, // the primitives that queue: fair, election, semaphore, rwmutex
		"fairlock_queue_rescues_total":   4,
	} {
		if got := samples(name); got != want {
			t.Errorf("%s: %d samples at 0, want %d", name, got, want)
		}
	}
	named, err := fairlockprom.New(fairlockprom.WithLockNames())
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := scrape(t, serve(t, named))["fairlock_holds_lost_total"]; ok {
		t.Errorf("with lock names, %d lost-hold series before any event, want none", len(f.GetMetric()))
	}
}
