package observe_test

import (
	"context"
	"testing"

	"github.com/fairlock/fairlock/observe"
)

func lengths(q *observe.QueueLengths) map[string]int {
	out := map[string]int{}
	q.Each(func(p observe.Primitive, lock string, n int) { out[string(p)+" "+lock] = n })
	return out
}

// A queue shows while this process has a waiter in it, with the latest
// length Redis told; an eviction and its re-join are the same wait.
func TestQueueLengthsFollowTheWaiters(t *testing.T) {
	var q observe.QueueLengths
	ev := func(kind observe.QueueEventKind, n int) {
		q.Queue(observe.QueueEvent{Primitive: observe.Fair, Lock: "jobs", Kind: kind, Length: n})
	}
	ended := func() { q.Acquisition(observe.Acquisition{Primitive: observe.Fair, Lock: "jobs", Queued: true}) }

	ev(observe.Joined, 1)
	ev(observe.Joined, 2) // a second waiter of this process
	if got := lengths(&q); got["fair jobs"] != 2 || len(got) != 1 {
		t.Fatalf("two waiters: %v", got)
	}
	ev(observe.Evicted, 0)
	ev(observe.Waiting, 3) // the evicted one, back at the tail
	ended()
	if got := lengths(&q); got["fair jobs"] != 3 {
		t.Fatalf("one waiter left: %v", got)
	}
	q.Acquisition(observe.Acquisition{Primitive: observe.Fair, Lock: "jobs"}) // did not queue: no change
	if got := lengths(&q); len(got) != 1 {
		t.Fatalf("an acquisition that did not queue ended a wait: %v", got)
	}
	ended()
	if got := lengths(&q); len(got) != 0 {
		t.Fatalf("no waiter left, and still shown: %v", got)
	}
}

type ctxKey struct{}

// Nop has every capability and does nothing; its StartCall keeps ctx.
func TestNop(t *testing.T) {
	var o observe.Observer = observe.Nop{}
	ctx := context.WithValue(context.Background(), ctxKey{}, 1)
	got, end := o.(observe.Tracer).StartCall(ctx, observe.Call{})
	end(nil)
	if got != ctx {
		t.Fatal("Nop.StartCall changed the context")
	}
	if _, ok := o.(observe.QueueObserver); !ok {
		t.Fatal("Nop is no QueueObserver")
	}
	if _, ok := o.(observe.RenewalObserver); !ok {
		t.Fatal("Nop is no RenewalObserver")
	}
}
