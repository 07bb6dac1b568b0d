package fair_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/observe"
)

func TestWaiterCutOffLongerThanItsWaitTimeoutRejoinsAtTheTail(t *testing.T) {
	e := newEnv(t)
	a, b := e.named("a"), e.named("b")
	cut := &redistest.Partition{}
	cClient := e.process()
	cClient.AddHook(cut)
	rec := &redistest.Recorder{} // c's observer
	c := e.handleOn(cClient, fair.WithLabel("c"), fairlock.WithObserver(rec))
	mustLock(t, a)
	gotC := e.enqueue(c, 1)
	gotB := e.enqueue(b, 2)
	old := e.inspect().Queue[0].Entry

	cut.On.Store(true) // c is partitioned: its heartbeats fail
	for i := 0; i < 48; i++ {
		e.clk.Advance(250 * time.Millisecond) // 12 s, past c's 10 s wait timeout
	}
	if q := e.queued(); !slices.Equal(q, []string{"b"}) {
		t.Fatalf("queue after c was cut off for 12 s = %v, want [b]", q)
	}
	cut.On.Store(false)
	for i := 0; i < 16; i++ {
		e.clk.Advance(250 * time.Millisecond) // c's next heartbeat
	}
	st := e.inspect()
	if q := e.queued(); !slices.Equal(q, []string{"b", "c"}) {
		t.Fatalf("queue after c came back = %v (%+v), want [b c]: c re-joins at the tail", q, st.Queue)
	}
	if st.Queue[1].Entry == old {
		t.Fatal("c re-joined under its old entry")
	}
	mustUnlock(t, a)
	if r := await(t, gotB); !r.ok {
		t.Fatal("b did not get the lock")
	}
	mustUnlock(t, b)
	if r := await(t, gotC); !r.ok {
		t.Fatal("c did not get the lock after re-joining")
	}
	mustUnlock(t, c)

	// c's observer heard it join first, lose its place, and wait again
	// second, all one acquisition.
	got := rec.Snapshot()
	count := map[observe.QueueEventKind]int{}
	for _, q := range got.Queue {
		count[q.Kind]++
	}
	last := got.Queue[len(got.Queue)-1]
	if got.Queue[0].Kind != observe.Joined || count[observe.Joined] != 1 || count[observe.Evicted] != 1 ||
		last.Kind != observe.Waiting || last.Length != 2 {
		t.Errorf("c's queue news: %+v", got.Queue)
	}
	if len(got.Acquisitions) != 1 || !got.Acquisitions[0].Queued || got.Acquisitions[0].QueueLength != 1 ||
		got.Acquisitions[0].Outcome != observe.Acquired {
		t.Errorf("c's acquisition: %+v", got.Acquisitions)
	}
}

func TestEntryAbandonedWhileCutOffIsRemovedBeforeTheNextJoin(t *testing.T) {
	e := newEnv(t)
	a := e.named("a")
	cut := &redistest.Partition{}
	cClient := e.process()
	cClient.AddHook(cut)
	c := e.handleOn(cClient, fair.WithLabel("c"))
	mustLock(t, a)
	ctx, cancel := context.WithCancel(context.Background())
	gotC := e.enqueueCtx(ctx, c, 1)
	cut.On.Store(true)
	cancel() // c gives up, but cannot leave: its entry stays, live for 10 s
	if r := await(t, gotC); r.ok {
		t.Fatal("c got the lock while cut off")
	}
	cut.On.Store(false)
	mustUnlock(t, a) // the lock is handed to c's abandoned entry
	if h := e.holder(); h != "c" {
		t.Fatalf("holder = %q, want the abandoned entry's handle c", h)
	}
	// c's next Lock must not mistake that grant for a hold of its own.
	mustLock(t, c)
	if n, _ := c.HoldCount(context.Background()); n != 1 {
		t.Fatalf("c holds the lock %d times after one Lock, want 1", n)
	}
	mustUnlock(t, c)
	if locked, _ := c.IsLocked(context.Background()); locked {
		t.Fatal("the lock is still held after c's one Unlock")
	}
}

func TestHandOffArrivingLateIsClaimedBeforeLockReturns(t *testing.T) {
	for _, reconnect := range []bool{true, false} {
		name := map[bool]string{true: "reconnected", false: "still cut off"}[reconnect]
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			a := e.named("a")
			cut := &redistest.Partition{}
			cClient := e.process()
			cClient.AddHook(cut)
			c := e.handleOn(cClient, fair.WithLabel("c"), fairlock.WithWaitTimeout(3*time.Second))
			mustLock(t, a)
			gotC := e.enqueue(c, 1)

			// c's heartbeats fail, so its deadline stays where its join put
			// it. 2.99 s later its entry is still live, but the first lease c
			// may count on for a hand-off (its wait timeout from that join,
			// less the drift margin) is over.
			cut.On.Store(true)
			for i := 0; i < 299; i++ {
				e.clk.Advance(10 * time.Millisecond)
			}
			cut.On.Store(!reconnect)
			mustUnlock(t, a) // hands the lock to c; the message reaches c at once
			if !reconnect {
				// The claim cannot reach Redis, and neither can the next
				// try: Lock does not return a hold that is already over. It
				// rides the outage out, and once back, takes the lock afresh.
				for i := 0; i < 100; i++ {
					e.clk.Advance(10 * time.Millisecond)
				}
				select {
				case r := <-gotC:
					t.Fatalf("Lock while cut off returned %v, %v; want it to go on waiting", r.ok, r.err)
				default:
				}
				cut.On.Store(false)
				var r result
				for done := false; !done; {
					select {
					case r = <-gotC:
						done = true
					default:
						// Time moves only while c sleeps (its backoff): it
						// must not run past c's calls to Redis, and so past
						// the lease of the hold c is taking.
						redistest.Quiet(t, "c sleeps or returns", func() bool { return redistest.Asleep() == 1 || len(gotC) == 1 })
						if len(gotC) == 0 {
							e.clk.Advance(10 * time.Millisecond)
						}
					}
				}
				if !r.ok || r.err != nil || isClosed(c.Lost()) {
					t.Fatalf("Lock once back = %v, %v (lost %v); want a hold", r.ok, r.err, isClosed(c.Lost()))
				}
				mustUnlock(t, c)
				return
			}
			r := await(t, gotC)
			if !r.ok || r.err != nil {
				t.Fatalf("Lock = %v, %v; want the handed-off lock", r.ok, r.err)
			}
			if isClosed(c.Lost()) {
				t.Fatal("Lock returned a hold that was already lost")
			}
			// Claimed at once: the full 30 s lease, kept by the watchdog.
			e.clk.Advance(5 * time.Second)
			if isClosed(c.Lost()) || c.Token() == 0 {
				t.Fatal("the late hand-off's hold was lost")
			}
			if ttl, err := c.TTL(context.Background()); err != nil || ttl < 20*time.Second {
				t.Fatalf("TTL after the claim = %v, %v; want most of the 30 s lease", ttl, err)
			}
			mustUnlock(t, c)
		})
	}
}

func TestHoldLostByTheClientIsEndedByItsNextLock(t *testing.T) {
	e := newEnv(t)
	cut := &redistest.Partition{}
	aClient := e.process()
	aClient.AddHook(cut)
	a := e.handleOn(aClient, fair.WithLabel("a"))
	b := e.named("b")
	mustLock(t, a)
	// Cut off, a's renewals fail. After 29.8 s of its 30 s lease the client
	// has given the hold up (a 302 ms safety margin), while Redis still has
	// it for 200 ms. b is queued meanwhile.
	cut.On.Store(true)
	gotB := e.enqueue(b, 1)
	for i := 0; i < 298; i++ {
		e.clk.Advance(100 * time.Millisecond)
	}
	cut.On.Store(false)
	if !isClosed(a.Lost()) {
		t.Fatal("the hold is not lost after 29.8 s without a renewal")
	}
	if err := a.Unlock(context.Background()); !errors.Is(err, fairlock.ErrLockLost) {
		t.Fatalf("Unlock of the lost hold = %v, want ErrLockLost", err)
	}
	// a's next TryLock must neither count that hold as a re-entry nor barge:
	// the hold ends and goes to b, the live head.
	if ok, err := a.TryLock(context.Background(), 0, 0); ok || err != nil {
		t.Fatalf("TryLock(0) with b queued = %v, %v; want false", ok, err)
	}
	if r := await(t, gotB); !r.ok {
		t.Fatal("b did not get the lock that a's client had given up")
	}
	mustUnlock(t, b)
}
