package fair_test

import (
	"context"
	"errors"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/redistest"
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

// An Unlock (or Resign) made after its ctx's deadline had passed, as a
// deferred one is when the work ran late, gets its grace of 50 ms from the
// call, as under a cancelled ctx: it returns nil with the lock released,
// or, if Redis takes longer than the grace, ErrPending after waiting it.
// (It counted the grace from the deadline: called 60 ms or more after it,
// it returned ErrPending at once, the lock still held.) The owner runs on
// the real clock: the grace is real time.
func TestUnlockAfterTheDeadlineGetsItsGraceFromTheCall(t *testing.T) {
	e := newEnv(t)
	owner, err := redistest.NewOwner(e.process(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = owner.Close(context.Background()) }()
	for _, late := range []time.Duration{60 * time.Millisecond, 2 * time.Second} {
		for _, resign := range []bool{false, true} {
			name := "invoices"
			var unlock func(context.Context) error
			var hctx context.Context
			far, cancelFar := context.WithTimeout(context.Background(), time.Hour)
			if resign {
				el, err := fair.NewElection(owner, "scheduler")
				if err != nil {
					t.Fatal(err)
				}
				if hctx, err = el.Campaign(far, "a"); err != nil {
					t.Fatal(err)
				}
				name, unlock = "scheduler", el.Resign
			} else {
				m, err := fair.New(owner, name)
				if err != nil {
					t.Fatal(err)
				}
				if hctx, err = m.LockContext(far); err != nil {
					t.Fatal(err)
				}
				unlock = m.Unlock
			}
			// The hold's context, its deadline passed late ago.
			ended, cancel := context.WithDeadline(hctx, time.Now().Add(-late))
			start := time.Now()
			err := unlock(ended)
			took := time.Since(start)
			cancel()
			cancelFar()
			if err != nil && !(errors.Is(err, fairlock.ErrPending) && took >= core.Grace) {
				t.Fatalf("%s %v after the deadline: %v after %v; want nil, or ErrPending after the 50 ms grace",
					name, late, err, took)
			}
			if err == nil {
				holder, err := (*fair.Holder)(nil), error(nil)
				if resign {
					var st fair.ElectionState
					st, err = fair.InspectElection(context.Background(), e.client, name)
					holder = st.Holder
				} else {
					var st fair.State
					st, err = fair.Inspect(context.Background(), e.client, name)
					holder = st.Holder
				}
				if err != nil || holder != nil {
					t.Fatalf("%s: the call returned nil with the hold still in Redis: %+v, %v", name, holder, err)
				}
			}
		}
	}
}
