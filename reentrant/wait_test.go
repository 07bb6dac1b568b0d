package reentrant_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/redis/go-redis/v9"
)

// result of a TryLock or Lock run in a goroutine.
type result struct {
	ok  bool
	err error
}

func tryLockAsync(m *reentrant.Mutex, ctx context.Context, wait time.Duration) <-chan result {
	out := make(chan result, 1)
	go func() {
		ok, err := m.TryLock(ctx, wait, 0)
		out <- result{ok, err}
	}()
	return out
}

// await returns the goroutine's result; the bound only catches a hang.
func await(t *testing.T, c <-chan result) result {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter did not return")
		return result{}
	}
}

// waitSubscribed blocks until n waiters are among the lock's waiters in
// Redis and asleep in their inboxes.
func waitSubscribed(t *testing.T, e *env, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		members, _ := e.mr.ZMembers("fairlock:r:{jobs}:deadlines")
		if len(members) >= n && redistest.Asleep() >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter never subscribed")
		}
		time.Sleep(time.Millisecond)
	}
}

// waitTimers blocks until n library timers are pending on the fake clock:
// the waiters have gone to sleep.
func waitTimers(t *testing.T, e *env, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.clk.Pending() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d timers pending, want %d", e.clk.Pending(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWaiterTakesTheLockWhenReleased(t *testing.T) {
	newEnv(t).contendedOnce()
}

// contendedOnce makes the lock contended once: a handle holds it while
// another waits for it, and the waiter takes it when the holder lets go,
// then lets go too. It returns the waiter's handle.
func (e *env) contendedOnce() *reentrant.Mutex {
	e.t.Helper()
	a, b := e.handle(), e.handle()
	mustLock(e.t, a)
	got := tryLockAsync(b, context.Background(), time.Hour)
	waitSubscribed(e.t, e, 1)
	if err := a.Unlock(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	if r := await(e.t, got); !r.ok || r.err != nil {
		e.t.Fatalf("waiter after Unlock: %v, %v; want true", r.ok, r.err)
	}
	unlockAll(e.t, b)
	return b
}

func TestWaitElapses(t *testing.T) {
	e := newEnv(t)
	a, b := e.handle(), e.handle()
	mustLock(t, a)
	defer unlockAll(t, a)
	got := tryLockAsync(b, context.Background(), 5*time.Second)
	waitSubscribed(t, e, 1)
	e.clk.Advance(5 * time.Second)
	if r := await(t, got); r.ok || r.err != nil {
		t.Fatalf("TryLock whose wait elapsed = %v, %v; want false, nil", r.ok, r.err)
	}
}

func TestWaitEndsWithContext(t *testing.T) {
	e := newEnv(t)
	a, b := e.handle(), e.handle()
	mustLock(t, a)
	defer unlockAll(t, a)
	ctx, cancel := context.WithCancel(context.Background())
	got := tryLockAsync(b, ctx, time.Hour)
	waitSubscribed(t, e, 1)
	cancel()
	if r := await(t, got); r.ok || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("TryLock with ctx cancelled = %v, %v; want false, context.Canceled", r.ok, r.err)
	}
	if err := b.Lock(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with a cancelled ctx = %v", err)
	}
}

func TestFallbackTimerCoversAHolderThatDied(t *testing.T) {
	e := newEnv(t)
	a, b := e.handle(), e.handle()
	if ok, _ := a.TryLock(context.Background(), 0, 4*time.Second); !ok {
		t.Fatal("TryLock failed")
	}
	got := tryLockAsync(b, context.Background(), time.Hour)
	// a's loss deadline, b's wait bound and b's fallback timer.
	waitTimers(t, e, 3)
	// a "dies": it never unlocks, so nothing is published. b's timer keeps
	// its place every wait timeout / 3 (3.33 s), and fires again 1 ms after
	// the lease ends, as Redis's ms reckon it from b's last try.
	e.clk.Advance(4*time.Second + 5*time.Millisecond)
	if r := await(t, got); !r.ok {
		t.Fatalf("waiter behind a dead holder: %v, %v; want the lock once the lease ran out", r.ok, r.err)
	}
	unlockAll(t, b)
}

// A waiter is known to Redis with a deadline one wait timeout away, which
// its tries push forward every wait timeout / 3. (That one whose deadline
// passed is passed over by the wake-ups is the specification's to check:
// property_reentrant_test.go.)
func TestWaitersKeepTheirPlaceByTheirWaitTimeout(t *testing.T) {
	e := newEnv(t)
	a := e.handle()
	b := e.handle(fairlock.WithWaitTimeout(3 * time.Second))
	mustLock(t, a)
	got := tryLockAsync(b, context.Background(), time.Hour)
	waitSubscribed(t, e, 1)
	deadline := func() time.Duration {
		members, err := e.mr.ZMembers("fairlock:r:{jobs}:deadlines")
		if err != nil || len(members) != 1 {
			t.Fatalf("waiters in Redis: %v, %v; want b alone", members, err)
		}
		score, _ := e.mr.ZScore("fairlock:r:{jobs}:deadlines", members[0])
		return time.UnixMilli(int64(score)).Sub(e.clk.Now())
	}
	if d := deadline(); d != 3*time.Second {
		t.Fatalf("b's deadline is %v away, want its wait timeout, 3 s", d)
	}
	e.clk.Advance(time.Second) // b's beat: a try that keeps its place
	redistest.Quiet(t, "b is asleep", func() bool { return redistest.Asleep() == 1 })
	if d := deadline(); d != 3*time.Second {
		t.Fatalf("after b's beat its deadline is %v away, want 3 s again", d)
	}
	if err := a.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := await(t, got); !r.ok || r.err != nil {
		t.Fatalf("b after a's Unlock: %v, %v; want the lock", r.ok, r.err)
	}
	unlockAll(t, b)
}

func TestHoldOutlivesTheCallContext(t *testing.T) {
	e := newEnv(t)
	a := e.handle(fairlock.WithLease(3 * time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	e.clk.Advance(10 * time.Second)
	if n := holdCount(t, a); n != 1 {
		t.Fatalf("hold ended with the Lock call's ctx: HoldCount %d", n)
	}
	// Unlock under defer with the cancelled ctx still releases.
	if err := a.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with a cancelled ctx: %v", err)
	}
	if locked, _ := a.IsLocked(context.Background()); locked {
		t.Fatal("Unlock with a cancelled ctx left the lock held")
	}
}

// Goroutines sharing a handle exclude each other, as sync.Mutex's do: a
// second goroutine's Lock waits for the first hold's last Unlock. The
// context of the hold re-enters it, from any goroutine it is passed to.
func TestSharedHandleGoroutinesExcludeEachOther(t *testing.T) {
	e := newEnv(t)
	m := e.handle()
	ctx, err := m.LockContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() { second <- m.Lock(context.Background()) }()
	redistest.Quiet(t, "the second goroutine waits", func() bool { return redistest.Asleep() == 1 })
	select {
	case err := <-second:
		t.Fatalf("a second goroutine's Lock returned (%v) while the first goroutine held the lock", err)
	default:
	}
	reentered := make(chan error, 1)
	go func() { reentered <- m.Lock(ctx) }() // the hold's context, on another goroutine
	if err := <-reentered; err != nil {
		t.Fatalf("Lock with the hold's context: %v", err)
	}
	if n := holdCount(t, m); n != 2 {
		t.Fatalf("after a re-entry: HoldCount %d, want 2", n)
	}
	for range 2 {
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if ctx.Err() == nil || context.Cause(ctx) != fairlock.ErrReleased {
		t.Fatalf("the hold's context after its last Unlock: %v, cause %v", ctx.Err(), context.Cause(ctx))
	}
	if err := <-second; err != nil {
		t.Fatalf("the second goroutine's Lock: %v", err)
	}
	if n := holdCount(t, m); n != 1 {
		t.Fatalf("the second goroutine's hold: HoldCount %d, want 1", n)
	}
	if err := m.Unlock(ctx); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("Unlock with the first hold's context after it ended = %v, want ErrNotHeld", err)
	}
	unlockAll(t, m)
}

func TestBadInput(t *testing.T) {
	redistest.NoLeaks(t)
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	var nilClient *redis.Client
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	cases := map[string]func() error{
		"nil owner":        func() error { _, err := reentrant.New(nil, "x"); return err },
		"typed nil client": func() error { _, err := fairlock.NewOwner(nilClient); return err },
		"ring client":      func() error { _, err := fairlock.NewOwner(ring); return err },
		"empty name":       func() error { _, err := reentrant.New(redistest.Owner(client), ""); return err },
		"name with {":      func() error { _, err := reentrant.New(redistest.Owner(client), "a{b"); return err },
		"name with }":      func() error { _, err := reentrant.New(redistest.Owner(client), "a}b"); return err },
		"name too long": func() error {
			_, err := reentrant.New(redistest.Owner(client), strings.Repeat("x", fairlock.MaxNameLen+1))
			return err
		},
		"negative lease": func() error {
			_, err := reentrant.New(redistest.Owner(client), "x", fairlock.WithLease(-time.Second))
			return err
		},
		"tiny lease": func() error {
			_, err := reentrant.New(redistest.Owner(client), "x", fairlock.WithLease(time.Millisecond))
			return err
		},
		"drift factor": func() error {
			_, err := reentrant.New(redistest.Owner(client), "x", fairlock.WithDriftFactor(0.7))
			return err
		},
		"nil logger": func() error {
			_, err := reentrant.New(redistest.Owner(client), "x", fairlock.WithLogger((*slog.Logger)(nil)))
			return err
		},
		"zero cleanup": func() error {
			_, err := reentrant.New(redistest.Owner(client), "x", fairlock.WithCleanupTimeout(0))
			return err
		},
		"no replicas": func() error {
			_, err := reentrant.New(redistest.Owner(client), "x", fairlock.WithReplicas(0, time.Second))
			return err
		},
		"replica timeout": func() error {
			_, err := reentrant.New(redistest.Owner(client), "x", fairlock.WithReplicas(1, -time.Second))
			return err
		},
		"nil option": func() error { _, err := reentrant.New(redistest.Owner(client), "x", nil); return err },
		"zero wait timeout": func() error {
			_, err := reentrant.New(redistest.Owner(client), "x", fairlock.WithWaitTimeout(0))
			return err
		},
		"negative wait": func() error {
			m, _ := reentrant.New(redistest.Owner(client), "x")
			_, err := m.TryLock(context.Background(), -1, 0)
			return err
		},
		"negative TryLock lease": func() error {
			m, _ := reentrant.New(redistest.Owner(client), "x")
			_, err := m.TryLock(context.Background(), 0, -1)
			return err
		},
		// Shorter than its own safety margin (1% and 2 ms): it could never
		// hold. It used to be sent, and fail as born lost.
		"a TryLock lease under the 10 ms WithLease accepts": func() error {
			m, _ := reentrant.New(redistest.Owner(client), "x")
			_, err := m.TryLock(context.Background(), 0, 2*time.Millisecond)
			return err
		},
	}
	for name, f := range cases {
		if err := f(); !errors.Is(err, fairlock.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want an error wrapping ErrInvalidArgument", name, err)
		}
	}
}

// A lock contended once and free since lets its inbox channel go 30 s
// after its last wait, however often it is taken meanwhile
// (redistest.InboxGoes says why it matters).
func TestAFreeLockLetsItsInboxChannelGo(t *testing.T) {
	e := newEnv(t)
	b := e.contendedOnce()
	redistest.InboxGoes(t, e.mr, e.clk, func() {
		mustLock(t, b)
		unlockAll(t, b)
	})
}

// Once a lock's last waiter has taken it, the next Lock finds no deadline
// left and drops the waiters' horizon: the hold it writes is in the
// ordered form, and the pairs after it take the uncontended path at once,
// not a wait timeout later (hold.lua's take_free).
func TestTheUncontendedPathResumesOnceNoWaiterIsLeft(t *testing.T) {
	e := newEnv(t)
	b := e.contendedOnce()
	redistest.TakesTheUncontendedPath(t, e.mr, key, func() { mustLock(t, b) }, func() { unlockAll(t, b) })
}
