package fairlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// deadWaitTimeout is the default wait timeout: what a dead waiter would
// cost the live ones behind it if nothing looked at its presence.
const deadWaitTimeout = 10 * time.Second

// doomed is a process the test can kill: a handle on an owner made
// WithPresence on a client of its own, waiting in a Lock of its own.
type doomed struct {
	m    *fair.Mutex
	cut  *redistest.Partition
	sev  *redistest.Severable
	stop context.CancelFunc
	done chan error
}

// queueDoomed starts a Lock of a process that keeps a presence, and waits
// until it (and the asleep before it) sleep in the queue.
func queueDoomed(t *testing.T, mr *miniredis.Miniredis, clk *clock.Fake, name string, asleep int) *doomed {
	t.Helper()
	owner, cut, sev := cuttableOwner(t, &redis.Options{Addr: mr.Addr(), MaxRetries: -1}, clk)
	m, err := fair.New(owner, name, fairlock.WithWaitTimeout(deadWaitTimeout))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	d := &doomed{m: m, cut: cut, sev: sev, stop: stop, done: make(chan error, 1)}
	go func() { d.done <- m.Lock(ctx) }()
	waitFor(t, "the doomed waiter to sleep", func() bool { return redistest.Asleep() == asleep })
	t.Cleanup(func() {
		stop()
		<-d.done
	})
	return d
}

// kill makes the process die: every call fails, and every connection
// breaks, its presence subscription with them.
func (d *doomed) kill() {
	d.cut.On.Store(true)
	d.sev.Sever()
}

// doomedAhead queues three doomed waiters on lock "p", held by the
// caller, then a survivor on c's owner, whose Lock's result comes on got.
func doomedAhead(t *testing.T, mr *miniredis.Miniredis, clk *clock.Fake, c *redis.Client) (dead []*doomed, survivor *fair.Mutex, got chan error) {
	t.Helper()
	for i := range 3 {
		dead = append(dead, queueDoomed(t, mr, clk, "p", i+1))
	}
	survivor, err := fair.New(redistest.OwnerOn(c, clk, nil), "p", fairlock.WithWaitTimeout(deadWaitTimeout))
	if err != nil {
		t.Fatal(err)
	}
	got = make(chan error, 1)
	go func() { got <- survivor.Lock(context.Background()) }()
	waitFor(t, "the survivor to sleep", func() bool { return redistest.Asleep() == 4 })
	return dead, survivor, got
}

// survive steps the fake clock 10 ms at a time, letting the waiters react
// (asleep of them sleep, having read what Redis published, while got is
// empty), until got has the survivor's Lock result; it fails if that takes
// longer than bound after from.
func survive(t *testing.T, clk *clock.Fake, got chan error, asleep int, from time.Time, bound time.Duration, what string) time.Duration {
	t.Helper()
	settled := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		redistest.SyncHubs(ctx) // the dead's hubs answer nothing: the timeout
		cancel()
		waitFor(t, "the waiters to settle", func() bool {
			return (redistest.Asleep() == asleep && redistest.Unread() == 0) || len(got) == 1
		})
	}
	settled()
	for len(got) == 0 {
		if clk.Now().Sub(from) > bound {
			t.Fatalf("the survivor did not take the lock within %v of %s", bound, what)
		}
		clk.Advance(10 * time.Millisecond)
		settled()
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	return clk.Now().Sub(from)
}

// Dead waiters are passed over (docs/presence.md): three processes that
// keep a presence die while queued ahead of a live one; when the holder
// unlocks a second later, the live one holds the lock within the grace
// and two polls of the Unlock, not a wait timeout.
func TestPresenceDeadWaitersArePassedOver(t *testing.T) {
	redistest.NoLeaks(t)
	mr, clk, c := redistest.Mini(t)
	ctx := context.Background()
	holder, err := fair.New(redistest.OwnerOn(c, clk, nil), "p", fairlock.WithWaitTimeout(deadWaitTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	dead, survivor, got := doomedAhead(t, mr, clk, c)

	for _, d := range dead {
		d.kill()
	}
	presenceDropped(t, c, allPresences)
	for range 100 { // a second
		clk.Advance(10 * time.Millisecond)
		waitFor(t, "the waiters to settle", func() bool { return redistest.Asleep() == 4 })
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	took := survive(t, clk, got, 4, clk.Now(), core.PresenceGrace+2*core.PresencePoll, "the Unlock")
	t.Logf("the survivor took the lock %v (fake clock) after the Unlock, past three dead waiters", took)
	if err := survivor.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range dead {
		if d.m.Token() != 0 {
			t.Errorf("a dead waiter was left believing it holds token %d", d.m.Token())
		}
	}
}

// A holder and the first waiter, both keeping a presence, die together:
// nobody alive is the head, so nobody looks at them until the live waiter
// behind them sends its heartbeat, which finds the head's client gone and
// tells it to look at the grace's end: the survivor takes the lock within
// a heartbeat, the grace and two polls of the deaths, not a wait timeout.
func TestPresenceDeadHolderAndFirstWaiterCostAHeartbeat(t *testing.T) {
	redistest.NoLeaks(t)
	mr, clk, c := redistest.Mini(t)
	ctx := context.Background()
	howner, hcut, hsev := cuttableOwner(t, &redis.Options{Addr: mr.Addr(), MaxRetries: -1}, clk)
	holder, err := fair.New(howner, "p", fairlock.WithWaitTimeout(deadWaitTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	first := queueDoomed(t, mr, clk, "p", 1)
	survivor, err := fair.New(redistest.OwnerOn(c, clk, nil), "p", fairlock.WithWaitTimeout(deadWaitTimeout))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- survivor.Lock(ctx) }()
	waitFor(t, "both waiters to sleep", func() bool { return redistest.Asleep() == 2 })

	hcut.On.Store(true)
	hsev.Sever()
	first.kill()
	presenceDropped(t, c, allPresences)
	died := clk.Now()
	heartbeat := deadWaitTimeout / 3
	took := survive(t, clk, got, 2, died, heartbeat+core.PresenceGrace+2*core.PresencePoll, "the deaths")
	t.Logf("the survivor took the lock %v (fake clock) after the holder and the first waiter died together; wait timeout %v",
		took, deadWaitTimeout)
	if err := survivor.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// Waiters that die as the holder releases look alive to the release: it
// hands the lock to the first and tells the second it is the head, and both
// are dead. The releasing owner looks once more a poll later (its
// watchHandOff), finds them gone and tells the live waiter behind to look
// at the grace's end: it holds within about two polls and the grace of
// the Unlock, not a heartbeat (which would be the first look otherwise).
// An owner closed right after its Unlock, as a worker that exits closes
// it, makes that look at its Close: within a poll and the grace.
func TestPresenceWaitersKilledAtTheReleaseArePassedOver(t *testing.T) {
	for _, closed := range []bool{false, true} {
		t.Run(map[bool]string{false: "the releaser lives on", true: "the releaser closes its owner"}[closed], func(t *testing.T) {
			killedAtTheRelease(t, closed)
		})
	}
}

func killedAtTheRelease(t *testing.T, closeOwner bool) {
	redistest.NoLeaks(t)
	mr, clk, c := redistest.Mini(t)
	ctx := context.Background()
	// The holder's owner is of its own client, so that closing it closes
	// nobody else's.
	hc := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = hc.Close() })
	howner, err := redistest.NewOwner(hc, clk)
	if err != nil {
		t.Fatal(err)
	}
	holder, err := fair.New(howner, "p", fairlock.WithWaitTimeout(deadWaitTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	dead, survivor, got := doomedAhead(t, mr, clk, c)

	released := clk.Now()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	first := <-dead[0].done // it heard of its hand-off, and dies holding
	dead[0].done <- first   // for its clean-up
	if first != nil {
		t.Fatalf("the first waiter's Lock: %v", first)
	}
	for _, d := range dead {
		d.kill()
	}
	presenceDropped(t, c, allPresences)
	// The watch is due a poll after the Unlock, or at once at the owner's
	// Close; its look, the owner's background work, records the grantee's
	// absence (pa) when it runs.
	bound := 2*core.PresencePoll + core.PresenceGrace
	if closeOwner {
		if err := howner.Close(ctx); err != nil {
			t.Fatal(err)
		}
		bound = core.PresencePoll + core.PresenceGrace
	} else {
		clk.Advance(core.PresencePoll)
	}
	waitFor(t, "the release's watch to look", func() bool {
		hold, err := mr.Get("fairlock:f:{p}")
		return err == nil && strings.Contains(hold, `"pa":`)
	})
	// The bound, and the rig's steps of 10 ms.
	took := survive(t, clk, got, 3, released, bound+20*time.Millisecond, "the Unlock")
	t.Logf("the survivor took the lock %v (fake clock) after the Unlock, its three waiters killed as it ran", took)
	if err := survivor.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
