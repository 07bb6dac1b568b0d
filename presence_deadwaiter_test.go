package fairlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Presence covers a waiter only through the live waiter right behind it
// (docs/presence.md, its opening): a holder that keeps a presence and the
// first waiter die together, nobody alive is behind the holder, and the
// live waiter behind them gets the lock only once the dead waiter's place
// runs out, its wait timeout (and up to a heartbeat) after the deaths, then
// the grace and two polls: not in a quarter of a second. If this gets
// faster, the page and the README overstate the cost: fix them.
func TestPresenceDeadFirstWaiterCostsItsWaitTimeout(t *testing.T) {
	redistest.NoLeaks(t)
	mr, clk, c := redistest.Mini(t)
	ctx := context.Background()
	const wait = 10 * time.Second // the default wait timeout, said so below
	// dying is a client whose process the test can kill: every call fails,
	// every connection breaks (its presence subscription with them).
	type dying struct {
		cut   *redistest.Partition
		sever *redistest.Severable
	}
	client := func() (*redis.Client, dying) {
		hc := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = hc.Close() })
		d := dying{&redistest.Partition{}, &redistest.Severable{}}
		hc.AddHook(d.cut)
		hc.AddHook(d.sever)
		return hc, d
	}
	kill := func(d dying) {
		d.cut.On.Store(true)
		d.sever.Sever()
	}
	hc, holderDies := client()
	owner, err := redistest.PresentOwner(hc, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	holder, err := fair.New(owner, "p", fairlock.WithWaitTimeout(wait))
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	// The first waiter, in a process of its own that keeps a presence too
	// (it does not help: nothing looks at a waiter's presence).
	fc, firstDies := client()
	fowner, err := redistest.PresentOwner(fc, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, err := fair.New(fowner, "p", fairlock.WithWaitTimeout(wait))
	if err != nil {
		t.Fatal(err)
	}
	firstCtx, stopFirst := context.WithCancel(ctx)
	firstDone := make(chan error, 1)
	go func() { firstDone <- first.Lock(firstCtx) }()
	waitFor(t, "the first waiter to sleep", func() bool { return redistest.Asleep() == 1 })
	survivor, err := fair.New(redistest.OwnerOn(c, clk, nil), "p", fairlock.WithWaitTimeout(wait))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- survivor.Lock(ctx) }()
	waitFor(t, "both waiters to sleep", func() bool { return redistest.Asleep() == 2 })

	kill(holderDies)
	kill(firstDies)
	died := clk.Now()
	// The bound of guarantee 4 (one wait timeout, a heartbeat) and then of
	// guarantee 10 (the grace, two polls) once the survivor is the head.
	bound := wait + wait/3 + core.PresenceGrace + 2*core.PresencePoll
	for len(got) == 0 {
		if clk.Now().Sub(died) > bound {
			t.Fatalf("the survivor did not take the lock within %v of the deaths (wait timeout %v, a heartbeat, the grace and two polls)", bound, wait)
		}
		clk.Advance(10 * time.Millisecond)
		waitFor(t, "the waiters to settle", func() bool { return redistest.Asleep() == 2 || len(got) == 1 })
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	took := clk.Now().Sub(died)
	t.Logf("the survivor took the lock %v (fake clock) after the holder and the first waiter died together; wait timeout %v", took, wait)
	if took < wait {
		t.Errorf("the survivor took the lock %v after the deaths, sooner than the dead first waiter's wait timeout (%v): "+
			"docs/presence.md and the README say a dead waiter costs it; update them", took, wait)
	}
	if err := survivor.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	stopFirst()
	<-firstDone
}
