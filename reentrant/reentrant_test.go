package reentrant_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/observe"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/redis/go-redis/v9"
)

const key = "fairlock:r:{jobs}"

// env is one test's miniredis, fake clock and client.
type env struct {
	t      *testing.T
	mr     *miniredis.Miniredis
	clk    *clock.Fake
	client *redis.Client
}

func newEnv(t *testing.T) *env {
	redistest.NoLeaks(t)
	mr, clk, client := redistest.Mini(t)
	return &env{t: t, mr: mr, clk: clk, client: client}
}

// handle returns a new handle on "jobs" driven by the fake clock.
func (e *env) handle(opts ...reentrant.Option) *reentrant.Mutex {
	e.t.Helper()
	m, err := reentrant.New(redistest.OwnerOn(e.client, e.clk, nil), "jobs", opts...)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	return m
}

// unlockAll releases what m holds, so the test ends with no background work.
func unlockAll(t *testing.T, m *reentrant.Mutex) {
	t.Helper()
	for {
		if err := m.Unlock(context.Background()); err != nil {
			return
		}
	}
}

// mustReenter re-enters m's hold, as a call chain holding it does: with
// the hold's context.
func mustReenter(t *testing.T, m *reentrant.Mutex) {
	t.Helper()
	if err := m.Lock(m.HoldContext()); err != nil {
		t.Fatalf("Lock with the hold's context (a re-entry): %v", err)
	}
}

func mustLock(t *testing.T, m *reentrant.Mutex) {
	t.Helper()
	if err := m.Lock(context.Background()); err != nil {
		t.Fatalf("Lock: %v", err)
	}
}

func holdCount(t *testing.T, m *reentrant.Mutex) int {
	t.Helper()
	n, err := m.HoldCount(context.Background())
	if err != nil {
		t.Fatalf("HoldCount: %v", err)
	}
	return n
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestReentryCountsAndNeedsAsManyUnlocks(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.handle()
	mustLock(t, m)
	mustReenter(t, m)
	if ok, err := m.TryLock(m.HoldContext(), 0, 0); !ok || err != nil {
		t.Fatalf("re-entry by TryLock = %v, %v; want true", ok, err)
	}
	if n := holdCount(t, m); n != 3 {
		t.Fatalf("HoldCount after three locks = %d, want 3", n)
	}
	for want := 2; want >= 0; want-- {
		if err := m.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		if n := holdCount(t, m); n != want {
			t.Fatalf("HoldCount = %d, want %d", n, want)
		}
		if locked, _ := m.IsLocked(ctx); locked != (want > 0) {
			t.Fatalf("IsLocked = %v with %d holds left", locked, want)
		}
	}
	if err := m.Unlock(ctx); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("Unlock of a free lock = %v, want ErrNotHeld", err)
	}
	if isClosed(m.Lost()) {
		t.Fatal("Lost closed by a normal Unlock")
	}
	if cause := context.Cause(m.HoldContext()); !errors.Is(cause, fairlock.ErrReleased) {
		t.Fatalf("HoldContext cause after Unlock = %v, want ErrReleased", cause)
	}
}

func TestNonOwnerUnlockChangesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, b := e.handle(), e.handle()
	mustLock(t, a)
	defer unlockAll(t, a)
	before := e.mr.Dump()
	if err := b.Unlock(ctx); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("Unlock by a non-owner = %v, want ErrNotHeld", err)
	}
	if after := e.mr.Dump(); after != before {
		t.Fatalf("a non-owner's Unlock changed Redis:\nbefore %s\nafter %s", before, after)
	}
	if n := holdCount(t, a); n != 1 {
		t.Fatalf("owner's HoldCount = %d after a non-owner's Unlock, want 1", n)
	}
}

func TestStateQueries(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, b := e.handle(fairlock.WithLease(9*time.Second)), e.handle()
	if locked, err := a.IsLocked(ctx); locked || err != nil {
		t.Fatalf("IsLocked on a fresh lock = %v, %v", locked, err)
	}
	if ttl, err := a.TTL(ctx); ttl != 0 || err != nil {
		t.Fatalf("TTL on a free lock = %v, %v; want 0", ttl, err)
	}
	if a.Token() != 0 {
		t.Fatal("Token before any hold is not 0")
	}
	mustLock(t, a)
	defer unlockAll(t, a)
	e.clk.Advance(time.Second)
	if ttl, _ := b.TTL(ctx); ttl != 8*time.Second {
		t.Fatalf("TTL seen by another handle = %v, want 8s", ttl)
	}
	if locked, _ := b.IsLocked(ctx); !locked {
		t.Fatal("IsLocked by another handle = false while held")
	}
	if n := holdCount(t, b); n != 0 {
		t.Fatalf("HoldCount of a handle that does not hold = %d", n)
	}
	if a.Token() == 0 || b.Token() != 0 {
		t.Fatalf("Token: holder %d, other %d", a.Token(), b.Token())
	}
}

func TestForceUnlock(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, b := e.handle(), e.handle()
	mustLock(t, a)
	mustReenter(t, a)
	if ok, err := b.ForceUnlock(ctx); !ok || err != nil {
		t.Fatalf("ForceUnlock of a held lock = %v, %v; want true", ok, err)
	}
	if locked, _ := b.IsLocked(ctx); locked {
		t.Fatal("still locked after ForceUnlock")
	}
	if ok, _ := b.ForceUnlock(ctx); ok {
		t.Fatal("ForceUnlock of a free lock reported true")
	}
	// The old holder learns at its next renewal, or at Unlock.
	if err := a.Unlock(ctx); !errors.Is(err, fairlock.ErrLockLost) || errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("Unlock after ForceUnlock = %v, want ErrLockLost (not ErrNotHeld: a loss is no second Unlock)", err)
	}
	if !isClosed(a.Lost()) {
		t.Fatal("Lost not closed for a hold removed by ForceUnlock")
	}
}

func TestForcedOutHolderSeesLostAtItsNextRenewal(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, b := e.handle(fairlock.WithLease(3*time.Second)), e.handle()
	mustLock(t, a)
	if ok, err := b.ForceUnlock(ctx); !ok || err != nil {
		t.Fatalf("ForceUnlock of a held lock = %v, %v; want true", ok, err)
	}
	e.clk.Advance(time.Second - time.Millisecond)
	if isClosed(a.Lost()) {
		t.Fatal("Lost closed before the watchdog's next renewal could find the hold gone")
	}
	e.clk.Advance(time.Millisecond) // lease/3: the renewal finds the hold gone
	if !isClosed(a.Lost()) {
		t.Fatal("a hold forced open is not Lost at the watchdog's next renewal")
	}
	if cause := context.Cause(a.HoldContext()); !errors.Is(cause, fairlock.ErrLockLost) {
		t.Fatalf("HoldContext's cause = %v, want ErrLockLost", cause)
	}
	if err := a.Unlock(ctx); !errors.Is(err, fairlock.ErrLockLost) {
		t.Fatalf("Unlock after the loss = %v, want ErrLockLost", err)
	}
}

func TestFixedLeaseExpires(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, b := e.handle(), e.handle()
	if ok, err := a.TryLock(ctx, 0, 5*time.Second); !ok || err != nil {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	hold := a.HoldContext()
	e.clk.Advance(4 * time.Second)
	if isClosed(a.Lost()) {
		t.Fatal("fixed lease lost before it ran out")
	}
	if ttl, _ := a.TTL(ctx); ttl != time.Second {
		t.Fatalf("TTL of a fixed lease after 4s of 5s = %v; it must not be renewed", ttl)
	}
	// The client gives up its belief a safety margin (1% + 2 ms = 52 ms)
	// before Redis expires it.
	e.clk.Advance(900 * time.Millisecond)
	if isClosed(a.Lost()) {
		t.Fatal("fixed lease lost more than its safety margin early")
	}
	e.clk.Advance(50 * time.Millisecond)
	if !isClosed(a.Lost()) {
		t.Fatal("Lost not closed within the safety margin before the lease ran out")
	}
	if locked, _ := b.IsLocked(ctx); !locked {
		t.Fatal("Redis let the lock go before the lease ran out")
	}
	if cause := context.Cause(hold); !errors.Is(cause, fairlock.ErrLockLost) {
		t.Fatalf("HoldContext cause = %v, want ErrLockLost", cause)
	}
	e.clk.Advance(50 * time.Millisecond)
	if ok, _ := b.TryLock(ctx, 0, time.Second); !ok {
		t.Fatal("another handle cannot take an expired lock")
	}
	if err := a.Unlock(ctx); !errors.Is(err, fairlock.ErrLockLost) {
		t.Fatalf("Unlock of an expired hold = %v, want ErrLockLost", err)
	}
	unlockAll(t, b)
}

// Extend lengthens a fixed lease, in Redis and in the handle's belief, and
// the lease stays fixed: nothing renews it afterwards.
func TestExtendLengthensAFixedLease(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.handle()
	if err := a.Extend(ctx, time.Second); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("Extend without a hold = %v, want ErrNotHeld", err)
	}
	if ok, err := a.TryLock(ctx, 0, time.Second); !ok || err != nil {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if err := a.Extend(ctx, d); !errors.Is(err, fairlock.ErrInvalidArgument) {
			t.Fatalf("Extend(%v) = %v, want ErrInvalidArgument", d, err)
		}
	}
	e.clk.Advance(500 * time.Millisecond)
	if err := a.Extend(ctx, 5*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if ttl, _ := a.TTL(ctx); ttl != 5*time.Second {
		t.Fatalf("TTL after Extend(5s) = %v", ttl)
	}
	// Extend never shortens.
	if err := a.Extend(ctx, time.Second); err != nil {
		t.Fatalf("Extend to less: %v", err)
	}
	if ttl, _ := a.TTL(ctx); ttl != 5*time.Second {
		t.Fatalf("TTL after Extend(1s) = %v, want it kept at 5s", ttl)
	}
	e.clk.Advance(4 * time.Second) // past the first lease: the belief moved too
	if isClosed(a.Lost()) {
		t.Fatal("lost before the extended lease ran out")
	}
	if e.clk.Pending() != 1 {
		t.Fatalf("%d timers pending for an extended fixed lease, want only its loss timer", e.clk.Pending())
	}
	e.clk.Advance(time.Second)
	if !isClosed(a.Lost()) {
		t.Fatal("an extended fixed lease was renewed")
	}
	if err := a.Extend(ctx, time.Second); !errors.Is(err, fairlock.ErrLockLost) {
		t.Fatalf("Extend of a lost hold = %v, want ErrLockLost", err)
	}
}

// Extend on a hold that Redis no longer has ends it as lost.
func TestExtendFindsTheHoldGone(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.handle()
	mustLock(t, a)
	e.mr.Del(key)
	if err := a.Extend(ctx, time.Second); !errors.Is(err, fairlock.ErrLockLost) {
		t.Fatalf("Extend of a deleted hold = %v, want ErrLockLost", err)
	}
	if !isClosed(a.Lost()) {
		t.Fatal("Lost is open after Extend found the hold gone")
	}
	if err := a.Unlock(ctx); !errors.Is(err, fairlock.ErrLockLost) {
		t.Fatalf("Unlock = %v, want ErrLockLost", err)
	}
}

func TestWatchdogKeepsTheLeaseAlive(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.handle(fairlock.WithLease(3 * time.Second))
	mustLock(t, a)
	for i := 0; i < 40; i++ { // 10 leases
		e.clk.Advance(750 * time.Millisecond)
	}
	if isClosed(a.Lost()) {
		t.Fatal("a watched lease was lost")
	}
	if ttl, _ := a.TTL(ctx); ttl < 2*time.Second {
		t.Fatalf("TTL after 10 leases = %v; the watchdog renews every lease/3", ttl)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if e.clk.Pending() != 0 {
		t.Fatalf("%d timers still pending after Unlock", e.clk.Pending())
	}
}

func TestLostWhenDeletedBehindTheHoldersBack(t *testing.T) {
	e := newEnv(t)
	a := e.handle(fairlock.WithLease(3 * time.Second))
	mustLock(t, a)
	hold := a.HoldContext()
	e.mr.Del(key)
	e.clk.Advance(time.Second) // the next renewal
	if !isClosed(a.Lost()) {
		t.Fatal("Lost not closed after the lock was deleted")
	}
	if cause := context.Cause(hold); !errors.Is(cause, fairlock.ErrLockLost) {
		t.Fatalf("HoldContext cause = %v, want ErrLockLost", cause)
	}
	if a.Token() != 0 {
		t.Fatal("Token of a lost hold is not 0")
	}
	if err := a.Unlock(context.Background()); !errors.Is(err, fairlock.ErrLockLost) {
		t.Fatalf("Unlock = %v, want ErrLockLost", err)
	}
}

func TestLostWhenTakenByAnother(t *testing.T) {
	e := newEnv(t)
	a := e.handle(fairlock.WithLease(3 * time.Second))
	mustLock(t, a)
	// Another owner's hold, written behind a's back.
	redistest.SetHoldField(t, e.mr, key, "o", "someone-else")
	e.clk.Advance(time.Second)
	if !isClosed(a.Lost()) {
		t.Fatal("Lost not closed after the lock was taken by another owner")
	}
}

func TestTokensIncreaseAcrossExpiryAndFlush(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.handle()
	var last int64
	take := func(what string) {
		t.Helper()
		if ok, err := m.TryLock(ctx, 0, time.Second); !ok || err != nil {
			t.Fatalf("%s: TryLock = %v, %v", what, ok, err)
		}
		if tok := m.Token(); tok <= last {
			t.Fatalf("%s: token %d not above the previous %d", what, tok, last)
		} else {
			last = tok
		}
	}
	take("first")
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	take("after release")
	mustReenter(t, m) // a re-entry keeps the token
	if m.Token() != last {
		t.Fatal("re-entry changed the token")
	}
	unlockAll(t, m)
	take("again")
	e.clk.Advance(2 * time.Second)
	take("after the lease expired")
	// The re-entry above asked for a 30 s lease: keys stay 40 s past it.
	e.clk.Advance(71 * time.Second)
	if keys := redistest.LockKeys(e.mr); len(keys) != 0 {
		t.Fatalf("keys left 40 s after every lease ran out: %v", keys)
	}
	take("after every key expired")
	unlockAll(t, m)
	e.mr.FlushAll()
	e.clk.Advance(time.Microsecond)
	// A flushed server grants nothing while it settles (the presence
	// grace, docs/presence.md): the try waits that out, then takes it.
	type tried struct {
		ok  bool
		err error
	}
	got := make(chan tried, 1)
	go func() {
		ok, err := m.TryLock(ctx, 0, time.Second)
		got <- tried{ok, err}
	}()
	var r tried
	for len(got) == 0 {
		e.clk.Advance(10 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	if r = <-got; !r.ok || r.err != nil {
		t.Fatalf("after FLUSHALL: TryLock = %v, %v", r.ok, r.err)
	}
	if tok := m.Token(); tok <= last {
		t.Fatalf("after FLUSHALL: token %d not above the previous %d", tok, last)
	}
	unlockAll(t, m)
}

// replyOf is a script's reply as an array: the uncontended paths answer
// with a bare integer (a fresh token; 1, released), which stands for
// {1, token, 0} and {1}.
func replyOf(cmd *redis.Cmd, acquire bool) ([]any, error) {
	v, err := cmd.Result()
	if n, ok := v.(int64); ok && err == nil {
		if acquire {
			return []any{int64(1), n, int64(0)}, nil
		}
		return []any{n}, nil
	}
	if err != nil {
		return nil, err
	}
	return cmd.Slice()
}

func TestScriptsAreSafeToRunTwice(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	keys := []string{key}
	acquire := func(req string) []any {
		t.Helper()
		v, err := replyOf(lua.Default().ReentrantAcquire.Run(ctx, e.client, nil, keys, "owner-1", req, 1000), true)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	first := acquire("r1")
	if again := acquire("r1"); again[1] != first[1] {
		t.Fatalf("a retried acquisition was applied twice: %v then %v", first, again)
	}
	if n := redistest.HoldField(t, e.mr, key, "c"); n != "1" {
		t.Fatalf("count after a retried acquisition = %s, want 1", n)
	}
	acquire("r2") // re-entry
	if reentered := acquire("r2"); reentered[1] != first[1] || redistest.HoldField(t, e.mr, key, "c") != "2" {
		t.Fatalf("a retried re-entry answered %v, count %s; want token %v, count 2", reentered, redistest.HoldField(t, e.mr, key, "c"), first[1])
	}
	token := first[1]
	release := func(req string) []any {
		t.Helper()
		v, err := replyOf(lua.Default().ReentrantRelease.Run(ctx, e.client, nil, keys, "owner-1", req, token, "PUBLISH", "c"), false)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	release("r3")
	if again := release("r3"); again[0] != int64(2) || redistest.HoldField(t, e.mr, key, "c") != "1" {
		t.Fatalf("a retried release was applied twice: %v, count %s", again, redistest.HoldField(t, e.mr, key, "c"))
	}
	release("r4")
	if again := release("r4"); again[0] != int64(1) {
		t.Fatalf("a retried final release answered %v, want the first answer {1}", again)
	}
	if redistest.HoldField(t, e.mr, key, "o") != "" {
		t.Fatal("lock still held after the final release")
	}

	// Others take and release the lock before the retry comes: their
	// requests overwrite the stored answer, and the retry must still get
	// {1}, not "not held" (an Unlock that worked reported as ErrLockLost).
	other := func(owner, req string) {
		t.Helper()
		v, err := replyOf(lua.Default().ReentrantAcquire.Run(ctx, e.client, nil, keys, owner, req+"a", 1000), true)
		if err != nil || v[0] != int64(1) {
			t.Fatalf("%s's acquisition: %v, %v", owner, v, err)
		}
		if v, err := replyOf(lua.Default().ReentrantRelease.Run(ctx, e.client, nil, keys, owner, req+"r", v[1], "PUBLISH", "c"), false); err != nil || v[0] != int64(1) {
			t.Fatalf("%s's release: %v, %v", owner, v, err)
		}
	}
	for i := range 3 {
		other(fmt.Sprintf("owner-%d", i+2), fmt.Sprintf("o%d", i))
		if again := release("r4"); again[0] != int64(1) {
			t.Fatalf("a final release retried after %d other holds answered %v, want {1}", i+1, again)
		}
	}
	// Beyond the kept tokens the answer is "not held": never a release
	// applied twice, at worst a false ErrLockLost.
	for i := 3; i < 8; i++ {
		other(fmt.Sprintf("owner-%d", i+2), fmt.Sprintf("o%d", i))
	}
	if again := release("r4"); again[0] != int64(0) {
		t.Fatalf("a final release retried after 8 other holds answered %v, want {0}", again)
	}
	// Any other handle's release with that token changes nothing.
	if v, err := replyOf(lua.Default().ReentrantRelease.Run(ctx, e.client, nil, keys, "owner-x", "rx", token, "PUBLISH", "c"), false); err != nil || v[0] != int64(0) {
		t.Fatalf("another owner's release of a released token: %v, %v; want {0}", v, err)
	}
}

func TestNoKeysLeftBehind(t *testing.T) {
	e := newEnv(t)
	m := e.handle()
	mustLock(t, m)
	mustReenter(t, m)
	unlockAll(t, m)
	for _, k := range e.mr.Keys() {
		if ttl := e.mr.TTL(k); ttl <= 0 {
			t.Fatalf("key %s has no TTL", k)
		}
	}
	// The lease Redis granted runs 30 s from the Lock; keys stay 40 s more.
	e.clk.Advance(70*time.Second + time.Millisecond)
	if keys := redistest.LockKeys(e.mr); len(keys) != 0 {
		t.Fatalf("keys left 40 s after the last lease would have run out: %v", keys)
	}
}

func TestLayoutVersionMismatchFailsLoudly(t *testing.T) {
	for name, write := range map[string]func(e *env){
		"a later version":               func(e *env) { redistest.SetHoldField(t, e.mr, key, "v", "999") },
		"layout 2 (before grant times)": func(e *env) { redistest.SetHoldField(t, e.mr, key, "v", "2") },
		"layout 1 (the hold as a hash)": func(e *env) { e.mr.HSet(key, "v", "1", "f", "5") },
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			write(e)
			before := e.mr.Dump()
			_, err := e.handle().TryLock(context.Background(), 0, time.Second)
			if err == nil || !contains(err.Error(), "layout") {
				t.Fatalf("TryLock on a lock written by another layout = %v, want a layout error", err)
			}
			if !errors.Is(err, fairlock.ErrDataLayout) {
				t.Fatalf("the layout error %q does not match ErrDataLayout", err)
			}
			// What to do, once, for a key that never expires too (one an old
			// client keeps renewing, or written without a TTL).
			if msg := err.Error(); strings.Count(msg, "fairlock: ") != 1 ||
				!contains(msg, "upgrade every client") || !contains(msg, "delete the keys that start with "+key) {
				t.Fatalf("the layout error %q does not say, once, what to do", msg)
			}
			if e.mr.Dump() != before {
				t.Fatal("a layout error changed the lock's data")
			}
		})
	}
}

func contains(s, sub string) bool {
	return len(s) >= len(sub) && (s == sub || len(sub) == 0 || indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func TestUncontendedLockUnlockIsTwoScriptCalls(t *testing.T) {
	e := newEnv(t)
	counter := &redistest.ScriptCounter{}
	e.client.AddHook(counter)
	m := e.handle()
	mustLock(t, m) // loads the scripts
	unlockAll(t, m)
	counter.Scripts.Store(0)
	mustLock(t, m)
	if err := m.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := counter.Scripts.Load(); n != 2 {
		t.Fatalf("uncontended Lock+Unlock made %d script calls, want 2", n)
	}
}

func TestAcquisitionWhoseReplyIsLostIsUndone(t *testing.T) {
	e := newEnv(t)
	lost := &redistest.LostReply{}
	e.client.AddHook(lost)
	m := e.handle()
	mustLock(t, m) // load the scripts
	unlockAll(t, m)
	lost.Armed.Store(true)
	if err := m.Lock(context.Background()); err == nil {
		t.Fatal("Lock succeeded although its reply was lost")
	}
	if locked, _ := m.IsLocked(context.Background()); locked {
		t.Fatal("an acquisition whose reply was lost left the lock held by a handle that does not know it")
	}
	mustLock(t, m)
	unlockAll(t, m)
}

func TestHoldLostByTheClientIsEndedByItsNextLock(t *testing.T) {
	e := newEnv(t)
	cut := &redistest.Partition{}
	c := redis.NewClient(&redis.Options{Addr: e.mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(cut)
	a, err := reentrant.New(redistest.OwnerOn(c, e.clk, nil), "jobs")
	if err != nil {
		t.Fatal(err)
	}
	mustLock(t, a)
	// Cut off, a's renewals fail. After 29.8 s of its 30 s lease the client
	// has given the hold up (a 302 ms safety margin), while Redis still has
	// it for 200 ms.
	cut.On.Store(true)
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
	// The next Lock must not count that hold as a re-entry: one Lock, one hold.
	if ok, err := a.TryLock(context.Background(), 0, 0); !ok || err != nil {
		t.Fatalf("TryLock after the lost hold = %v, %v", ok, err)
	}
	if n := holdCount(t, a); n != 1 {
		t.Fatalf("hold count after one Lock = %d, want 1 (the lost hold taken for a re-entry)", n)
	}
	if err := a.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if locked, _ := a.IsLocked(context.Background()); locked {
		t.Fatal("the lock is still held after its one Unlock")
	}
}

// slowReply moves the fake clock while a script call is on its way back, as
// a slow network or a paused process would.
type slowReply struct {
	clk   *clock.Fake
	delay time.Duration
	armed atomic.Bool
}

func (s *slowReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *slowReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if s.armed.CompareAndSwap(true, false) {
			s.clk.Advance(s.delay)
		}
		return err
	}
}

func (s *slowReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// An acquisition whose reply comes back after its lease ran out is no
// success: TryLock returns false with an error wrapping ErrLockLost that
// says why, and the handle holds nothing.
func TestHoldWhoseLeaseRanOutBeforeItsReplyIsBornLost(t *testing.T) {
	e := newEnv(t)
	slow := &slowReply{clk: e.clk, delay: 2 * time.Second}
	e.client.AddHook(slow)
	m := e.handle()
	mustLock(t, m) // loads the scripts
	if err := m.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	slow.armed.Store(true)
	ok, err := m.TryLock(context.Background(), 0, time.Second)
	if ok || !errors.Is(err, fairlock.ErrLockLost) {
		t.Fatalf("TryLock = %v, %v; want false and ErrLockLost (its lease ran out before the answer)", ok, err)
	}
	slow.armed.Store(false)
	if n, err := m.HoldCount(context.Background()); n != 0 || err != nil {
		t.Fatalf("HoldCount after a failed TryLock = %d, %v; want 0", n, err)
	}
}

// The observer hears of a reentrant lock's acquisitions and holds, as the
// reentrant primitive's.
func TestObserverOfTheReentrantLock(t *testing.T) {
	e := newEnv(t)
	rec := &redistest.Recorder{}
	m := e.handle(fairlock.WithObserver(rec))
	ctx, err := m.LockContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.handle().TryLock(context.Background(), 0, 0); ok || err != nil {
		t.Fatalf("another handle's TryLock: %v, %v", ok, err)
	}
	e.clk.Advance(time.Second)
	unlockAll(t, m)
	got := rec.Snapshot()
	if len(got.Acquisitions) != 2 || got.Acquisitions[0].Outcome != observe.Acquired ||
		got.Acquisitions[1].Outcome != observe.Reentered || got.Acquisitions[0].Primitive != observe.Reentrant {
		t.Fatalf("acquisitions: %+v", got.Acquisitions)
	}
	if len(got.Holds) != 1 || got.Holds[0].Held != time.Second || got.Holds[0].End != observe.Released {
		t.Fatalf("holds: %+v", got.Holds)
	}
}

// A hold whose acquisition's answer came back late, yet inside its lease (a
// slow network, a paused process), is watched from its start: its holder
// never believes in it past the lease Redis granted. The watchdog's first
// round used to be due a third of a lease after the answer, with no loss
// timer until then: with the answer 24 s into a 30 s lease, Redis ended the
// hold 4 s before that round, and the holder went on believing. Now the
// first round comes before the deadline: renewed in time, the hold is
// kept; cut off, it is lost at its deadline, before Redis ends it.
func TestHoldWhoseAnswerCameLateIsWatchedFromItsStart(t *testing.T) {
	for _, cutOff := range []bool{false, true} {
		t.Run(fmt.Sprintf("cut off %v", cutOff), func(t *testing.T) {
			e := newEnv(t)
			slow := &slowReply{clk: e.clk, delay: 24 * time.Second}
			cut := &redistest.Partition{}
			c := redis.NewClient(&redis.Options{Addr: e.mr.Addr(), MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			c.AddHook(cut)
			c.AddHook(slow)
			m, err := reentrant.New(redistest.OwnerOn(c, e.clk, nil), "jobs")
			if err != nil {
				t.Fatal(err)
			}
			other := e.handle() // on a client of its own, never cut off
			mustLock(t, m)      // loads the scripts
			unlockAll(t, m)
			slow.armed.Store(true)
			mustLock(t, m)
			cut.On.Store(cutOff)
			for i := 0; i < 120; i++ { // 12 s: past Redis's end of the first lease
				e.clk.Advance(100 * time.Millisecond)
				held, err := other.IsLocked(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if !isClosed(m.Lost()) && !held {
					t.Fatalf("%v after the acquisition was sent: Redis has ended the hold, and its holder still believes in it",
						24*time.Second+time.Duration(i+1)*100*time.Millisecond)
				}
			}
			cut.On.Store(false)
			if lost := isClosed(m.Lost()); lost != cutOff {
				t.Fatalf("Lost closed = %v; want %v (renewed in time unless cut off)", lost, cutOff)
			}
			if cutOff {
				if err := m.Unlock(context.Background()); !errors.Is(err, fairlock.ErrLockLost) {
					t.Fatalf("Unlock of the lost hold = %v, want ErrLockLost", err)
				}
				return
			}
			unlockAll(t, m)
		})
	}
}
