package fair_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/observe"
)

// The observer hears of every acquisition, hold and queue event of a fair
// lock, as they happen, with what the issue of metrics asks: the wait, the
// outcome, whether the caller queued and behind how many, the hand-off's
// latency, how long a hold lasted and how it ended.
func TestObserverSeesEveryAcquisitionAndHold(t *testing.T) {
	e := newEnv(t)
	rec := &redistest.Recorder{}
	obs := fairlock.WithObserver(rec)
	a, b, c := e.handleOn(e.process(), obs), e.handleOn(e.process(), obs), e.handleOn(e.process(), obs)
	ctx := context.Background()

	hctx, err := a.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Lock(hctx); err != nil { // a re-entry
		t.Fatal(err)
	}
	gotB := e.enqueue(b, 1)
	gotC := e.enqueue(c, 2)
	e.clk.Advance(3 * time.Second) // a holds for 3 s, b and c wait
	mustUnlock(t, a)               // the re-entry
	mustUnlock(t, a)               // hands the lock to b
	if r := await(t, gotB); !r.ok || r.err != nil {
		t.Fatalf("b: %v, %v", r.ok, r.err)
	}
	e.clk.Advance(time.Second)
	mustUnlock(t, b)
	if r := await(t, gotC); !r.ok || r.err != nil {
		t.Fatalf("c: %v, %v", r.ok, r.err)
	}
	mustUnlock(t, c)

	got := rec.Snapshot()
	want := []struct {
		outcome observe.Outcome
		queued  bool
		length  int
		handOff bool
	}{
		{observe.Acquired, false, 0, false},  // a
		{observe.Reentered, false, 0, false}, // a again
		{observe.Acquired, true, 1, true},    // b: queued alone, handed the lock
		{observe.Acquired, true, 2, true},    // c: queued behind b
	}
	if len(got.Acquisitions) != len(want) {
		t.Fatalf("acquisitions: got %d, want %d: %+v", len(got.Acquisitions), len(want), got.Acquisitions)
	}
	for i, w := range want {
		g := got.Acquisitions[i]
		if g.Primitive != observe.Fair || g.Lock != lockName || g.Outcome != w.outcome || g.Queued != w.queued ||
			g.QueueLength != w.length || g.HandedOff != w.handOff || g.Err != nil {
			t.Errorf("acquisition %d: got %+v, want %+v", i, g, w)
		}
	}
	// b joined before a's 3 s, and waited through them; c waited for b too.
	if w := got.Acquisitions[2].Wait; w < 3*time.Second {
		t.Errorf("b's wait: got %v, want at least 3s", w)
	}
	if w := got.Acquisitions[3].Wait; w < 4*time.Second {
		t.Errorf("c's wait: got %v, want at least 4s", w)
	}
	// Three holds, each ended by its Unlock; b held for the 1 s the clock moved.
	if len(got.Holds) != 3 {
		t.Fatalf("holds: got %+v, want 3", got.Holds)
	}
	for i, h := range got.Holds {
		if h.Primitive != observe.Fair || h.End != observe.Released || h.Cause != "" {
			t.Errorf("hold %d: %+v", i, h)
		}
	}
	if h := got.Holds[0].Held; h != 3*time.Second {
		t.Errorf("a's hold: got %v, want 3s", h)
	}
	if h := got.Holds[1].Held; h != time.Second {
		t.Errorf("b's hold: got %v, want 1s", h)
	}
	// The queue: b joined a queue of 1, c of 2.
	var joined []int
	for _, q := range got.Queue {
		if q.Kind == observe.Joined {
			joined = append(joined, q.Length)
		}
		if q.Primitive != observe.Fair || q.Lock != lockName {
			t.Errorf("queue event: %+v", q)
		}
	}
	if len(joined) != 2 || joined[0] != 1 || joined[1] != 2 {
		t.Errorf("queue lengths at join: got %v, want [1 2]", joined)
	}
	// Every acquisition and release was a span, ended, with the lock's
	// acquiring script named; the acquisition was reported inside it.
	var acquires, releases int
	for _, s := range got.Calls {
		if !s.Ended || s.Err != nil || s.Primitive != observe.Fair || s.Lock != lockName || s.ServerAddress != "127.0.0.1" || s.ServerPort == 0 {
			t.Errorf("span: %+v", s)
		}
		switch s.Operation {
		case "acquire":
			acquires++
			if !s.Traced || s.Script == "" {
				t.Errorf("acquire span: %+v", s)
			}
		case "release":
			releases++
		}
	}
	if acquires != 4 || releases != 4 {
		t.Errorf("spans: %d acquire, %d release; want 4 and 4", acquires, releases)
	}
}

// A wait that elapsed, a ctx cancelled and a ctx past its deadline are three
// outcomes; an error of another kind is a fourth.
func TestObserverOutcomesOfAcquisitionsThatFail(t *testing.T) {
	e := newEnv(t)
	rec := &redistest.Recorder{}
	holder, waiter := e.handleOn(e.process()), e.handleOn(e.process(), fairlock.WithObserver(rec))
	mustLock(t, holder)
	defer unlockAll(holder)

	if ok, err := waiter.TryLock(context.Background(), 0, 0); ok || err != nil {
		t.Fatalf("TryLock: %v, %v", ok, err)
	}
	got := tryLockAsync(waiter, context.Background(), time.Second, 0)
	e.settle(1)
	e.clk.Advance(time.Second)
	await(t, got)

	ctx, cancel := context.WithCancel(context.Background())
	got = e.enqueueCtx(ctx, waiter, 1)
	cancel()
	await(t, got)

	dctx, dcancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer dcancel()
	_ = waiter.Lock(dctx)

	e.mr.SetError("LOADING Redis is loading the dataset in memory")
	_ = waiter.Lock(context.Background()) // not transient before a place is had: an error
	e.mr.SetError("")

	want := []observe.Outcome{observe.TimedOut, observe.TimedOut, observe.Cancelled, observe.TimedOut, observe.Failed}
	acqs := rec.Snapshot().Acquisitions
	if len(acqs) != len(want) {
		t.Fatalf("got %+v, want outcomes %v", acqs, want)
	}
	for i, w := range want {
		if acqs[i].Outcome != w {
			t.Errorf("acquisition %d: got %s (%v), want %s", i, acqs[i].Outcome, acqs[i].Err, w)
		}
		if (i >= 2) == (acqs[i].Err == nil) { // an elapsed wait is no error

			t.Errorf("acquisition %d: err %v", i, acqs[i].Err)
		}
	}
	if !acqs[1].Queued || acqs[1].Wait != time.Second {
		t.Errorf("the TryLock that waited 1 s: %+v", acqs[1])
	}
	if len(rec.Snapshot().Holds) != 0 {
		t.Errorf("holds reported with none taken: %+v", rec.Snapshot().Holds)
	}
}

// A hold whose fixed lease ran out, and one lost after its renewals failed,
// end as such; every failed renewal is reported.
func TestObserverSeesLeasesRunOutAndLostHolds(t *testing.T) {
	e := newEnv(t)
	rec := &redistest.Recorder{}
	m := e.handleOn(e.client, fairlock.WithObserver(rec), fairlock.WithLease(3*time.Second))
	if ok, err := m.TryLock(context.Background(), 0, time.Second); !ok || err != nil {
		t.Fatalf("TryLock: %v, %v", ok, err)
	}
	e.clk.Advance(time.Second)
	waitUntil(t, "the fixed lease ran out", func() bool { return isClosed(m.Lost()) })

	mustLock(t, m)
	e.mr.SetError("ERR injected: renewals fail")
	for !isClosed(m.Lost()) {
		e.clk.Advance(500 * time.Millisecond)
		redistest.Quiet(t, "the watchdog's round is over", func() bool { return true })
	}
	e.mr.SetError("")
	got := rec.Snapshot()
	if len(got.Holds) != 2 || got.Holds[0].End != observe.LeaseRanOut || got.Holds[1].End != observe.Lost ||
		got.Holds[1].Cause == "" || got.Holds[0].Held > time.Second || got.Holds[0].Held < 900*time.Millisecond {
		t.Fatalf("holds: %+v", got.Holds)
	}
	if len(got.Renewals) == 0 {
		t.Fatal("no failed renewal reported")
	}
	for _, r := range got.Renewals {
		if r.Primitive != observe.Fair || r.Lock != lockName || r.Err == nil {
			t.Errorf("renewal failure: %+v", r)
		}
	}
}

// A semaphore's and a read-write lock's acquisitions are theirs, not their
// gate's: the gate's own holds are not reported, its queue is.
func TestObserverOfTheSemaphoreAndTheRWMutex(t *testing.T) {
	e := newEnv(t)
	rec := &redistest.Recorder{}
	ctx := context.Background()
	s, err := fair.NewSemaphore(redistest.OwnerOn(e.client, e.clk, nil), "pool", 1, fairlock.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *fair.Permit, 2)
	for i := range 2 {
		go func() {
			q, err := s.Acquire(ctx, 1)
			if err != nil {
				t.Error(err)
			}
			done <- q
		}()
		waitUntil(t, "the waiter is queued", func() bool {
			st, err := fair.InspectSemaphore(ctx, e.client, "pool")
			return err == nil && len(st.Queue) == i+1
		})
		redistest.Quiet(t, "the waiter sleeps", func() bool { return redistest.Asleep() == i+1 })
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	q := <-done
	_ = q.Release(ctx)
	_ = (<-done).Release(ctx)

	rw, err := fair.NewRWMutex(redistest.OwnerOn(e.client, e.clk, nil), "rw", fairlock.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	if err := rw.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rw.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}

	got := rec.Snapshot()
	count := map[observe.Primitive]int{}
	for _, a := range got.Acquisitions {
		count[a.Primitive]++
		if a.Outcome != observe.Acquired {
			t.Errorf("acquisition: %+v", a)
		}
	}
	if count[observe.Semaphore] != 3 || count[observe.RWMutex] != 1 || len(got.Acquisitions) != 4 {
		t.Errorf("acquisitions by primitive: %v", count)
	}
	if len(got.Holds) != 4 {
		t.Errorf("holds: got %d, want 4 (the gates' are not the user's): %+v", len(got.Holds), got.Holds)
	}
	queued := 0
	for _, a := range got.Acquisitions {
		if a.Queued {
			queued++
		}
	}
	for _, q := range got.Queue {
		if q.Primitive != observe.Semaphore || q.Lock != "pool" {
			t.Errorf("queue event: %+v", q)
		}
	}
	if queued == 0 {
		t.Error("no semaphore waiter reported queueing behind the first")
	}
}

// A nil observer is a clear error.
func TestWithObserverRejectsNil(t *testing.T) {
	e := newEnv(t)
	if _, err := fair.New(redistest.Owner(e.client), lockName, fairlock.WithObserver(nil)); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Fatalf("got %v, want ErrInvalidArgument", err)
	}
}
