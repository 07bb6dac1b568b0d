// Package fairlockotel reports fairlock's locks to OpenTelemetry: metrics
// of how long callers wait and hold, of acquisitions by outcome, of lost
// holds, and of the queues this process waits in, and a span around every
// acquisition and release.
//
// It is a module of its own, so that fairlock's own go.mod stays free of
// OpenTelemetry. Give the Observer New returns to each primitive:
//
//	obs, err := fairlockotel.New()
//	m, err := fair.New(owner, "jobs", fairlock.WithObserver(obs)) // owner: fairlock.NewOwner(client)
//
// Metric names are in a namespace of fairlock's own (OpenTelemetry has no
// conventions for locks); spans follow the database conventions where they
// apply. docs/observability.md in fairlock's repository lists every metric
// with its unit and meaning, and ready queries.
//
// The lock's name is not an attribute unless WithLockNames is given: a
// service that makes locks per job or per user would make a time series
// per name. The primitive and the outcome are always attributes.
package fairlockotel

import (
	"context"
	"errors"

	"github.com/fairlock/fairlock/internal/measures"
	"github.com/fairlock/fairlock/observe"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/fairlock/fairlock/extra/fairlockotel"

// The attributes of fairlock's own.
const (
	PrimitiveKey = attribute.Key("fairlock.primitive")    // fair, election, reentrant, semaphore, rwmutex, redlock
	OutcomeKey   = attribute.Key("fairlock.outcome")      // acquired, reentered, timed_out, cancelled, error
	QueuedKey    = attribute.Key("fairlock.queued")       // whether the acquisition waited in a fair queue
	HoldEndKey   = attribute.Key("fairlock.hold.end")     // released, lost, lease_ran_out, release_unknown
	LockNameKey  = attribute.Key("fairlock.lock.name")    // only with WithLockNames
	OperationKey = attribute.Key("fairlock.operation")    // acquire or release (spans)
	QueueLenKey  = attribute.Key("fairlock.queue.length") // at join (spans)
)

// Option configures New.
type Option func(*config) error

type config struct {
	meters  metric.MeterProvider
	tracers trace.TracerProvider
	names   bool
}

// WithMeterProvider sets where the metrics go (default: the global
// provider, otel.GetMeterProvider).
func WithMeterProvider(p metric.MeterProvider) Option {
	return func(c *config) error {
		if p == nil {
			return errors.New("fairlockotel: meter provider must not be nil")
		}
		c.meters = p
		return nil
	}
}

// WithTracerProvider sets where the spans go (default: the global
// provider, otel.GetTracerProvider).
func WithTracerProvider(p trace.TracerProvider) Option {
	return func(c *config) error {
		if p == nil {
			return errors.New("fairlockotel: tracer provider must not be nil")
		}
		c.tracers = p
		return nil
	}
}

// WithLockNames adds the lock's name (fairlock.lock.name) to every metric
// and span. Use it when the names are few and fixed.
func WithLockNames() Option {
	return func(c *config) error {
		c.names = true
		return nil
	}
}

// Observer is an observe.Observer with every capability, recording to
// OpenTelemetry. It is safe for concurrent use, and one Observer serves any
// number of primitives.
type Observer struct {
	tracer trace.Tracer
	names  bool

	wait, hold, handOff                         metric.Float64Histogram
	acquisitions, lost, renewals, evict, rescue metric.Int64Counter

	queues observe.QueueLengths
}

// New returns an Observer that records to the given (or global) providers.
func New(opts ...Option) (*Observer, error) {
	c := config{meters: otel.GetMeterProvider(), tracers: otel.GetTracerProvider()}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("fairlockotel: option must not be nil")
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	m := c.meters.Meter(ScopeName)
	o := &Observer{tracer: c.tracers.Tracer(ScopeName), names: c.names}
	buckets := metric.WithExplicitBucketBoundaries(observe.DurationBuckets()...)
	var errs []error
	hist := func(d measures.Measure) metric.Float64Histogram {
		h, err := m.Float64Histogram(d.OTel, metric.WithUnit(d.Unit), metric.WithDescription(d.Help), buckets)
		errs = append(errs, err)
		return h
	}
	count := func(d measures.Measure) metric.Int64Counter {
		h, err := m.Int64Counter(d.OTel, metric.WithUnit(d.Unit), metric.WithDescription(d.Help))
		errs = append(errs, err)
		return h
	}
	o.wait = hist(measures.AcquireDuration)
	o.hold = hist(measures.HoldDuration)
	o.handOff = hist(measures.HandOffDuration)
	o.acquisitions = count(measures.Acquisitions)
	o.lost = count(measures.HoldsLost)
	o.renewals = count(measures.RenewalsFailed)
	o.evict = count(measures.QueueEvictions)
	o.rescue = count(measures.QueueRescues)
	q := measures.QueueLength
	_, err := m.Int64ObservableGauge(q.OTel, metric.WithUnit(q.Unit), metric.WithDescription(q.Help),
		metric.WithInt64Callback(o.observeQueues))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if !c.names {
		o.startAtZero()
	}
	return o, nil
}

// startAtZero records 0 on every counter for each attribute set known
// before the first event (the primitive, and an acquisition's outcome), so
// that a rate over them shows 0 rather than nothing. With WithLockNames a
// lock's series start at its first event: its name is not known before.
func (o *Observer) startAtZero() {
	ctx := context.Background()
	for _, p := range observe.Primitives() {
		for _, out := range observe.Outcomes() {
			o.acquisitions.Add(ctx, 0, o.attrs(p, "", OutcomeKey.String(string(out))))
		}
		o.lost.Add(ctx, 0, o.attrs(p, ""))
		o.renewals.Add(ctx, 0, o.attrs(p, ""))
		if p.Queued() {
			o.evict.Add(ctx, 0, o.attrs(p, ""))
			o.rescue.Add(ctx, 0, o.attrs(p, ""))
		}
	}
}

func (o *Observer) attrs(p observe.Primitive, name string, kv ...attribute.KeyValue) metric.MeasurementOption {
	kv = append(kv, PrimitiveKey.String(string(p)))
	if o.names {
		kv = append(kv, LockNameKey.String(name))
	}
	return metric.WithAttributes(kv...)
}

// ObserveAcquisition implements observe.Observer.
func (o *Observer) ObserveAcquisition(ctx context.Context, a observe.Acquisition) {
	set := o.attrs(a.Primitive, a.Lock, OutcomeKey.String(string(a.Outcome)), QueuedKey.Bool(a.Queued))
	o.wait.Record(ctx, a.Wait.Seconds(), set)
	o.acquisitions.Add(ctx, 1, o.attrs(a.Primitive, a.Lock, OutcomeKey.String(string(a.Outcome))))
	if a.HandedOff {
		o.handOff.Record(ctx, a.HandOff.Seconds(), o.attrs(a.Primitive, a.Lock))
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(OutcomeKey.String(string(a.Outcome)), QueuedKey.Bool(a.Queued))
		if a.Queued {
			span.SetAttributes(QueueLenKey.Int(a.QueueLength))
		}
	}
	o.queues.Acquisition(a)
}

// ObserveHoldEnd implements observe.Observer.
func (o *Observer) ObserveHoldEnd(h observe.Hold) {
	ctx := context.Background()
	o.hold.Record(ctx, h.Held.Seconds(), o.attrs(h.Primitive, h.Lock, HoldEndKey.String(string(h.End))))
	if h.End == observe.Lost {
		o.lost.Add(ctx, 1, o.attrs(h.Primitive, h.Lock))
	}
}

// ObserveRenewalFailure implements observe.RenewalObserver.
func (o *Observer) ObserveRenewalFailure(r observe.RenewalFailure) {
	o.renewals.Add(context.Background(), 1, o.attrs(r.Primitive, r.Lock))
}

// ObserveQueue implements observe.QueueObserver.
func (o *Observer) ObserveQueue(e observe.QueueEvent) {
	switch e.Kind {
	case observe.Evicted:
		o.evict.Add(context.Background(), 1, o.attrs(e.Primitive, e.Lock))
	case observe.Rescued:
		o.rescue.Add(context.Background(), 1, o.attrs(e.Primitive, e.Lock))
	}
	o.queues.Queue(e)
}

// observeQueues reports the queue lengths: per lock with WithLockNames,
// else per primitive, summed over its locks.
func (o *Observer) observeQueues(_ context.Context, obs metric.Int64Observer) error {
	sums := map[observe.Primitive]int64{}
	o.queues.Each(func(p observe.Primitive, lock string, n int) {
		if o.names {
			obs.Observe(int64(n), metric.WithAttributes(PrimitiveKey.String(string(p)), LockNameKey.String(lock)))
			return
		}
		sums[p] += int64(n)
	})
	for p, n := range sums {
		obs.Observe(n, metric.WithAttributes(PrimitiveKey.String(string(p))))
	}
	return nil
}

// StartCall implements observe.Tracer: a client span named after the
// primitive and the operation ("fair acquire"), with the database
// conventions' attributes.
func (o *Observer) StartCall(ctx context.Context, c observe.Call) (context.Context, func(error)) {
	kv := []attribute.KeyValue{
		semconv.DBSystemNameRedis,
		semconv.DBOperationName("FCALL"),
		PrimitiveKey.String(string(c.Primitive)),
		OperationKey.String(c.Operation),
	}
	if c.Script != "" {
		kv = append(kv, semconv.DBStoredProcedureName(c.Script))
	}
	if c.ServerAddress != "" {
		kv = append(kv, semconv.ServerAddress(c.ServerAddress))
		if c.ServerPort != 0 {
			kv = append(kv, semconv.ServerPort(c.ServerPort))
		}
	}
	if o.names {
		kv = append(kv, LockNameKey.String(c.Lock))
	}
	ctx, span := o.tracer.Start(ctx, string(c.Primitive)+" "+c.Operation,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(kv...))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

var (
	_ observe.Observer        = (*Observer)(nil)
	_ observe.RenewalObserver = (*Observer)(nil)
	_ observe.QueueObserver   = (*Observer)(nil)
	_ observe.Tracer          = (*Observer)(nil)
)
