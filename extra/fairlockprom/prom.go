// Package fairlockprom reports fairlock's locks to Prometheus: a
// client_golang Collector with histograms of how long callers wait and
// hold, counters of acquisitions by outcome, of lost holds, failed renewals,
// evictions and rescues, and a gauge of the queues this process waits in.
//
// It is a module of its own, so that fairlock's own go.mod stays free of
// Prometheus. Register the Collector New returns, and give it to each
// primitive:
//
//	c, err := fairlockprom.New()
//	prometheus.MustRegister(c)
//	m, err := fair.New(owner, "jobs", fairlock.WithObserver(c)) // owner: fairlock.NewOwner(client)
//
// The measures are those of the OpenTelemetry module
// (extra/fairlockotel), under the names its Prometheus exporter would give
// them; docs/observability.md in fairlock's repository lists each, with
// ready queries. The lock's name is a label only with WithLockNames.
package fairlockprom

import (
	"context"
	"errors"

	"github.com/fairlock/fairlock/internal/measures"
	"github.com/fairlock/fairlock/observe"
	"github.com/prometheus/client_golang/prometheus"
)

// Option configures New.
type Option func(*config) error

type config struct {
	names       bool
	constLabels prometheus.Labels
}

// WithLockNames adds the lock's name (label "lock") to every metric. Use it
// when the names are few and fixed: each name is a time series of its own.
func WithLockNames() Option {
	return func(c *config) error {
		c.names = true
		return nil
	}
}

// WithConstLabels adds labels with fixed values to every metric (a
// service's name, say).
func WithConstLabels(l prometheus.Labels) Option {
	return func(c *config) error {
		for k := range l {
			switch k {
			case "primitive", "outcome", "queued", "end", "lock":
				return errors.New("fairlockprom: constant label " + k + " is one of the collector's own")
			}
		}
		c.constLabels = l
		return nil
	}
}

// Collector is an observe.Observer with every capability but spans, and a
// prometheus.Collector. It is safe for concurrent use; one Collector serves
// any number of primitives.
type Collector struct {
	names bool

	wait, hold, handOff                         *prometheus.HistogramVec
	acquisitions, lost, renewals, evict, rescue *prometheus.CounterVec
	queueLen                                    *prometheus.Desc

	queues observe.QueueLengths
}

// New returns a Collector, to register with a prometheus.Registerer.
func New(opts ...Option) (*Collector, error) {
	var c config
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("fairlockprom: option must not be nil")
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	labels := func(l ...string) []string {
		l = append([]string{"primitive"}, l...)
		if c.names {
			l = append(l, "lock")
		}
		return l
	}
	hist := func(d measures.Measure) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: d.Prom, Help: d.Help,
			Buckets: observe.DurationBuckets(), ConstLabels: c.constLabels}, labels(d.Labels...))
	}
	count := func(d measures.Measure) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: d.Prom, Help: d.Help,
			ConstLabels: c.constLabels}, labels(d.Labels...))
	}
	q := measures.QueueLength
	col := &Collector{
		names:        c.names,
		wait:         hist(measures.AcquireDuration),
		hold:         hist(measures.HoldDuration),
		handOff:      hist(measures.HandOffDuration),
		acquisitions: count(measures.Acquisitions),
		lost:         count(measures.HoldsLost),
		renewals:     count(measures.RenewalsFailed),
		evict:        count(measures.QueueEvictions),
		rescue:       count(measures.QueueRescues),
		queueLen:     prometheus.NewDesc(q.Prom, q.Help, labels(q.Labels...), c.constLabels),
	}
	if !c.names {
		col.startAtZero()
	}
	return col, nil
}

// startAtZero makes every counter's series whose labels are known before
// the first event (the primitive, and an acquisition's outcome) exist at 0,
// so that increase() and rate() over them show 0 rather than nothing. With
// WithLockNames a lock's series start at its first event: its name is not
// known before.
func (c *Collector) startAtZero() {
	for _, p := range observe.Primitives() {
		for _, o := range observe.Outcomes() {
			c.acquisitions.WithLabelValues(string(p), string(o))
		}
		c.lost.WithLabelValues(string(p))
		c.renewals.WithLabelValues(string(p))
		if p.Queued() {
			c.evict.WithLabelValues(string(p))
			c.rescue.WithLabelValues(string(p))
		}
	}
}

func (c *Collector) values(p observe.Primitive, lock string, v ...string) []string {
	v = append([]string{string(p)}, v...)
	if c.names {
		v = append(v, lock)
	}
	return v
}

func boolLabel(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// ObserveAcquisition implements observe.Observer.
func (c *Collector) ObserveAcquisition(_ context.Context, a observe.Acquisition) {
	c.wait.WithLabelValues(c.values(a.Primitive, a.Lock, string(a.Outcome), boolLabel(a.Queued))...).Observe(a.Wait.Seconds())
	c.acquisitions.WithLabelValues(c.values(a.Primitive, a.Lock, string(a.Outcome))...).Inc()
	if a.HandedOff {
		c.handOff.WithLabelValues(c.values(a.Primitive, a.Lock)...).Observe(a.HandOff.Seconds())
	}
	c.queues.Acquisition(a)
}

// ObserveHoldEnd implements observe.Observer.
func (c *Collector) ObserveHoldEnd(h observe.Hold) {
	c.hold.WithLabelValues(c.values(h.Primitive, h.Lock, string(h.End))...).Observe(h.Held.Seconds())
	if h.End == observe.Lost {
		c.lost.WithLabelValues(c.values(h.Primitive, h.Lock)...).Inc()
	}
}

// ObserveRenewalFailure implements observe.RenewalObserver.
func (c *Collector) ObserveRenewalFailure(r observe.RenewalFailure) {
	c.renewals.WithLabelValues(c.values(r.Primitive, r.Lock)...).Inc()
}

// ObserveQueue implements observe.QueueObserver.
func (c *Collector) ObserveQueue(e observe.QueueEvent) {
	switch e.Kind {
	case observe.Evicted:
		c.evict.WithLabelValues(c.values(e.Primitive, e.Lock)...).Inc()
	case observe.Rescued:
		c.rescue.WithLabelValues(c.values(e.Primitive, e.Lock)...).Inc()
	}
	c.queues.Queue(e)
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range []prometheus.Collector{c.wait, c.hold, c.handOff, c.acquisitions, c.lost, c.renewals, c.evict, c.rescue} {
		v.Describe(ch)
	}
	ch <- c.queueLen
}

// Collect implements prometheus.Collector. The queue gauge has a series
// per lock with WithLockNames, else one per primitive, summed over its
// locks.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, v := range []prometheus.Collector{c.wait, c.hold, c.handOff, c.acquisitions, c.lost, c.renewals, c.evict, c.rescue} {
		v.Collect(ch)
	}
	sums := map[observe.Primitive]int{}
	c.queues.Each(func(p observe.Primitive, lock string, n int) {
		if c.names {
			ch <- prometheus.MustNewConstMetric(c.queueLen, prometheus.GaugeValue, float64(n), string(p), lock)
			return
		}
		sums[p] += n
	})
	for p, n := range sums {
		ch <- prometheus.MustNewConstMetric(c.queueLen, prometheus.GaugeValue, float64(n), string(p))
	}
}

var (
	_ observe.Observer        = (*Collector)(nil)
	_ observe.RenewalObserver = (*Collector)(nil)
	_ observe.QueueObserver   = (*Collector)(nil)
	_ prometheus.Collector    = (*Collector)(nil)
)
