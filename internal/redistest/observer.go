package redistest

import (
	"context"
	"sync"

	"github.com/fairlock/fairlock/observe"
)

// Recorder is an observe.Observer with every capability that keeps what it
// is told, for tests to read back.
type Recorder struct {
	mu           sync.Mutex
	Acquisitions []observe.Acquisition
	Holds        []observe.Hold
	Renewals     []observe.RenewalFailure
	Queue        []observe.QueueEvent
	Calls        []RecordedCall
}

// RecordedCall is a span a Recorder was asked to start, and its end.
type RecordedCall struct {
	observe.Call
	Ended bool
	Err   error
	// Traced reports whether the call's context was the one StartCall
	// returned when the acquisition was reported.
	Traced bool
}

type spanKey struct{}

func (r *Recorder) ObserveAcquisition(ctx context.Context, a observe.Acquisition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Acquisitions = append(r.Acquisitions, a)
	if i, ok := ctx.Value(spanKey{}).(int); ok {
		r.Calls[i].Traced = true
	}
}

func (r *Recorder) ObserveHoldEnd(h observe.Hold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Holds = append(r.Holds, h)
}

func (r *Recorder) ObserveRenewalFailure(f observe.RenewalFailure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Renewals = append(r.Renewals, f)
}

func (r *Recorder) ObserveQueue(e observe.QueueEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Queue = append(r.Queue, e)
}

func (r *Recorder) StartCall(ctx context.Context, c observe.Call) (context.Context, func(error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := len(r.Calls)
	r.Calls = append(r.Calls, RecordedCall{Call: c})
	return context.WithValue(ctx, spanKey{}, i), func(err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.Calls[i].Ended, r.Calls[i].Err = true, err
	}
}

// Snapshot returns a copy of what r has recorded so far.
func (r *Recorder) Snapshot() Recorder {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Recorder{
		Acquisitions: append([]observe.Acquisition(nil), r.Acquisitions...),
		Holds:        append([]observe.Hold(nil), r.Holds...),
		Renewals:     append([]observe.RenewalFailure(nil), r.Renewals...),
		Queue:        append([]observe.QueueEvent(nil), r.Queue...),
		Calls:        append([]RecordedCall(nil), r.Calls...),
	}
}

// QueueEvents returns how many queue events of kind r has recorded.
func (r *Recorder) QueueEvents(kind observe.QueueEventKind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.Queue {
		if e.Kind == kind {
			n++
		}
	}
	return n
}
