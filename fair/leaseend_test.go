package fair_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
)

// When a hold ends because its lease ran out (a fixed lease, a holder that
// died, a grant never claimed), no message says so: the live head must be
// awake by itself. These tests move the fake clock in small steps and check
// that the waiter at the head holds the lock within a few ms of the hold's
// end, whichever way it became head.

// slack is how late, by the fake clock, the head may take the lock after a
// hold ends: its timer fires 1 ms after the expiry, and the clock moves in
// steps of 2 ms.
const slack = 5 * time.Millisecond

// calls follows Lock or TryLock calls running in goroutines while the fake
// clock moves.
type calls struct {
	e     *env
	start time.Time
	got   []<-chan result
	at    []time.Duration // fake time since start when each returned; -1 until then
	res   []result
}

func (e *env) calls() *calls {
	return &calls{e: e, start: e.clk.Now()}
}

// add starts TryLock(wait, lease) on m and waits until it is queued and
// asleep, as the n-th waiter.
func (c *calls) add(ctx context.Context, m *fair.Mutex, wait, lease time.Duration, queued int) int {
	c.e.t.Helper()
	c.got = append(c.got, tryLockAsync(m, ctx, wait, lease))
	c.at = append(c.at, -1)
	c.res = append(c.res, result{})
	c.settle(queued)
	return len(c.got) - 1
}

// collect records the calls that returned; it reports how many still run.
func (c *calls) collect() int {
	running := 0
	for i, g := range c.got {
		if c.at[i] >= 0 {
			continue
		}
		select {
		case r := <-g:
			c.at[i], c.res[i] = c.e.clk.Now().Sub(c.start), r
		default:
			running++
		}
	}
	return running
}

// settle waits until every running call is asleep with nothing on its way
// to it, and n waiters are queued (n < 0: any number).
func (c *calls) settle(n int) {
	c.e.t.Helper()
	redistest.Quiet(c.e.t, "the waiters are asleep", func() bool {
		return c.collect() == redistest.Asleep() && (n < 0 || len(c.e.queued()) == n)
	})
}

// until moves the clock in steps of step until call i returned or limit
// passed since start; it returns call i's result and when it came.
func (c *calls) until(i int, step, limit time.Duration) (result, time.Duration) {
	c.e.t.Helper()
	for c.at[i] < 0 && c.e.clk.Now().Sub(c.start) < limit {
		c.e.clk.Advance(step)
		c.settle(-1)
	}
	if c.at[i] < 0 {
		c.e.t.Fatalf("call %d had not returned %v after the start", i, limit)
	}
	return c.res[i], c.at[i]
}

// deadHeadThenLive queues b, whose process then dies, and gap later c, both
// with wait timeout wait, behind whatever holds the lock. It returns c's
// handle, the calls (started when b was queued) and c's call. b's Lock call
// is frozen until the test ends.
func (e *env) deadHeadThenLive(wait, gap time.Duration) (*fair.Mutex, *calls, int) {
	e.t.Helper()
	dead := e.process()
	b := e.handleOn(dead, fair.WithLabel("b"), fairlock.WithWaitTimeout(wait))
	cw := e.named("c", fairlock.WithWaitTimeout(wait))
	c := e.calls()
	frozen, thaw := context.WithCancel(context.Background())
	e.t.Cleanup(thaw)
	c.add(frozen, b, time.Hour, 0, 1)
	e.clk.Advance(gap)
	ic := c.add(context.Background(), cw, time.Hour, 0, 2)
	_ = dead.Close() // b falls silent
	return cw, c, ic
}

// The scenario: six handles take turns with TryLock(wait 10 s,
// lease 500 ms), nobody unlocks. Each must hold the lock right after the
// previous lease ends: six holders in about 3 s, not one per heartbeat.
func TestFixedLeasesEndingInTurnHandTheLockOn(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	const lease = 500 * time.Millisecond
	c := e.calls()
	var handles []*fair.Mutex
	for i := 0; i < 6; i++ {
		m := e.named(fmt.Sprint(i))
		handles = append(handles, m)
		c.add(ctx, m, 10*time.Second, lease, i)
	}
	var last int64
	for i := range handles {
		r, at := c.until(i, 2*time.Millisecond, 4*time.Second)
		if !r.ok || r.err != nil {
			t.Fatalf("waiter %d: TryLock = %v, %v", i, r.ok, r.err)
		}
		if want := time.Duration(i) * lease; at < want || at > want+time.Duration(i)*slack {
			t.Fatalf("waiter %d took the lock at %v, want right after the %d leases before it end (%v)", i, at, i, want)
		}
		if tok := handles[i].Token(); tok <= last {
			t.Fatalf("waiter %d's token %d is not above the previous %d", i, tok, last)
		} else {
			last = tok
		}
		if i > 0 && !isClosed(handles[i-1].Lost()) {
			t.Fatalf("waiter %d holds the lock while waiter %d's hold is not yet lost", i, i-1)
		}
	}
	e.clk.Advance(lease)
}

// The same with holders that die: each handle is on a client of its own,
// closed right after its Lock returns, so its watchdog never renews.
func TestDeadHoldersLeasesEndInTurn(t *testing.T) {
	e := newEnv(t)
	const lease = 500 * time.Millisecond
	c := e.calls()
	var handles []*fair.Mutex
	for i := 0; i < 5; i++ {
		proc := e.process()
		m := e.handleOn(proc, fair.WithLabel(fmt.Sprint(i)), fairlock.WithLease(lease))
		handles = append(handles, m)
		out := make(chan result, 1)
		go func() {
			err := m.Lock(context.Background())
			_ = proc.Close() // the process dies holding the lock
			out <- result{err == nil, err}
		}()
		c.got, c.at, c.res = append(c.got, out), append(c.at, -1), append(c.res, result{})
		c.settle(i)
	}
	for i := range handles {
		r, at := c.until(i, 2*time.Millisecond, 4*time.Second)
		if !r.ok {
			t.Fatalf("waiter %d: Lock = %v", i, r.err)
		}
		if want := time.Duration(i) * lease; at < want || at > want+time.Duration(i)*slack {
			t.Fatalf("waiter %d took the lock at %v, want right after the dead holders' leases end (%v)", i, at, want)
		}
	}
	e.clk.Advance(lease)
	for i, m := range handles {
		if !isClosed(m.Lost()) {
			t.Fatalf("dead holder %d's Lost is not closed", i)
		}
	}
}

// The head gives up while the lock is held: the waiter behind it becomes
// head and must take the lock when the holder's fixed lease ends.
func TestHeadThatGivesUpPassesTheTurnToTheNext(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, b, cw := e.named("a"), e.named("b"), e.named("c")
	if ok, err := a.TryLock(ctx, 0, 500*time.Millisecond); !ok || err != nil {
		t.Fatalf("a: %v, %v", ok, err)
	}
	c := e.calls()
	bctx, cancel := context.WithCancel(ctx)
	ib := c.add(bctx, b, time.Hour, 0, 1)
	ic := c.add(ctx, cw, time.Hour, 0, 2)
	cancel()
	if r, _ := c.until(ib, 2*time.Millisecond, time.Second); r.ok {
		t.Fatal("b got the lock after giving up")
	}
	r, at := c.until(ic, 2*time.Millisecond, 4*time.Second)
	if !r.ok || at > 500*time.Millisecond+slack {
		t.Fatalf("c took the lock at %v (%v, %v), want right after a's 500 ms lease", at, r.ok, r.err)
	}
	mustUnlock(t, cw)
}

// The head dies while the lock is held and is evicted once its deadline
// passes: the waiter behind it must take the lock when the holder's fixed
// lease ends, not at its next heartbeat after that.
func TestHeadEvictedWhileHeldPassesTheTurnToTheNext(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	const wait = 3 * time.Second
	const lease = 20*time.Second + 500*time.Millisecond
	a := e.named("a")
	if ok, err := a.TryLock(ctx, 0, lease); !ok || err != nil {
		t.Fatalf("a: %v, %v", ok, err)
	}
	cw, c, ic := e.deadHeadThenLive(wait, 0)
	for e.clk.Now().Sub(c.start) < lease-time.Second {
		e.clk.Advance(100 * time.Millisecond)
		c.settle(-1)
	}
	r, at := c.until(ic, 2*time.Millisecond, lease+5*time.Second)
	if !r.ok || at > lease+slack {
		t.Fatalf("c took the lock at %v (%v, %v), want right after a's lease of %v", at, r.ok, r.err, lease)
	}
	mustUnlock(t, cw)
}

// A grant handed to a head that died is never claimed and ends at that
// waiter's deadline: the waiter behind it must take the lock then.
func TestUnclaimedGrantEndsAndTheNextTakesTheLock(t *testing.T) {
	e := newEnv(t)
	const wait = 3 * time.Second
	a := e.named("a")
	mustLock(t, a)
	// b's deadline: start + 3 s; c's heartbeats: start + 1.4 s, 2.4 s, 3.4 s.
	cw, c, ic := e.deadHeadThenLive(wait, 400*time.Millisecond)
	e.clk.Advance(100 * time.Millisecond)
	mustUnlock(t, a) // granted to b, which never claims it
	if h := e.inspect().Holder; h == nil || h.Label != "b" || !h.Pending {
		t.Fatalf("holder after a's unlock = %+v, want a pending grant to b", h)
	}
	r, at := c.until(ic, 2*time.Millisecond, 5*time.Second)
	if !r.ok || at > wait+slack {
		t.Fatalf("c took the lock at %v (%v, %v), want right after b's grant ended at %v", at, r.ok, r.err, wait)
	}
	mustUnlock(t, cw)
}

// A change of head costs one message, whatever the queue length: a head
// that takes the lock itself publishes one notice, to the next waiter only.
func TestOneNoticePerChangeOfHead(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	msgs := e.watch()
	a := e.named("a")
	if ok, err := a.TryLock(ctx, 0, 500*time.Millisecond); !ok || err != nil {
		t.Fatalf("a: %v, %v", ok, err)
	}
	c := e.calls()
	var handles []*fair.Mutex
	var entries []string
	for i := 0; i < 8; i++ {
		m := e.named(fmt.Sprint(i))
		handles = append(handles, m)
		c.add(ctx, m, time.Hour, 0, i+1)
		q := e.inspect().Queue
		entries = append(entries, q[len(q)-1].Entry)
	}
	if r, _ := c.until(0, 2*time.Millisecond, time.Second); !r.ok {
		t.Fatalf("the head: %v, %v", r.ok, r.err)
	}
	select {
	case m := <-msgs:
		if !strings.HasPrefix(m.Payload, entries[1]+" head ") {
			t.Fatalf("message %q, want a head notice to the next waiter, %q", m.Payload, entries[1]+" head <expiry>")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no head notice")
	}
	select {
	case m := <-msgs:
		t.Fatalf("a second message for one change of head: %q", m.Payload)
	case <-time.After(50 * time.Millisecond):
	}
	// The rest take their turns by hand-off.
	for i := range handles {
		if i > 0 {
			if r, _ := c.until(i, 2*time.Millisecond, 2*time.Second); !r.ok {
				t.Fatalf("waiter %d: %v, %v", i, r.ok, r.err)
			}
		}
		mustUnlock(t, handles[i])
	}
}

// A hand-off to a waiter that asked for a fixed lease shorter than the time
// since its last heartbeat: Redis grants that lease from the hand-off, and
// the hold the waiter's TryLock returns must count it from there too, not be
// lost at birth.
func TestHandOffWithAShortFixedLeaseIsNotLostAtBirth(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.named("a")
	b := e.named("b", fairlock.WithWaitTimeout(9*time.Second)) // heartbeat every 3 s
	mustLock(t, a)
	c := e.calls()
	ib := c.add(ctx, b, time.Hour, time.Second, 1)
	e.clk.Advance(3 * time.Second) // b's heartbeat
	c.settle(1)
	e.clk.Advance(2 * time.Second) // 2 s after it, a hands the lock to b
	mustUnlock(t, a)
	c.settle(-1)
	if r := c.res[ib]; c.at[ib] < 0 || !r.ok || r.err != nil {
		t.Fatalf("b's TryLock on the hand-off: returned %v, with %v, %v", c.at[ib] >= 0, r.ok, r.err)
	}
	e.clk.Advance(900 * time.Millisecond)
	if isClosed(b.Lost()) || b.Token() == 0 {
		t.Fatal("b's 1 s hold, granted 900 ms ago, is already lost")
	}
	if ttl, err := b.TTL(ctx); err != nil || ttl != 100*time.Millisecond {
		t.Fatalf("Redis's TTL of b's hold = %v, %v; want the 100 ms left of its 1 s lease", ttl, err)
	}
	e.clk.Advance(100 * time.Millisecond)
	if !isClosed(b.Lost()) {
		t.Fatal("b's hold outlived its fixed lease")
	}
}
