// Package measures names fairlock's metrics once: the OpenTelemetry and
// Prometheus modules (extra/) and the demo's /metrics all make theirs from
// these, so a name, unit, label or description cannot differ between them.
// docs/observability.md lists them for users.
package measures

// Kind is what sort of instrument a measure is.
type Kind int

// The kinds.
const (
	Histogram Kind = iota // durations, in seconds, over observe.DurationBuckets
	Counter
	Gauge
)

// Measure is one metric.
type Measure struct {
	OTel string // its OpenTelemetry name
	Prom string // its Prometheus name, as OTel's exporter would give it
	Unit string // its OpenTelemetry unit
	Kind Kind
	// Labels are its Prometheus labels after "primitive" (and before
	// "lock", with the lock names on).
	Labels []string
	Help   string
}

// The measures.
var (
	AcquireDuration = Measure{OTel: "fairlock.acquire.duration", Prom: "fairlock_acquire_duration_seconds", Unit: "s",
		Kind: Histogram, Labels: []string{"outcome", "queued"},
		Help: "How long an acquisition took, from the call to its return, whatever its outcome."}
	HoldDuration = Measure{OTel: "fairlock.hold.duration", Prom: "fairlock_hold_duration_seconds", Unit: "s",
		Kind: Histogram, Labels: []string{"end"},
		Help: "How long a hold lasted, from its acquisition to its end."}
	HandOffDuration = Measure{OTel: "fairlock.handoff.duration", Prom: "fairlock_handoff_duration_seconds", Unit: "s",
		Kind: Histogram,
		Help: "A direct hand-off's latency as the new holder saw it: from the grant to the acquisition's return."}
	Acquisitions = Measure{OTel: "fairlock.acquisitions", Prom: "fairlock_acquisitions_total", Unit: "{acquisition}",
		Kind: Counter, Labels: []string{"outcome"},
		Help: "Acquisitions, by outcome."}
	HoldsLost = Measure{OTel: "fairlock.holds.lost", Prom: "fairlock_holds_lost_total", Unit: "{hold}",
		Kind: Counter,
		Help: "Holds lost: found gone or taken, or their lease ran out before a renewal succeeded."}
	RenewalsFailed = Measure{OTel: "fairlock.renewals.failed", Prom: "fairlock_renewals_failed_total", Unit: "{renewal}",
		Kind: Counter,
		Help: "Renewals of a lease that failed (the watchdog tries again)."}
	QueueEvictions = Measure{OTel: "fairlock.queue.evictions", Prom: "fairlock_queue_evictions_total", Unit: "{waiter}",
		Kind: Counter,
		Help: "Waiters of this process evicted from a fair queue after falling silent."}
	QueueRescues = Measure{OTel: "fairlock.queue.rescues", Prom: "fairlock_queue_rescues_total", Unit: "{wait}",
		Kind: Counter,
		Help: "Waiters of this process that learned of their turn from a fallback, not from their message (a message was lost)."}
	QueueLength = Measure{OTel: "fairlock.queue.length", Prom: "fairlock_queue_length", Unit: "{waiter}",
		Kind: Gauge,
		Help: "The length of the fair queues this process has waiters in, as Redis last told them."}
)

// All is every measure, in the order they are listed and served.
var All = []Measure{AcquireDuration, HoldDuration, HandOffDuration, Acquisitions, HoldsLost, RenewalsFailed,
	QueueEvictions, QueueRescues, QueueLength}
