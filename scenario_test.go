package fairlock_test

// Scenarios: paths the state machines do not reach by chance, played once,
// step by step, under the fake clock. Each is a specification of its own
// (TestSpecificationCatchesBrokenScripts runs them against broken scripts
// too).

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"
)

// tb is what a scenario needs of a test: *testing.T and *rapid.T both are.
type tb = redistest.Fataler

// scenarioSpec runs a scenario as a specification: one check of it is the
// whole scenario (give it checks: 1 in mutations).
func scenarioSpec(play func(tb, *lua.Scripts)) func(*lua.Scripts) func(*rapid.T) {
	return func(scripts *lua.Scripts) func(*rapid.T) {
		return func(t *rapid.T) { play(t, scripts) }
	}
}

// fakeServer starts a miniredis whose keys expire by its own clock
// (ClockTTL), and a fake clock that sets it: the specifications' Redis.
// The caller closes it.
func fakeServer(t tb) (*miniredis.Miniredis, *clock.Fake) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		t.Fatalf("miniredis: %v", err)
	}
	mr.ClockTTL(true)
	redistest.Booted(mr)
	return mr, clock.NewFake(redistest.Epoch, mr.SetTime)
}

// fakeRedis starts a miniredis whose clock, TTLs included, a fake clock
// drives, and returns that clock and a maker of clients; stop closes every
// client made and the server. (redistest.Mini does the same for a
// testing.TB, through Cleanup, which *rapid.T does not have.)
func fakeRedis(t tb) (clk *clock.Fake, client func() *redis.Client, stop func()) {
	t.Helper()
	mr, clk := fakeServer(t)
	var clients []*redis.Client
	client = func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		clients = append(clients, c)
		return c
	}
	stop = func() {
		for _, c := range clients {
			_ = c.Close()
		}
		mr.Close()
	}
	return clk, client, stop
}

// lostHandOffFoundByTheHeartbeat: a hand-off whose message is lost is found
// by the grantee's heartbeat, whose reply carries the grant's time. The new
// holder counts its lease from that time, as it would from the message: with
// a fixed lease it holds the lock until Redis's expiry (less the safety
// margin). Counted from its last "queued" answer instead, the hold would be
// lost as soon as Lock returned, although Redis keeps it for another 100 ms.
func lostHandOffFoundByTheHeartbeat(t tb, scripts *lua.Scripts) {
	t.Helper()
	const (
		name  = "lost-hand-off"
		wait  = 3 * time.Second
		fixed = 600 * time.Millisecond
	)
	clk, client, stop := fakeRedis(t)
	defer stop()
	ca, cb, probe := client(), client(), client()
	opts := []fair.MutexOption{fairlock.WithWaitTimeout(wait)}
	a, err := fair.New(redistest.OwnerOn(ca, clk, scripts), name, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	var rescues redistest.Rescues
	b, err := fair.New(redistest.OwnerOn(cb, clk, scripts), name, append(opts, fairlock.WithObserver(&rescues))...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx := context.Background()
	if err := a.Lock(ctx); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	type result struct {
		ok  bool
		err error
	}
	done := make(chan result, 1)
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		ok, err := b.TryLock(bctx, time.Hour, fixed)
		done <- result{ok, err}
	}()
	// b is queued and asleep; two heartbeats answer "queued" (at 1 s and 2 s).
	redistest.Quiet(t, "b is queued and asleep", func() bool {
		st, err := fair.Inspect(ctx, probe, name)
		return err == nil && len(st.Queue) == 1 && redistest.Asleep() == 1
	})
	clk.Advance(2 * time.Second)
	clk.Advance(500 * time.Millisecond)

	// a's release hands the lock to b at 2.5 s, with a fixed lease until
	// 3.1 s; its message goes to a channel nobody reads: it is lost.
	st, err := fair.Inspect(ctx, probe, name)
	if err != nil || st.Holder == nil {
		t.Fatalf("Inspect: %+v, %v", st, err)
	}
	keys := []string{"fairlock:f:{" + name + "}", "fairlock:f:{" + name + "}:queue", "fairlock:f:{" + name + "}:deadlines"}
	v, err := scripts.FairRelease.Run(ctx, probe, nil, keys, st.Holder.Owner, "scenario-release", a.Token(), "PUBLISH", "nobody-listens").Result()
	if got, _ := transport.DecodeRelease(v); err != nil || got != transport.Released {
		t.Fatalf("releasing a's hold: %v, %v", v, err)
	}
	granted, err := fair.Inspect(ctx, probe, name)
	if err != nil || granted.Holder == nil || !granted.Holder.Pending {
		t.Fatalf("the release did not hand the lock to b: %+v, %v", granted.Holder, err)
	}

	// b's heartbeat at 3 s finds the grant.
	clk.Advance(500 * time.Millisecond)
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the heartbeat did not hand b the lock whose message was lost")
	}
	if !r.ok || r.err != nil {
		t.Fatalf("b's TryLock = %v, %v; want the hold handed to it", r.ok, r.err)
	}
	if isClosed(b.Lost()) {
		t.Fatalf("b's hand-off, found by its heartbeat at 3 s, was lost at once, though Redis keeps it until 3.1 s: " +
			"its lease must count from the grant (2.5 s), not from b's last queued answer (2 s)")
	}
	if b.Token() != granted.Holder.Token {
		t.Fatalf("b holds token %d, Redis granted %d", b.Token(), granted.Holder.Token)
	}
	if n := rescues.Count(); n != 1 {
		t.Fatalf("b's observer was told of %d rescues; want 1: b learned of its hand-off from its heartbeat", n)
	}
	clk.Advance(80 * time.Millisecond)
	if isClosed(b.Lost()) {
		t.Fatalf("b lost its hold 20 ms before Redis's expiry, more than the safety margin early")
	}
	clk.Advance(20 * time.Millisecond)
	if !isClosed(b.Lost()) {
		t.Fatalf("b still believes it holds the lock after its fixed lease ran out in Redis")
	}
	_ = a.Unlock(ctx) // its hold was ended behind its back: ErrLockLost
}

// reentryNeverShortensAHold: the reentrant lock's re-entry with a lease
// longer than the hold has left lengthens it; with a shorter one it keeps
// it (reentrant.Mutex.TryLock's doc). The fair lock's specification checks
// the same of its own.
func reentryNeverShortensAHold(t tb, scripts *lua.Scripts) {
	t.Helper()
	clk, newClient, stop := fakeRedis(t)
	defer stop()
	client := newClient()
	m, err := reentrant.New(redistest.OwnerOn(client, clk, scripts), "reentry")
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx := context.Background()
	ttl := func() time.Duration {
		d, err := m.TTL(ctx)
		if err != nil {
			t.Fatalf("TTL: %v", err)
		}
		return d
	}
	if ok, err := m.TryLock(ctx, 0, time.Second); !ok || err != nil {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	clk.Advance(500 * time.Millisecond)
	if ok, err := m.TryLock(m.HoldContext(), 0, 3*time.Second); !ok || err != nil {
		t.Fatalf("re-entry = %v, %v", ok, err)
	}
	if got := ttl(); got != 3*time.Second {
		t.Fatalf("a re-entry asking for 3s on a hold with 500ms left left it %v, want 3s", got)
	}
	if ok, err := m.TryLock(m.HoldContext(), 0, 100*time.Millisecond); !ok || err != nil {
		t.Fatalf("re-entry = %v, %v", ok, err)
	}
	if got := ttl(); got != 3*time.Second {
		t.Fatalf("a re-entry asking for 100ms on a hold with 3s left left it %v, want 3s: never shorter", got)
	}
	clk.Advance(2 * time.Second)
	if isClosed(m.Lost()) {
		t.Fatalf("the lengthened hold was lost before its new lease ran out")
	}
	for m.Unlock(ctx) == nil {
	}
}

// longPermitHoldsKeepTheirKeys: every key of a semaphore lives as long as
// its longest permit hold (fair/doc.go, guarantee 8), even when that is
// longer than the keys' retention of 30 s: a hold with a fixed lease of 2
// minutes, alone on its semaphore, and one kept by a watchdog whose lease
// is 2 minutes (renewed every 40 s), alone on another, both still count 3
// minutes later, so nobody else is granted their permits.
func longPermitHoldsKeepTheirKeys(t tb, scripts *lua.Scripts) {
	t.Helper()
	clk, newClient, stop := fakeRedis(t)
	defer stop()
	client := newClient()
	ctx := context.Background()
	semaphore := func(name string) *fair.Semaphore {
		sem, err := fair.NewSemaphore(redistest.OwnerOn(client, clk, scripts), name, 1,
			fairlock.WithLease(2*time.Minute))
		if err != nil {
			t.Fatalf("NewSemaphore: %v", err)
		}
		return sem
	}
	fixedSem, renewedSem := semaphore("long-fixed"), semaphore("long-renewed")
	fixed, err := fixedSem.TryAcquire(ctx, 1, 0, 4*time.Minute)
	if err != nil || fixed == nil {
		t.Fatalf("TryAcquire with a 4-minute lease = %v, %v", fixed, err)
	}
	renewed, err := renewedSem.Acquire(ctx, 1)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	for i := 0; i < 180; i++ {
		clk.Advance(time.Second)
	}
	for _, c := range []struct {
		name string
		sem  *fair.Semaphore
		p    *fair.Permit
	}{{"fixed", fixedSem, fixed}, {"renewed", renewedSem, renewed}} {
		if isClosed(c.p.Lost()) {
			t.Fatalf("the %s permit hold was lost within its lease", c.name)
		}
		if p, err := c.sem.TryAcquire(ctx, 1, 0, 0); !errors.Is(err, fair.ErrNotAcquired) || p != nil {
			t.Fatalf("3 minutes into a %s permit hold, another holder got the only permit (%v, %v): the keys did not outlive the hold",
				c.name, p, err)
		}
		_ = c.p.Release(ctx)
	}
}

func TestLongPermitHoldsKeepTheirKeys(t *testing.T) {
	longPermitHoldsKeepTheirKeys(t, lua.Default())
}

func TestReentryNeverShortensAHold(t *testing.T) {
	reentryNeverShortensAHold(t, lua.Default())
}

func TestLostHandOffFoundByTheHeartbeat(t *testing.T) {
	lostHandOffFoundByTheHeartbeat(t, lua.Default())
}

// lostHeadNoticeFoundByTheHeartbeat: the waiter that becomes the head while
// the lock is held is told so, to try again the moment the hold's lease
// runs out. When that notice is lost, its heartbeat says it is the head: a
// rescue, reported, after which the head takes the lock at the lease's end
// (not a heartbeat later, when the heartbeat would hand it over).
func lostHeadNoticeFoundByTheHeartbeat(t tb, scripts *lua.Scripts) {
	t.Helper()
	const (
		name  = "lost-head-notice"
		wait  = 3 * time.Second
		fixed = 2500 * time.Millisecond
	)
	clk, client, stop := fakeRedis(t)
	defer stop()
	ca, cb, cc, probe := client(), client(), client(), client()
	opts := []fair.MutexOption{fairlock.WithWaitTimeout(wait)}
	var rescues redistest.Rescues
	a, errA := fair.New(redistest.OwnerOn(ca, clk, scripts), name, opts...)
	b, errB := fair.New(redistest.OwnerOn(cb, clk, scripts), name, opts...)
	c, errC := fair.New(redistest.OwnerOn(cc, clk, scripts), name, append(opts, fairlock.WithObserver(&rescues))...)
	if err := errors.Join(errA, errB, errC); err != nil {
		t.Fatalf("New: %v", err)
	}
	// A failed check ends every call it left waiting before it returns,
	// so that none is still asleep in the next scenario.
	var calls sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer calls.Wait()
	defer cancel()
	if ok, err := a.TryLock(ctx, 0, fixed); !ok || err != nil { // a's hold ends at 2.5 s
		t.Fatalf("a's TryLock: %v, %v", ok, err)
	}
	bctx, cancelB := context.WithCancel(ctx)
	defer cancelB()
	bDone := make(chan error, 1)
	calls.Go(func() { bDone <- b.Lock(bctx) })
	redistest.Quiet(t, "b is queued", func() bool {
		st, err := fair.Inspect(ctx, probe, name)
		return err == nil && len(st.Queue) == 1
	})
	cDone := make(chan error, 1)
	calls.Go(func() { cDone <- c.Lock(ctx) })
	redistest.Quiet(t, "b and c are queued and asleep", func() bool {
		st, err := fair.Inspect(ctx, probe, name)
		return err == nil && len(st.Queue) == 2 && redistest.Asleep() == 2
	})

	// At 0.5 s b's entry leaves the queue, and the notice that tells c it
	// is the head now goes to a channel nobody reads: it is lost.
	clk.Advance(500 * time.Millisecond)
	st, err := fair.Inspect(ctx, probe, name)
	if err != nil || len(st.Queue) != 2 {
		t.Fatalf("Inspect: %+v, %v", st, err)
	}
	keys := []string{"fairlock:f:{" + name + "}", "fairlock:f:{" + name + "}:queue", "fairlock:f:{" + name + "}:deadlines"}
	if err := scripts.FairLeave.Run(context.Background(), probe, nil, keys, st.Queue[0].Owner, st.Queue[0].Entry, "PUBLISH", "nobody-listens").Err(); err != nil {
		t.Fatalf("b's entry leaving: %v", err)
	}
	cancelB() // b gives up too (its own leave finds nothing to do)
	if err := <-bDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("b's Lock: %v", err)
	}
	redistest.Quiet(t, "c alone is queued and asleep", func() bool {
		st, err := fair.Inspect(ctx, probe, name)
		return err == nil && len(st.Queue) == 1 && redistest.Asleep() == 1
	})

	// c's heartbeat at 1 s says it is the head: a rescue.
	clk.Advance(500 * time.Millisecond)
	redistest.Quiet(t, "c is asleep", func() bool { return redistest.Asleep() == 1 })
	if n := rescues.Count(); n != 1 {
		t.Fatalf("c's observer was told of %d rescues after its heartbeat said it was the head; want 1", n)
	}
	// At 2.5 s a's lease runs out, and c, which knows it is the head, takes
	// the lock (its heartbeat, at 3 s, would be half a second late).
	clk.Advance(1500 * time.Millisecond)
	clk.Advance(10 * time.Millisecond)
	select {
	case err := <-cDone:
		if err != nil {
			t.Fatalf("c's Lock: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("c did not take the lock when a's lease ran out: it did not learn it was the head")
	}
	if n := rescues.Count(); n != 1 {
		t.Fatalf("c's observer was told of %d rescues; want 1 (taking the lock at a lease's end is none)", n)
	}
	_ = c.Unlock(context.Background())
}

// reentrantLostWakeUp: a reentrant lock's waiter sleeps until a release's
// wake-up (sent to the longest-waiting live waiter, in its client's inbox),
// or until the hold's lease would run out. When the wake-up is lost, its
// timer finds the lock free with the last wake-up sent to it: a rescue,
// reported. When the lease runs out with nobody releasing, its timer takes
// the lock, and that is no rescue.
func reentrantLostWakeUp(t tb, scripts *lua.Scripts) {
	t.Helper()
	const lease = 2 * time.Second
	clk, client, stop := fakeRedis(t)
	defer stop()
	ca, cb, probe := client(), client(), client()
	var opts []reentrant.Option
	var calls sync.WaitGroup // ended before it returns, as in lostHeadNoticeFoundByTheHeartbeat
	ctx, cancel := context.WithCancel(context.Background())
	defer calls.Wait()
	defer cancel()
	for _, released := range []bool{true, false} {
		name := map[bool]string{true: "lost-wake-up", false: "lease-runs-out"}[released]
		var rescues redistest.Rescues
		a, errA := reentrant.New(redistest.OwnerOn(ca, clk, scripts), name, opts...)
		b, errB := reentrant.New(redistest.OwnerOn(cb, clk, scripts), name, append(opts, fairlock.WithObserver(&rescues))...)
		if err := errors.Join(errA, errB); err != nil {
			t.Fatalf("New: %v", err)
		}
		if ok, err := a.TryLock(ctx, 0, lease); !ok || err != nil {
			t.Fatalf("a's TryLock: %v, %v", ok, err)
		}
		done := make(chan error, 1)
		calls.Go(func() { done <- b.Lock(ctx) })
		redistest.Quiet(t, "b is asleep", func() bool { return redistest.Asleep() == 1 })
		clk.Advance(time.Second)
		if released {
			// a's release at 1 s publishes b's wake-up where nobody listens.
			key := "fairlock:r:{" + name + "}"
			keys := []string{key, key + ":queue", key + ":deadlines"}
			raw, err := probe.Get(ctx, key).Result()
			var hold map[string]any
			if err == nil {
				hold, err = redistest.DecodeHold(raw)
			}
			if err != nil {
				t.Fatalf("reading a's hold: %v", err)
			}
			owner, _ := hold["o"].(string)
			v, err := scripts.ReentrantRelease.Run(ctx, probe, nil, keys, owner, "scenario-release", a.Token(), "PUBLISH", "nobody-listens").Result()
			if got, _ := transport.DecodeRelease(v); err != nil || got != transport.Released {
				t.Fatalf("releasing a's hold: %v, %v", v, err)
			}
			redistest.Quiet(t, "b is asleep", func() bool { return redistest.Asleep() == 1 })
		}
		clk.Advance(time.Second) // b's timer, at the lease's end
		clk.Advance(10 * time.Millisecond)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: b's Lock: %v", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: b did not take the lock at the lease's end", name)
		}
		want := map[bool]int{true: 1, false: 0}[released]
		if n := rescues.Count(); n != want {
			t.Fatalf("%s: b's observer was told of %d rescues; want %d", name, n, want)
		}
		_ = b.Unlock(ctx)
		_ = a.Unlock(ctx) // its hold ended: ErrLockLost, or not held
	}
}

func TestLostHeadNoticeFoundByTheHeartbeat(t *testing.T) {
	lostHeadNoticeFoundByTheHeartbeat(t, lua.Default())
}

func TestReentrantLostWakeUp(t *testing.T) {
	reentrantLostWakeUp(t, lua.Default())
}
