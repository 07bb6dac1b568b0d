package multi_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/multi"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/redis/go-redis/v9"
)

// masters is five independent miniredis servers under one fake clock.
type masters struct {
	t       *testing.T
	mrs     []*miniredis.Miniredis
	clients []redis.UniversalClient
	clk     *clock.Fake
}

func newMasters(t *testing.T) *masters {
	redistest.NoLeaks(t)
	m := &masters{t: t}
	for i := 0; i < 5; i++ {
		mr := miniredis.NewMiniRedis()
		if err := mr.Start(); err != nil {
			t.Fatal(err)
		}
		mr.ClockTTL(true)
		redistest.Booted(mr)
		c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close(); mr.Close() })
		m.mrs = append(m.mrs, mr)
		m.clients = append(m.clients, c)
	}
	m.clk = clock.NewFake(redistest.Epoch, func(now time.Time) {
		for _, mr := range m.mrs {
			mr.SetTime(now)
		}
	})
	return m
}

func (m *masters) redlock(opts ...reentrant.Option) *multi.RedLock {
	m.t.Helper()
	r, err := multi.NewRedLock(redistest.Owners(m.clients, m.clk), "orders", opts...)
	if err != nil {
		m.t.Fatal(err)
	}
	return r
}

// heldOn counts the masters on which the lock is held by anyone.
func (m *masters) heldOn() int {
	n := 0
	for _, mr := range m.mrs {
		if redistest.HoldField(m.t, mr, "fairlock:r:{orders}", "o") != "" {
			n++
		}
	}
	return n
}

func TestRedLockRefusesBadInput(t *testing.T) {
	m := newMasters(t)
	for what, clients := range map[string][]redis.UniversalClient{
		"no clients": nil,
		"nil client": {m.clients[0], nil},
		"twice":      {m.clients[0], m.clients[0]},
	} {
		if _, err := multi.NewRedLock(redistest.Owners(clients, nil), "orders"); !errors.Is(err, fairlock.ErrInvalidArgument) {
			t.Errorf("%s: %v", what, err)
		}
	}
	if _, err := multi.NewRedLock(redistest.Owners(m.clients, m.clk), "a{b}"); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Errorf("bad name: %v", err)
	}
	r := m.redlock()
	if r.Quorum() != 3 {
		t.Fatalf("Quorum of 5 = %d", r.Quorum())
	}
	if err := r.Unlock(context.Background()); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("Unlock before Lock: %v", err)
	}
	if _, err := r.TryLock(context.Background(), -time.Second, 0); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Fatalf("negative wait: %v", err)
	}
}

func TestRedLockHoldsOnAMajority(t *testing.T) {
	m := newMasters(t)
	ctx := context.Background()
	a, b := m.redlock(), m.redlock()
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if got := m.heldOn(); got != 5 {
		t.Fatalf("held on %d of 5 masters", got)
	}
	if a.Token() == 0 || a.Validity() <= 0 {
		t.Fatalf("Token %d, Validity %v", a.Token(), a.Validity())
	}
	if ok, err := b.TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("a second handle: %v, %v", ok, err)
	}
	// Re-entry, with the hold's context, is counted in the handle.
	if err := a.Lock(a.HoldContext()); err != nil {
		t.Fatal(err)
	}
	if err := a.Unlock(ctx); err != nil || m.heldOn() != 5 {
		t.Fatalf("first of two Unlocks: %v, held on %d", err, m.heldOn())
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if m.heldOn() != 0 {
		t.Fatalf("held on %d masters after Unlock", m.heldOn())
	}
	if c := context.Cause(a.HoldContext()); !errors.Is(c, fairlock.ErrReleased) {
		t.Fatalf("HoldContext cause %v", c)
	}
	if ok, err := b.TryLock(ctx, 0, 0); !ok || err != nil {
		t.Fatalf("after Unlock: %v, %v", ok, err)
	}
	_ = b.Unlock(ctx)
}

// Two masters down: three of five still make a majority. Three down: no
// attempt wins, and the two that granted it give it back.
func TestRedLockWithMastersDown(t *testing.T) {
	m := newMasters(t)
	ctx := context.Background()
	r := m.redlock()
	m.mrs[0].Close()
	m.mrs[1].Close()
	if ok, err := r.TryLock(ctx, 0, 0); !ok || err != nil {
		t.Fatalf("with 3 of 5 up: %v, %v", ok, err)
	}
	if got := r.Tokens(); got[0] != 0 || got[1] != 0 || got[2] == 0 {
		t.Fatalf("Tokens %v", got)
	}
	if err := r.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with 2 masters down: %v", err)
	}
	m.mrs[2].Close()
	if ok, err := r.TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("with 2 of 5 up: %v, %v", ok, err)
	}
	if m.heldOn() != 0 {
		t.Fatal("a failed attempt left its partial set held")
	}
}

// One watchdog renews every member: the members are held on fixed leases,
// and each round extends them all at once, so their leases stay in step.
func TestRedLockOneWatchdogRenewsAllMembers(t *testing.T) {
	m := newMasters(t)
	ctx := context.Background()
	r := m.redlock(fairlock.WithLease(3 * time.Second))
	if err := r.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	// Each member's hold has its loss timer; the RedLock hold has the one
	// watchdog. Per-member watchdogs would be five more timers.
	if got := m.clk.Pending(); got != 5+1 {
		t.Fatalf("%d timers pending, want 5 loss timers and 1 watchdog", got)
	}
	for range 40 { // 10 leases
		m.clk.Advance(750 * time.Millisecond)
	}
	if isClosed(r.Lost()) {
		t.Fatal("a renewed RedLock hold was lost")
	}
	for i, mr := range m.mrs {
		if ttl := mr.TTL("fairlock:r:{orders}"); ttl <= 0 {
			t.Fatalf("master %d: no TTL", i)
		}
	}
	exp := map[string]bool{} // each hold's own expiry (its key's TTL has slack)
	for _, mr := range m.mrs {
		v, _ := mr.Get("fairlock:r:{orders}")
		exp[holdField(v, "x")] = true
	}
	if len(exp) != 1 {
		t.Fatalf("members' expiries %v: renewed out of step", exp)
	}
	if err := r.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if got := m.clk.Pending(); got != 0 {
		t.Fatalf("%d timers pending after Unlock", got)
	}
}

// A fixed-lease RedLock hold is not renewed: it is lost when its lease runs
// out, and no watchdog runs.
func TestRedLockFixedLeaseIsNotRenewed(t *testing.T) {
	m := newMasters(t)
	ctx := context.Background()
	r := m.redlock()
	if ok, err := r.TryLock(ctx, 0, time.Second); !ok || err != nil {
		t.Fatalf("TryLock: %v, %v", ok, err)
	}
	if got := m.clk.Pending(); got != 5 {
		t.Fatalf("%d timers pending, want the 5 loss timers only", got)
	}
	m.clk.Advance(time.Second)
	// The members' losses are counted by context.AfterFunc, off this
	// goroutine: the bound only catches a hang.
	select {
	case <-r.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("a fixed-lease RedLock hold outlived its lease")
	}
	if err := r.Unlock(ctx); !errors.Is(err, fairlock.ErrLockLost) {
		t.Fatalf("Unlock: %v", err)
	}
}

// holdField reads one field of a hold's JSON string.
func holdField(hold, field string) string {
	var v map[string]any
	if err := json.Unmarshal([]byte(hold), &v); err != nil {
		return ""
	}
	s, _ := v[field].(string)
	return s
}

// The hold is lost when fewer than a majority of its members hold it.
func TestRedLockLostWithItsMajority(t *testing.T) {
	m := newMasters(t)
	ctx := context.Background()
	r := m.redlock(fairlock.WithLease(time.Second))
	if err := r.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	m.mrs[0].FlushAll()
	m.mrs[1].FlushAll()
	m.clk.Advance(time.Second) // renewals: two members find their key gone
	if isClosed(r.Lost()) {
		t.Fatal("lost with 3 of 5 members still holding")
	}
	m.mrs[2].FlushAll()
	m.clk.Advance(time.Second)
	select { // counted off this goroutine (context.AfterFunc)
	case <-r.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost is open with 2 of 5 members holding")
	}
	if c := context.Cause(r.HoldContext()); !errors.Is(c, fairlock.ErrLockLost) {
		t.Fatalf("HoldContext cause %v", c)
	}
	if err := r.Unlock(ctx); !errors.Is(err, fairlock.ErrLockLost) {
		t.Fatalf("Unlock of a lost hold: %v", err)
	}
	if m.heldOn() != 0 {
		t.Fatalf("held on %d masters after Unlock", m.heldOn())
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// A RedLock's wait, its pauses between attempts included, runs on the
// handle's clock: while that clock stands still a waiting TryLock makes no
// new attempt, however much real time goes by, and it gives up once the
// clock passes its wait.
func TestRedLockWaitsOnItsClock(t *testing.T) {
	m := newMasters(t)
	ctx := context.Background()
	a, b := m.redlock(), m.redlock()
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Unlock(ctx) }()
	timers := m.clk.Pending() // the holder's watchdog
	got := make(chan error, 1)
	go func() {
		ok, err := b.TryLock(ctx, 200*time.Millisecond, 0)
		if ok {
			err = errors.New("took a held lock")
		}
		got <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); m.clk.Pending() == timers; { // its first attempt, then its pause
		if time.Now().After(deadline) {
			t.Fatal("the waiting RedLock set no timer on its clock: its pause runs on the wall clock")
		}
		time.Sleep(time.Millisecond)
	}
	before := m.mrs[0].CommandCount()
	time.Sleep(250 * time.Millisecond) // real time only
	if n := m.mrs[0].CommandCount() - before; n != 0 {
		t.Fatalf("%d commands while the handle's clock stood still: the pause ran on the wall clock", n)
	}
	select {
	case err := <-got:
		t.Fatalf("TryLock returned before its clock passed the wait: %v", err)
	default:
	}
	for {
		m.clk.Advance(50 * time.Millisecond)
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}
