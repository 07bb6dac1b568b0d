package fair_test

import (
	"context"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"
)

// goroutinesCreated is how many goroutines the process has started so far.
func goroutinesCreated(t testing.TB) uint64 {
	t.Helper()
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		t.Skip("this Go reports no count of goroutines created")
	}
	return s[0].Value.Uint64()
}

// A Lock and an Unlock whose ctx can end but has not (a request's context:
// no deadline, a deadline farther than go-redis's own bound of a call, or
// a sooner one, which a view of the client keeps) make their calls in the
// caller's goroutine. A goroutine of its own for every call, and the
// hand-offs between threads it took, cost an uncontended pair more than
// its calls on a machine with idle cores (docs/performance.md).
func TestAPairOnACancellableContextStartsNoGoroutine(t *testing.T) {
	e := newEnv(t)
	m := e.handleOn(e.process())
	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	far, cancelFar := context.WithTimeout(context.Background(), time.Hour)
	defer cancelFar()
	// Sooner than go-redis's own bound with its default options (about 2
	// minutes): the library keeps this deadline.
	near, cancelNear := context.WithTimeout(context.Background(), time.Minute)
	defer cancelNear()
	for _, tc := range []struct {
		name string
		ctx  context.Context
	}{{"cancellable", cancellable}, {"far-deadline", far}, {"near-deadline", near}} {
		mustLock(t, m) // the owner's first calls are behind it
		mustUnlock(t, m)
		const pairs = 50
		// The count is the process's: other tests' leftovers start some
		// too (go-redis's cluster clients a node GC timer a minute after
		// each state they load). A goroutine per release would be 50 in
		// every round; the fewest of three rounds is the library's.
		fewest := uint64(1 << 63)
		for range 3 {
			before := goroutinesCreated(t)
			for range pairs {
				if err := m.Lock(tc.ctx); err != nil {
					t.Fatal(err)
				}
				if err := m.Unlock(tc.ctx); err != nil {
					t.Fatal(err)
				}
			}
			fewest = min(fewest, goroutinesCreated(t)-before)
			if fewest <= pairs/5 {
				break
			}
		}
		// Only the runtime's and go-redis's own, if any: one per release
		// would be 50, one per call 100.
		if fewest > pairs/5 {
			t.Errorf("%d pairs on a %s ctx started %d goroutines (the fewest of three rounds)", pairs, tc.name, fewest)
		}
	}
}

// A ctx cancelled while the release is in flight does not stop it: the
// release is made whole, Unlock reports it, and the lock is free.
func TestUnlockWhoseContextIsCancelledMidCallReleases(t *testing.T) {
	e := newEnv(t)
	c := e.process()
	m := e.handleOn(c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	var armed atomic.Bool // the next script call, the release's, cancels ctx
	c.AddHook(onScript(func() {
		if armed.CompareAndSwap(true, false) {
			cancel()
		}
	}))
	armed.Store(true)
	if err := m.Unlock(ctx); err != nil {
		t.Fatalf("Unlock, its ctx cancelled while the release ran = %v, want nil", err)
	}
	if ctx.Err() == nil {
		t.Fatal("the hook did not cancel the ctx: the test tested nothing")
	}
	if h := e.inspect().Holder; h != nil {
		t.Errorf("the lock is still held by %s after the Unlock", h.Owner)
	}
}
