package fair_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

const semKey = "fairlock:s:{jobs}"

func (e *env) semaphore(k int, opts ...fair.Option) *fair.Semaphore {
	e.t.Helper()
	return e.semaphoreOn(e.client, k, opts...)
}

func (e *env) semaphoreOn(c *redis.Client, k int, opts ...fair.Option) *fair.Semaphore {
	e.t.Helper()
	s, err := fair.NewSemaphore(redistest.OwnerOn(c, e.clk, nil), lockName, k, opts...)
	if err != nil {
		e.t.Fatalf("NewSemaphore: %v", err)
	}
	return s
}

func (e *env) semState() fair.SemaphoreState {
	e.t.Helper()
	st, err := fair.InspectSemaphore(context.Background(), e.client, lockName)
	if err != nil {
		e.t.Fatalf("InspectSemaphore: %v", err)
	}
	return st
}

type permitResult struct {
	p   *fair.Permit
	err error
}

func acquireAsync(ctx context.Context, s *fair.Semaphore, n int) <-chan permitResult {
	out := make(chan permitResult, 1)
	go func() {
		p, err := s.Acquire(ctx, n)
		out <- permitResult{p, err}
	}()
	return out
}

// semQueue waits until the semaphore's queue has n waiters and every waiter
// is asleep; the first is waiting for permits, the rest for the gate.
func (e *env) semQueue(n int) {
	e.t.Helper()
	redistest.Quiet(e.t, "the semaphore's waiters are queued and asleep", func() bool {
		return len(e.semState().Queue) == n && redistest.Asleep() == n
	})
}

func got(t *testing.T, c <-chan permitResult) *fair.Permit {
	t.Helper()
	select {
	case r := <-c:
		if r.err != nil {
			t.Fatalf("Acquire: %v", r.err)
		}
		return r.p
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter did not return")
		return nil
	}
}

func notGranted(t *testing.T, c <-chan permitResult, what string) {
	t.Helper()
	select {
	case r := <-c:
		t.Fatalf("%s returned early: %v, %v", what, r.p, r.err)
	default:
	}
}

func release(t *testing.T, p *fair.Permit) {
	t.Helper()
	if err := p.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func available(t *testing.T, s *fair.Semaphore) int {
	t.Helper()
	n, err := s.Available(context.Background())
	if err != nil {
		t.Fatalf("Available: %v", err)
	}
	return n
}

func TestSemaphoreRefusesBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, c := range []struct {
		what   string
		client redis.UniversalClient
		name   string
		k      int
		opts   []fair.Option
	}{
		{"nil client", nil, "a", 1, nil},
		{"empty name", e.client, "", 1, nil},
		{"braces", e.client, "a{b}", 1, nil},
		{"no permits", e.client, "a", 0, nil},
		{"negative permits", e.client, "a", -1, nil},
		{"too many permits", e.client, "a", fair.MaxPermits + 1, nil},
		{"bad option", e.client, "a", 1, []fair.Option{fairlock.WithLease(-time.Second)}},
		{"nil option", e.client, "a", 1, []fair.Option{nil}},
	} {
		if _, err := fair.NewSemaphore(redistest.Owner(c.client), c.name, c.k, c.opts...); !errors.Is(err, fairlock.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", c.what, err)
		}
	}
	s := e.semaphore(2)
	for _, n := range []int{0, -1, fair.MaxPermits + 1} {
		if _, err := s.Acquire(ctx, n); !errors.Is(err, fairlock.ErrInvalidArgument) {
			t.Errorf("Acquire(%d): got %v, want ErrInvalidArgument", n, err)
		}
	}
	if _, err := s.TryAcquire(ctx, 1, -time.Second, 0); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Errorf("negative wait: got %v", err)
	}
	if _, err := s.TryAcquire(ctx, 1, 0, -time.Second); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Errorf("negative lease: got %v", err)
	}
	if _, err := s.SetPermits(ctx, 0); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Errorf("SetPermits(0): got %v", err)
	}
	if len(redistest.LockKeys(e.mr)) != 0 {
		t.Errorf("bad input wrote keys: %v", redistest.LockKeys(e.mr))
	}
}

func TestSemaphoreCountsPermits(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.semaphore(3)
	if n := available(t, s); n != 3 {
		t.Fatalf("Available on a new semaphore = %d, want 3", n)
	}
	two, err := s.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	one, err := s.TryAcquire(ctx, 1, 0, 0)
	if err != nil || one == nil {
		t.Fatalf("TryAcquire of the last permit: %v, %v", one, err)
	}
	if two.N() != 2 || one.N() != 1 {
		t.Fatalf("N = %d, %d", two.N(), one.N())
	}
	if !(one.Token() > two.Token() && two.Token() > 0) {
		t.Fatalf("tokens %d then %d: want rising", two.Token(), one.Token())
	}
	if n := available(t, s); n != 0 {
		t.Fatalf("Available = %d, want 0", n)
	}
	if p, err := s.TryAcquire(ctx, 1, 0, 0); p != nil || !errors.Is(err, fair.ErrNotAcquired) {
		t.Fatalf("TryAcquire on a full semaphore: %v, %v", p, err)
	}
	st := e.semState()
	if st.Permits != 3 || st.InUse != 3 || len(st.Holders) != 2 || st.Holders[0].Permits != 2 {
		t.Fatalf("InspectSemaphore = %+v", st)
	}
	release(t, two)
	if n := available(t, s); n != 2 {
		t.Fatalf("Available after a release of 2 = %d", n)
	}
	if err := two.Release(ctx); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("a second Release: %v, want ErrNotHeld", err)
	}
	if two.Token() != 0 {
		t.Fatalf("Token after Release = %d", two.Token())
	}
	if c := context.Cause(two.HoldContext()); !errors.Is(c, fairlock.ErrReleased) {
		t.Fatalf("HoldContext cause = %v", c)
	}
	release(t, one)
	if n := available(t, s); n != 3 {
		t.Fatalf("Available after every release = %d", n)
	}
}

// A waiter asking for more permits than are free blocks those behind it,
// even when enough are free for them: arrival order, no starvation of big
// requests.
func TestSemaphoreServesInArrivalOrder(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.semaphore(3)
	held, err := s.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	big := acquireAsync(ctx, s, 3)
	e.semQueue(1)
	small := acquireAsync(ctx, e.semaphoreOn(e.process(), 3), 1)
	e.semQueue(2)
	if p, err := s.TryAcquire(ctx, 1, 0, 0); p != nil || !errors.Is(err, fair.ErrNotAcquired) {
		t.Fatalf("TryAcquire passed the queue: %v, %v", p, err)
	}
	notGranted(t, big, "the big request")
	notGranted(t, small, "the small request behind it")
	if n := available(t, s); n != 1 {
		t.Fatalf("Available = %d, want 1", n)
	}
	release(t, held)
	b := got(t, big)
	notGranted(t, small, "the small request")
	release(t, b)
	release(t, got(t, small))
}

// A holder that dies keeps its permits only until its lease runs out; the
// first waiter takes them then, woken by its own timer.
func TestSemaphoreCrashedHolderGivesPermitsBack(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dead := e.process()
	lease := 3 * time.Second
	held, err := e.semaphoreOn(dead, 2, fairlock.WithLease(lease)).Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	_ = dead.Close() // its watchdog fails from now on
	waiter := acquireAsync(ctx, e.semaphore(2), 1)
	e.semQueue(1)
	e.clk.Advance(lease / 3) // a failed renewal
	notGranted(t, waiter, "the waiter")
	e.clk.Advance(lease)
	p := got(t, waiter)
	if !isClosed(held.Lost()) {
		t.Fatal("the dead holder's Lost is open after its lease ran out")
	}
	if err := held.Release(ctx); !errors.Is(err, fairlock.ErrLockLost) {
		t.Fatalf("Release of a lost hold: %v", err)
	}
	release(t, p)
}

// The watchdog keeps a holder's permits for as long as it holds them.
func TestSemaphoreWatchdogKeepsPermits(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.semaphore(1, fairlock.WithLease(time.Second))
	p, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		e.clk.Advance(100 * time.Millisecond)
	}
	if isClosed(p.Lost()) || available(t, s) != 0 {
		t.Fatal("a renewed permit hold was lost")
	}
	fixed, err := e.semaphore(1).TryAcquire(ctx, 1, 0, time.Second)
	if !errors.Is(err, fair.ErrNotAcquired) || fixed != nil {
		t.Fatalf("TryAcquire beside a renewed hold: %v, %v", fixed, err)
	}
	release(t, p)
	fixed, err = s.TryAcquire(ctx, 1, 0, time.Second)
	if err != nil || fixed == nil {
		t.Fatalf("TryAcquire with a fixed lease: %v, %v", fixed, err)
	}
	e.clk.Advance(time.Second)
	if !isClosed(fixed.Lost()) || available(t, s) != 1 {
		t.Fatal("a fixed lease outlived itself")
	}
}

func TestSemaphoreWaiterThatGivesUpLeavesTheQueue(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.semaphore(1)
	held, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	first := acquireAsync(cctx, s, 1)
	e.semQueue(1)
	second := acquireAsync(ctx, s, 1)
	e.semQueue(2)
	timed := make(chan permitResult, 1)
	go func() {
		p, err := s.TryAcquire(ctx, 1, time.Second, 0)
		timed <- permitResult{p, err}
	}()
	e.semQueue(3)
	cancel()
	if r := <-first; !errors.Is(r.err, context.Canceled) || r.p != nil {
		t.Fatalf("a cancelled Acquire: %v, %v", r.p, r.err)
	}
	e.semQueue(2)
	e.clk.Advance(time.Second)
	if r := <-timed; r.p != nil || !errors.Is(r.err, fair.ErrNotAcquired) {
		t.Fatalf("a TryAcquire whose wait elapsed: %v, %v", r.p, r.err)
	}
	e.semQueue(1)
	release(t, held)
	release(t, got(t, second))
	if q := e.semState().Queue; len(q) != 0 {
		t.Fatalf("queue after everyone left: %+v", q)
	}
}

func TestSemaphoreSetPermits(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.semaphore(2)
	a, err := s.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	waiter := acquireAsync(ctx, s, 1)
	e.semQueue(1)
	if was, err := s.SetPermits(ctx, 3); err != nil || was != 2 {
		t.Fatalf("SetPermits(3) = %d, %v", was, err)
	}
	b := got(t, waiter) // woken by the raise
	// Lowered below what is in use: holds keep their permits, newcomers wait.
	if _, err := s.SetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if n := available(t, s); n != 0 {
		t.Fatalf("Available over the new number = %d", n)
	}
	waiter = acquireAsync(ctx, e.semaphore(3), 1)
	e.semQueue(1)
	release(t, b)
	notGranted(t, waiter, "a waiter while 2 of 1 permits are in use")
	release(t, a)
	c := got(t, waiter)
	// A waiter asking for more than the semaphore now has is told so.
	big := acquireAsync(ctx, e.semaphore(3), 2)
	if r := <-big; !errors.Is(r.err, fairlock.ErrInvalidArgument) || !strings.Contains(r.err.Error(), "which has 1") {
		t.Fatalf("asking for 2 of 1: %v", r.err)
	}
	release(t, c)
	// A handle made with another number follows Redis's.
	if n := available(t, e.semaphore(5)); n != 1 {
		t.Fatalf("Available from a handle made with 5 = %d, want 1", n)
	}
}

// A permit hold whose record is gone is lost at the next renewal, and the
// semaphore's keys expire once nothing is held or queued.
func TestSemaphoreLossAndExpiry(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.semaphore(2, fairlock.WithLease(3*time.Second))
	p, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	e.mr.Del(semKey)
	e.clk.Advance(time.Second)
	if !isClosed(p.Lost()) {
		t.Fatal("Lost is open after the permits were deleted")
	}
	if c := context.Cause(p.HoldContext()); !errors.Is(c, fairlock.ErrLockLost) {
		t.Fatalf("HoldContext cause = %v", c)
	}
	q, err := s.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	waiter := acquireAsync(ctx, s, 1)
	e.semQueue(1)
	release(t, q)
	release(t, got(t, waiter))
	for i := 0; i < 60 && len(redistest.LockKeys(e.mr)) > 0; i++ {
		e.clk.Advance(time.Second)
	}
	if keys := redistest.LockKeys(e.mr); len(keys) != 0 {
		t.Fatalf("keys left behind: %v", keys)
	}
}

// A Semaphore and a Mutex of the same name are different locks.
func TestSemaphoreAndMutexOfOneName(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, err := e.semaphore(1).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	m := e.named("m")
	if ok, err := m.TryLock(ctx, 0, 0); !ok || err != nil {
		t.Fatalf("the Mutex of the same name: %v, %v", ok, err)
	}
	mustUnlock(t, m)
	release(t, p)
}

// dropPermitHolds deletes every permit hold's record from Redis behind the
// semaphore's back: a release whose message never reached the waiters.
func (e *env) dropPermitHolds() {
	e.t.Helper()
	redistest.SetHoldField(e.t, e.mr, semKey, "p", "")
}

// Pub/sub delivers at most once: the first waiter, waiting for permits,
// does not depend on hearing the release. It looks again every wait
// timeout / 3, as a queued waiter's heartbeat does, not only when the first
// permit hold's lease (30 s here) would run out.
func TestSemaphoreFirstWaiterLooksAgainWithinAHeartbeat(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.semaphore(1)
	held, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	waiter := acquireAsync(ctx, s, 1)
	e.semQueue(1)
	e.dropPermitHolds()
	e.clk.Advance(fairlock.DefaultWaitTimeout/3 - time.Millisecond)
	redistest.Quiet(t, "the waiter is asleep", func() bool { return redistest.Asleep() == 1 })
	notGranted(t, waiter, "the first waiter, before its heartbeat's time")
	e.clk.Advance(time.Millisecond)
	p := got(t, waiter)
	if p.Token() <= held.Token() {
		t.Fatalf("the waiter's token %d is not above the dropped hold's %d", p.Token(), held.Token())
	}
	release(t, p)
	if err := held.Release(ctx); !errors.Is(err, fairlock.ErrLockLost) && !errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("Release of a hold deleted behind its back: %v", err)
	}
}

// A handle follows the number of permits Redis has, both ways, whatever it
// was made with, and Permits shows that number.
func TestSemaphoreHandlesFollowRedisPermits(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	two, five := e.semaphore(2), e.semaphore(5)
	if k, err := two.Permits(ctx); k != 2 || err != nil {
		t.Fatalf("Permits of an unused semaphore = %d, %v; want the handle's own 2", k, err)
	}
	p, err := two.Acquire(ctx, 1) // records 2
	if err != nil {
		t.Fatal(err)
	}
	release(t, p)
	if k, err := five.Permits(ctx); k != 2 || err != nil {
		t.Fatalf("Permits of a handle made with 5 on a semaphore of 2 = %d, %v; want 2", k, err)
	}
	if _, err := five.TryAcquire(ctx, 3, 0, 0); !errors.Is(err, fairlock.ErrInvalidArgument) || !strings.Contains(err.Error(), `semaphore "jobs"`) {
		t.Fatalf("3 of a semaphore of 2, on a handle made with 5: %v; want ErrInvalidArgument naming the semaphore", err)
	}
	if _, err := five.SetPermits(ctx, 5); err != nil {
		t.Fatal(err)
	}
	p, err = two.TryAcquire(ctx, 4, 0, 0)
	if err != nil {
		t.Fatalf("4 of a semaphore raised to 5, on a handle made with 2: %v", err)
	}
	release(t, p)
	if k, err := two.Permits(ctx); k != 5 || err != nil {
		t.Fatalf("Permits after SetPermits(5) = %d, %v", k, err)
	}
}
