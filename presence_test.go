package fairlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/redis/go-redis/v9"
)

// presenceHolder is a fair (or reentrant) lock handle on an owner that
// keeps a presence, on a client of its own whose connections the test can
// cut (cut: every call fails; sever: every connection breaks), holding the
// lock "p", and a waiter queued behind it on another owner.
type presenceHolder struct {
	holder, waiter fairlock.MutexHandle
	holderOwner    *fairlock.Owner
	server         *redis.Client // a client of the waiter's, never cut
	cut            *redistest.Partition
	sever          *redistest.Severable
	clk            *clock.Fake
	got            chan error // the waiter's Lock
	order          atomic.Int32
	lostAt, gotAt  atomic.Int32 // the order in which Lost closed and the waiter's Lock returned
}

// lockKinds are the locks whose holders keep a presence, by name: each
// makes a handle of its kind on an owner.
var lockKinds = []struct {
	name string
	make func(*fairlock.Owner, string) (fairlock.MutexHandle, error)
}{{"fair", newFair}, {"reentrant", newReentrant}}

func newFair(o *fairlock.Owner, name string) (fairlock.MutexHandle, error) { return fair.New(o, name) }

func newReentrant(o *fairlock.Owner, name string) (fairlock.MutexHandle, error) {
	return reentrant.New(o, name)
}

// newPresenceHolderOf makes a presenceHolder whose handles mk makes.
func newPresenceHolderOf(t *testing.T, mk func(*fairlock.Owner, string) (fairlock.MutexHandle, error)) *presenceHolder {
	t.Helper()
	mr, clk, c := redistest.Mini(t)
	ph := &presenceHolder{server: c, clk: clk, got: make(chan error, 1)}
	ph.holderOwner, ph.cut, ph.sever = cuttableOwner(t, &redis.Options{Addr: mr.Addr(), MaxRetries: -1}, clk)
	var err error
	if ph.holder, err = mk(ph.holderOwner, "p"); err != nil {
		t.Fatal(err)
	}
	if ph.waiter, err = mk(redistest.OwnerOn(c, clk, nil), "p"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ph.holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		select {
		case <-ph.holder.Lost():
			ph.lostAt.Store(ph.order.Add(1))
		case <-stop:
		}
	}()
	go func() {
		err := ph.waiter.Lock(ctx)
		ph.gotAt.Store(ph.order.Add(1))
		ph.got <- err
	}()
	waitFor(t, "the waiter to sleep", func() bool { return redistest.Asleep() == 1 })
	return ph
}

// cuttableOwner is an owner made WithPresence on a client of its own (opts),
// whose calls the test can fail (cut) and whose connections it can break
// (sever).
func cuttableOwner(t *testing.T, opts *redis.Options, clk *clock.Fake) (*fairlock.Owner, *redistest.Partition, *redistest.Severable) {
	t.Helper()
	hc := redis.NewClient(opts)
	t.Cleanup(func() { _ = hc.Close() })
	cut, sever := &redistest.Partition{}, &redistest.Severable{}
	hc.AddHook(cut)
	hc.AddHook(sever)
	owner, err := redistest.PresentOwner(hc, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	return owner, cut, sever
}

// allPresences matches every presence channel (presenceDropped).
const allPresences = "fairlock:presence:*"

// presenceDropped waits (real time) until Redis has no subscriber left on the
// presence channels that pattern matches, as when their processes die: a
// severed connection's subscription goes when the server has read its
// close, which the fake clock does not wait for.
func presenceDropped(t tb, c *redis.Client, pattern string) {
	t.Helper()
	waitFor(t, "Redis to drop the presence of "+pattern, func() bool {
		chans, err := c.PubSubChannels(context.Background(), pattern).Result()
		return err == nil && len(chans) == 0
	})
}

// waitFor polls cond (real time) for up to 10 s.
func waitFor(t tb, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not within 10 s", what)
		}
	}
}

// pinged advances the fake clock to the holder's next session PING and
// waits for its answer: from then on a break leaves the holder most of the
// grace to come back.
func (ph *presenceHolder) pinged(t *testing.T) {
	t.Helper()
	ph.step(t, core.SessionPing)
	now := ph.clk.Now()
	waitFor(t, "the holder's PING to be answered", func() bool { return !redistest.PresenceAlive(ph.holderOwner).Before(now) })
}

// breakOff cuts the holder off from Redis and breaks its connections, a
// PING answered just before, and waits for its holds to end, which they do
// at once, with no clock moving: its first try to subscribe again fails,
// so Redis is not there. It waits too for Redis to drop the holder's
// presence, which miniredis does on a goroutine of its own: on a loaded
// machine, a test that moved the clock meanwhile saw the waiter find the
// holder there until past the grace. It returns when the break came (the
// fake clock).
func (ph *presenceHolder) breakOff(t *testing.T) time.Time {
	t.Helper()
	ph.pinged(t)
	ph.cut.On.Store(true)
	ph.sever.Sever()
	broke := ph.clk.Now()
	waitFor(t, "the holder to end its hold", func() bool { return ph.lostAt.Load() != 0 })
	presenceDropped(t, ph.server, transport.PresenceChannel("*")) // the holder's: the waiter's owner keeps none
	return broke
}

// presenceBack waits for owner's presence, cut off until now, to come back
// (it had come up ups times): its next try to subscribe comes
// presenceRetry after the last, on clk, which moves 10 ms at a time, 20 ms
// of real time apart (at most 10 s of it).
func presenceBack(t tb, label string, owner *fairlock.Owner, clk *clock.Fake, ups int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !waitBriefly(func() bool { return redistest.PresenceUps(owner) > ups }); {
		if time.Now().After(deadline) {
			t.Fatalf("%s's presence did not come back", label)
		}
		clk.Advance(10 * time.Millisecond)
	}
}

// countedClient is a client of mr's whose script calls are counted.
func countedClient(t *testing.T, mr *miniredis.Miniredis) (*redis.Client, *redistest.ScriptCounter) {
	t.Helper()
	counted := &redistest.ScriptCounter{}
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(counted)
	return c, counted
}

// step advances the fake clock by d, then lets the waiter act on it.
func (ph *presenceHolder) step(t *testing.T, d time.Duration) {
	t.Helper()
	ph.clk.Advance(d)
	waitFor(t, "the waiter to settle", func() bool {
		return redistest.Asleep() == 1 || len(ph.got) == 1
	})
}

// A break after which Redis cannot be reached at once ends the holder's
// holds at once (Lost), and their release fails while it is cut off; the
// presence comes back within the grace, so no waiter may end the hold that
// Redis still keeps, and every waiter would wait for its lease (30 s: so it
// did). The owner releases such holds again when its presence comes back:
// the waiter holds as soon as that release has run, with no time passing.
func TestPresenceBreakReleasesTheLostHoldsWhenBack(t *testing.T) {
	for _, k := range lockKinds {
		t.Run(k.name, func(t *testing.T) {
			redistest.NoLeaks(t)
			ph := newPresenceHolderOf(t, k.make)
			broke := ph.breakOff(t)
			waitFor(t, "its release to fail", func() bool { return redistest.Background() == 0 })
			ups := redistest.PresenceUps(ph.holderOwner)
			ph.cut.On.Store(false)
			presenceBack(t, "the holder", ph.holderOwner, ph.clk, ups)
			back := ph.clk.Now()
			if back.Sub(broke) >= core.PresenceGrace {
				t.Fatalf("the presence came back %v after the break; want within the grace", back.Sub(broke))
			}
			waitFor(t, "the waiter to hold (no time passing)", func() bool { return len(ph.got) == 1 })
			if err := <-ph.got; err != nil {
				t.Fatal(err)
			}
			if now := ph.clk.Now(); now != back {
				t.Fatalf("the clock moved %v while the waiter was to take the lost hold's lock", now.Sub(back))
			}
			if err := ph.holder.Unlock(context.Background()); !errors.Is(err, fairlock.ErrLockLost) {
				t.Fatalf("the holder's Unlock = %v, want ErrLockLost", err)
			}
			if err := ph.waiter.Unlock(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A holder that lives keeps its lock however long a waiter polls; one whose
// process dies (every connection gone, none made again) loses it within the
// grace and two polls of its death, with its lease far from its end.
func TestPresenceDeadHolderLosesItsLockAfterTheGrace(t *testing.T) {
	for _, k := range lockKinds {
		t.Run(k.name, func(t *testing.T) {
			redistest.NoLeaks(t)
			ph := newPresenceHolderOf(t, k.make)
			for range 3 * core.PresenceGrace / core.PresencePoll {
				ph.step(t, core.PresencePoll)
			}
			if len(ph.got) != 0 || isClosed(ph.holder.Lost()) {
				t.Fatalf("a live holder lost its lock to a polling waiter (waiter: %v, Lost closed: %v)", len(ph.got), isClosed(ph.holder.Lost()))
			}
			// Death: nothing of the process reaches Redis again.
			ph.cut.On.Store(true)
			ph.sever.Sever()
			died := ph.clk.Now()
			presenceDropped(t, ph.server, allPresences)
			for len(ph.got) == 0 {
				if ph.clk.Now().Sub(died) > core.PresenceGrace+2*core.PresencePoll {
					t.Fatalf("the waiter did not take the lock within the grace and two polls of the holder's death")
				}
				ph.step(t, 10*time.Millisecond)
			}
			if err := <-ph.got; err != nil {
				t.Fatal(err)
			}
			t.Logf("taken %v (fake clock) after the holder's death; lease 30s", ph.clk.Now().Sub(died))
			if err := ph.waiter.Unlock(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A blip costs nothing: a holder whose connections all break while it
// lives, and come back at once, keeps its hold (Lost stays open, its
// Unlock succeeds) however long the waiter looks afterwards, and the
// waiter gets the lock from that Unlock.
func TestPresenceBlipKeepsTheHold(t *testing.T) {
	for _, k := range lockKinds {
		t.Run(k.name, func(t *testing.T) {
			redistest.NoLeaks(t)
			ph := newPresenceHolderOf(t, k.make)
			ph.pinged(t)
			ups := redistest.PresenceUps(ph.holderOwner)
			ph.sever.Sever()
			riddenOut(t, "the holder", ph.holderOwner, ph.clk, ups) // its renewal, due at once, runs at the clock's next tick
			for range 3 * core.PresenceGrace / core.PresencePoll {
				ph.step(t, core.PresencePoll)
			}
			if len(ph.got) != 0 || isClosed(ph.holder.Lost()) {
				t.Fatalf("a blip cost the hold (the waiter's Lock returned: %v, Lost closed: %v)", len(ph.got) != 0, isClosed(ph.holder.Lost()))
			}
			if err := ph.holder.Unlock(context.Background()); err != nil {
				t.Fatalf("the holder's Unlock after a blip = %v, want nil", err)
			}
			if err := <-ph.got; err != nil {
				t.Fatal(err)
			}
			if err := ph.waiter.Unlock(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A holder whose connections break while it lives and cannot come back
// ends its hold (Lost closes, Unlock says ErrLockLost) before the waiter,
// which waits out the grace, can take the lock; once it can reach Redis
// again, it takes the lock again.
func TestPresenceBreakThatLastsEndsTheHoldFirst(t *testing.T) {
	for _, k := range lockKinds {
		t.Run(k.name, func(t *testing.T) {
			redistest.NoLeaks(t)
			ph := newPresenceHolderOf(t, k.make)
			// (breakOff waits for the hold to end: the loop below would
			// otherwise race the holder's goroutine in real time, as a step
			// does not wait for it.)
			broke := ph.breakOff(t)
			for len(ph.got) == 0 {
				if ph.clk.Now().Sub(broke) > core.PresenceGrace+2*core.PresencePoll {
					t.Fatalf("the waiter did not take the lock within the grace and two polls of the break")
				}
				ph.step(t, 10*time.Millisecond)
			}
			if err := <-ph.got; err != nil {
				t.Fatal(err)
			}
			if lost, got := ph.lostAt.Load(), ph.gotAt.Load(); lost == 0 || lost > got {
				t.Fatalf("Lost closed %d-th, the waiter's Lock returned %d-th: the holder was not the first to know", lost, got)
			}
			// Read before the cut ends: the owner's next try may come at once.
			ups := redistest.PresenceUps(ph.holderOwner)
			ph.cut.On.Store(false)
			if err := ph.holder.Unlock(context.Background()); !errors.Is(err, fairlock.ErrLockLost) {
				t.Fatalf("the holder's Unlock = %v, want ErrLockLost", err)
			}
			if err := ph.waiter.Unlock(context.Background()); err != nil {
				t.Fatal(err)
			}
			// Its presence comes back at its next try, and it takes the lock again.
			waitFor(t, "the holder's presence to come back", func() bool {
				ph.clk.Advance(10 * time.Millisecond) // its next try, presenceRetry after the last
				return redistest.PresenceUps(ph.holderOwner) > ups
			})
			if err := ph.holder.Lock(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := ph.holder.Unlock(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// On a single server, on Sentinel and on Cluster the defaults keep a
// presence, as WithPresence does, and WithoutPresence none; WithPresence
// and WithoutPresence together, and a zero OwnerOption, are refused. None
// of it calls Redis (nothing listens at these addresses).
func TestPresenceOptionIsChecked(t *testing.T) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer func() { _ = cc.Close() }()
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}})
	defer func() { _ = fc.Close() }()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer func() { _ = c.Close() }()
	keeps := func(client redis.UniversalClient, opts ...fairlock.OwnerOption) bool {
		t.Helper()
		o, err := fairlock.NewOwner(client, opts...)
		if err != nil {
			t.Fatalf("NewOwner: %v, want an owner", err)
		}
		defer func() { _ = o.Close(context.Background()) }()
		return o.KeepsPresence()
	}
	for _, k := range []struct {
		name   string
		client redis.UniversalClient
		opts   []fairlock.OwnerOption
		want   bool
	}{
		{"a single server, the defaults", c, nil, true},
		{"a single server, WithPresence", c, []fairlock.OwnerOption{fairlock.WithPresence()}, true},
		{"a single server, WithoutPresence", c, []fairlock.OwnerOption{fairlock.WithoutPresence()}, false},
		{"Cluster, the defaults", cc, nil, true},
		{"Cluster, WithPresence", cc, []fairlock.OwnerOption{fairlock.WithPresence()}, true},
		{"Cluster, WithoutPresence", cc, []fairlock.OwnerOption{fairlock.WithoutPresence()}, false},
		{"Sentinel, the defaults", fc, nil, true},
		{"Sentinel, WithPresence", fc, []fairlock.OwnerOption{fairlock.WithPresence()}, true},
		{"Sentinel, WithoutPresence", fc, []fairlock.OwnerOption{fairlock.WithoutPresence()}, false},
	} {
		if got := keeps(k.client, k.opts...); got != k.want {
			t.Errorf("%s: KeepsPresence() = %v, want %v", k.name, got, k.want)
		}
	}
	if (*fairlock.Owner)(nil).KeepsPresence() {
		t.Error("a nil owner keeps a presence")
	}
	if _, err := fairlock.NewOwner(c, fairlock.WithPresence(), fairlock.WithoutPresence()); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Errorf("NewOwner(client, WithPresence(), WithoutPresence()) = %v, want ErrInvalidArgument", err)
	}
	if _, err := fairlock.NewOwner(c, fairlock.OwnerOption{}); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Errorf("NewOwner(client, OwnerOption{}) = %v, want ErrInvalidArgument", err)
	}
}

// A semaphore's permits held by a process that keeps a presence come back
// within the grace and two polls of its death, to its first waiter (the
// gate's holder, which looks every poll while such a holder holds); a live
// holder keeps them however long the waiter looks.
func TestPresenceDeadPermitHolderLosesItsPermitsAfterTheGrace(t *testing.T) {
	redistest.NoLeaks(t)
	mr, clk, c := redistest.Mini(t)
	owner, cut, sever := cuttableOwner(t, &redis.Options{Addr: mr.Addr(), MaxRetries: -1}, clk)
	held, err := fair.NewSemaphore(owner, "s", 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := held.Acquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	waiter, err := fair.NewSemaphore(redistest.OwnerOn(c, clk, nil), "s", 2)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *fair.Permit, 1)
	go func() {
		p, err := waiter.Acquire(ctx, 1)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	waitFor(t, "the waiter to sleep", func() bool { return redistest.Asleep() == 1 })
	step := func(d time.Duration) {
		t.Helper()
		clk.Advance(d)
		waitFor(t, "the waiter to settle", func() bool { return redistest.Asleep() == 1 || len(got) == 1 })
	}
	for range 3 * core.PresenceGrace / core.PresencePoll {
		step(core.PresencePoll)
	}
	if len(got) != 0 {
		t.Fatal("a live holder's permits went to a polling waiter")
	}
	cut.On.Store(true)
	sever.Sever()
	died := clk.Now()
	presenceDropped(t, c, allPresences)
	for len(got) == 0 {
		if clk.Now().Sub(died) > core.PresenceGrace+2*core.PresencePoll {
			t.Fatal("the waiter had no permit within the grace and two polls of the holder's death")
		}
		step(10 * time.Millisecond)
	}
	p := <-got
	t.Logf("a permit %v (fake clock) after the holder's death; lease 30s", clk.Now().Sub(died))
	if p == nil {
		t.Fatal("no permit")
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// presenceWaiter is a fair lock named by the test, held on a plain owner
// (holder), with a handle on an owner made WithPresence (waiter), on a
// client of its own whose connections the test can break (sever).
type presenceWaiter struct {
	clk            *clock.Fake
	c              *redis.Client // the holder's
	sever          *redistest.Severable
	owner          *fairlock.Owner // the waiter's
	waiter, holder *fair.Mutex
}

func newPresenceWaiter(t *testing.T, name string) *presenceWaiter {
	t.Helper()
	mr, clk, c := redistest.Mini(t)
	pw := &presenceWaiter{clk: clk, c: c}
	pw.owner, _, pw.sever = cuttableOwner(t, &redis.Options{Addr: mr.Addr(), MaxRetries: -1}, clk)
	var err error
	if pw.waiter, err = fair.New(pw.owner, name); err != nil {
		t.Fatal(err)
	}
	if pw.holder, err = fair.New(redistest.OwnerOn(c, clk, nil), name); err != nil {
		t.Fatal(err)
	}
	return pw
}

// A Lock whose grant is made while its owner's presence is down never
// returns success without the lock: the waiter's connections break just
// before the holder hands the lock on, over and over, and every Lock that
// returns nil
// holds (Redis counts its hold, its context lasts, Lost is open): a grant
// made while the presence was down is confirmed once it is back, or given
// back and waited past.
func TestPresenceGrantWhileDownIsNeverASuccessWithoutTheLock(t *testing.T) {
	redistest.NoLeaks(t)
	pw := newPresenceWaiter(t, "g")
	clk, sever, wo, waiter, holder := pw.clk, pw.sever, pw.owner, pw.waiter, pw.holder
	ctx := context.Background()
	const runs = 40
	for run := range runs {
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() { got <- waiter.Lock(ctx) }()
		waitFor(t, "the waiter to queue", func() bool { return redistest.Asleep() == 1 })
		ups := redistest.PresenceUps(wo)
		// The waiter's connections break just before the lock is handed
		// to it: the grant meets the presence down, or coming back up.
		sever.Sever()
		time.Sleep(time.Duration(run%4) * 200 * time.Microsecond)
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		lerr := lockReturned(t, got, clk, nil)
		if lerr != nil {
			t.Fatalf("run %d: the waiter's Lock = %v, want the lock (it waits past a grant it gave back)", run, lerr)
		}
		if n, err := waiter.HoldCount(ctx); err != nil || n != 1 {
			t.Fatalf("run %d: Lock returned nil, yet HoldCount = %d, %v: a success without the lock", run, n, err)
		}
		if isClosed(waiter.Lost()) || waiter.HoldContext().Err() != nil {
			t.Fatalf("run %d: Lock returned nil with its hold already ended (%v)", run, context.Cause(waiter.HoldContext()))
		}
		if err := waiter.Unlock(ctx); err != nil {
			t.Fatalf("run %d: Unlock = %v", run, err)
		}
		waitFor(t, "the waiter's presence to come back", func() bool { return redistest.PresenceUps(wo) > ups })
	}
}

// A grant to a Lock that waited is vouched for by a PING answered lately:
// the waiter's connections break just before the holder hands it the
// lock, and its reader hears of the break only later (a reader that runs
// late: a loaded machine). Its owner held nothing and sent no PING while
// it waited, so reading the break would end the hold at once: Lock
// returned nil, and the hold ended a moment later (the fault suite caught
// it once in CI, under load). Now the grant waits for a PING's answer
// (vouch), which does not come on the broken connection; once the break is
// known (read, or found by the owner's check of its subscription) the
// grant is confirmed after the presence is back, or given back and waited
// past. Every Lock that returns nil holds, after the break is read and a
// grace has passed. (On the fake clock a jeopardy already due fires only
// at the next Advance, after the presence's return has confirmed the
// hold, so this test passes without vouch too: it checks that the vouch
// neither hangs a Lock nor hands out a hold that ends; the vouch itself is
// core's TestVouchWantsARecentPing.)
func TestPresenceGrantBeforeAnUnreadBreakIsVouchedFor(t *testing.T) {
	redistest.NoLeaks(t)
	pw := newPresenceWaiter(t, "v")
	clk, sever, wo, holder := pw.clk, pw.sever, pw.owner, pw.holder
	var logs redistest.LogBuffer
	waiter, err := fair.New(wo, "v", fairlock.WithLogger(logs.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	// Armed once the holder has handed the lock on: the waiter's next
	// script call's reply brings it the grant.
	var armed, replied atomic.Bool
	wo.Client().(*redis.Client).AddHook(hookAfterScripts(func() {
		if armed.CompareAndSwap(true, false) {
			replied.Store(true)
		}
	}))
	t.Cleanup(sever.Release)
	ctx := context.Background()
	const runs = 10
	for run := range runs {
		replied.Store(false)
		logs.Reset()
		clk.Advance(2 * core.SessionPing) // the owner's last PING, of its last hold, is not recent
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() { got <- waiter.Lock(ctx) }()
		waitFor(t, "the waiter to queue", func() bool { return redistest.Asleep() == 1 })
		ups := redistest.PresenceUps(wo)
		sever.SeverUnread()
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		armed.Store(true)
		waitFor(t, "the grant to come back to the waiter", func() bool {
			if replied.Load() {
				return true
			}
			clk.Advance(core.PresencePoll) // the waiter's timers: its message is lost
			return false
		})
		time.Sleep(time.Millisecond) // the grant taken in, or the break found, before the reads fail
		sever.Release()
		// Not between the grant's reply and the presence's return: the
		// vouching PING's wait would run out before the break is read.
		lerr := lockReturned(t, got, clk, func() bool { return redistest.PresenceUps(wo) > ups })
		if lerr != nil {
			t.Fatalf("run %d: the waiter's Lock = %v, want the lock (it waits past a grant it gave back)", run, lerr)
		}
		waitFor(t, "the waiter's presence to come back", func() bool { return redistest.PresenceUps(wo) > ups })
		clk.Advance(core.PresenceGrace) // a jeopardy the break armed comes
		if isClosed(waiter.Lost()) || waiter.HoldContext().Err() != nil {
			t.Fatalf("run %d: Lock returned nil, and its hold ended once the break was read (%v); log:\n%s", run, context.Cause(waiter.HoldContext()), logs.String())
		}
		if n, err := waiter.HoldCount(ctx); err != nil || n != 1 {
			t.Fatalf("run %d: Lock returned nil, yet HoldCount = %d, %v: a success without the lock", run, n, err)
		}
		if err := waiter.Unlock(ctx); err != nil {
			t.Fatalf("run %d: Unlock = %v", run, err)
		}
	}
}

// lockReturned waits (real time) for the Lock whose result got brings,
// moving clk on by PresencePoll at each look (the presence's retries, the
// waiter's timers) while advance says so (nil: always), and returns it.
func lockReturned(t *testing.T, got <-chan error, clk *clock.Fake, advance func() bool) error {
	t.Helper()
	var err error
	waitFor(t, "the waiter's Lock to return", func() bool {
		select {
		case err = <-got:
			return true
		default:
			if advance == nil || advance() {
				clk.Advance(core.PresencePoll)
			}
			return false
		}
	})
	return err
}

// hookAfterScripts is a go-redis hook that calls after once a script
// call's reply is in.
type hookAfterScripts func()

func (hookAfterScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h hookAfterScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if name := strings.ToLower(cmd.Name()); strings.HasPrefix(name, "eval") || strings.HasPrefix(name, "fcall") {
			h()
		}
		return err
	}
}

func (hookAfterScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A blip leaves a fixed lease as it was: a waiter on an owner made
// WithPresence is handed a lock with a fixed lease, claims it halfway
// through, and its connections break; the owner confirms the hold (a second
// claim of the same grant), and Redis still ends the hold when the lease
// counted from its grant ends, not a lease later: the holder, which counts
// from the grant, stops believing as Redis stops keeping it.
func TestPresenceBlipLeavesAFixedLeaseAsItWas(t *testing.T) {
	redistest.NoLeaks(t)
	pw := newPresenceWaiter(t, "f")
	clk, c, sever, wo, waiter, holder := pw.clk, pw.c, pw.sever, pw.owner, pw.waiter, pw.holder
	ctx := context.Background()
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	const fixed = 500 * time.Millisecond
	got := make(chan error, 1)
	go func() {
		ok, err := waiter.TryLock(ctx, time.Hour, fixed)
		if err == nil && !ok {
			err = errors.New("TryLock gave up")
		}
		got <- err
	}()
	waitFor(t, "the waiter to queue", func() bool { return redistest.Asleep() == 1 })
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	granted := clk.Now()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	clk.Advance(fixed / 2) // the hand-off's claim
	waitFor(t, "the hand-off to be claimed", func() bool { h := inspectHolder(t, c, "f"); return h != nil && !h.Pending })
	// A session PING answered lately, as on a live link: the break leaves
	// the owner most of the grace to confirm its hold.
	pingAnswered(t, "the waiter", wo, clk)
	ups := redistest.PresenceUps(wo)
	sever.Sever()
	riddenOut(t, "the waiter", wo, clk, ups)
	if isClosed(waiter.Lost()) {
		t.Fatal("a blip cost a fixed lease its hold")
	}
	ttl, err := waiter.TTL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if left := fixed - clk.Now().Sub(granted); ttl > left+time.Millisecond {
		t.Fatalf("after the blip Redis keeps the hold %v more, want at most the %v left of its fixed lease", ttl, left)
	}
	clk.Advance(fixed)
	waitFor(t, "the holder to stop believing", func() bool { return isClosed(waiter.Lost()) })
	if err := waiter.Unlock(ctx); !errors.Is(err, fairlock.ErrLockLost) {
		t.Fatalf("Unlock after the fixed lease ended = %v, want ErrLockLost", err)
	}
}

// inspectHolder is the lock's holder as Redis shows it, nil when free.
func inspectHolder(t *testing.T, c redis.UniversalClient, name string) *fair.Holder {
	t.Helper()
	st, err := fair.Inspect(context.Background(), c, name)
	if err != nil {
		t.Fatal(err)
	}
	return st.Holder
}

// A Lock on an owner made WithPresence that starts while the presence is
// down, between its tries to subscribe again, has the next try made at
// once rather than answer with the failure the presence saw before it:
// while Redis cannot be reached the Lock fails with why after a few fresh
// tries, with no clock moving; once Redis can be reached again it takes
// the lock, although the presence's last try failed and its next is not
// due (a newcomer's job runner found every Lock failing for 100 ms after
// Redis was back).
func TestPresenceLockAfterAnOutageIsNotRefusedForIt(t *testing.T) {
	redistest.NoLeaks(t)
	mr, clk, _ := redistest.Mini(t)
	owner, cut, sever := cuttableOwner(t, &redis.Options{Addr: mr.Addr()}, clk)
	m, err := fair.New(owner, "outage")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	ups := redistest.PresenceUps(owner)

	cut.On.Store(true) // Redis cannot be reached
	sever.Sever()
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second) // real time: the fake clock stands still
	defer cancel()
	if err := m.Lock(lctx); !errors.Is(err, redistest.ErrPartitioned) {
		t.Fatalf("Lock while Redis cannot be reached = %v, want the presence's failure (%v)", err, redistest.ErrPartitioned)
	}

	cut.On.Store(false) // back; the presence waits for its next try, not due
	if err := m.Lock(lctx); err != nil {
		t.Fatalf("Lock once Redis can be reached again = %v, want the lock", err)
	}
	// It came up for this Lock (cameUp counts it last, after letting the
	// Lock go on).
	waitFor(t, "the presence to count its coming back", func() bool { return redistest.PresenceUps(owner) > ups })
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// While a reentrant lock's holder keeps a presence, only its
// longest-waiting live waiter polls (every 50 ms), not each waiter: three
// waiters of one client make about 20 script calls a second in all (the
// fair lock's head does the same), and a waiter that joins later never
// polls while one ahead of it lives.
func TestPresenceReentrantWaitersPollOneAtATime(t *testing.T) {
	redistest.NoLeaks(t)
	mr, clk, _ := redistest.Mini(t)
	holderOwner, _, _ := cuttableOwner(t, &redis.Options{Addr: mr.Addr()}, clk)
	holder, err := reentrant.New(holderOwner, "polls")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	wc, counted := countedClient(t, mr)
	owner := redistest.OwnerOn(wc, clk, nil)
	const waiters = 3
	got := make(chan error, waiters)
	var handles []fairlock.MutexHandle
	for i := range waiters {
		w, err := reentrant.New(owner, "polls")
		if err != nil {
			t.Fatal(err)
		}
		handles = append(handles, w)
		go func() { got <- w.Lock(ctx) }()
		waitFor(t, "the waiter to sleep", func() bool { return redistest.Asleep() == i+1 })
	}
	before := counted.Scripts.Load()
	for range time.Second / (10 * time.Millisecond) {
		clk.Advance(10 * time.Millisecond)
		waitFor(t, "the waiters to settle", func() bool { return redistest.Asleep() == waiters })
	}
	calls := counted.Scripts.Load() - before
	t.Logf("%d script calls in a second of the fake clock, %d waiters", calls, waiters)
	if calls < 15 || calls > 25 {
		t.Errorf("%d script calls in a second by %d waiters; want about 20 (one waiter polling every %v)", calls, waiters, core.PresencePoll)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range waiters {
		clk.Advance(10 * time.Millisecond)
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		freed := false
		for _, w := range handles {
			if err := w.Unlock(ctx); err == nil {
				freed = true
				break
			} else if !errors.Is(err, fairlock.ErrNotHeld) && !errors.Is(err, fairlock.ErrReleased) {
				t.Fatal(err)
			}
		}
		if !freed {
			t.Fatal("a waiter's Lock returned, and no handle holds")
		}
	}
}

// A waiter behind the one a release woke is told to watch the new holder:
// the release's owner looks again a poll later (reentrant_watch.lua; a
// fair lock's hand-off tells the next head itself). So when that new
// holder dies, the waiter behind takes the lock within the grace and two
// polls of its death, not at its own timer (a third of its wait timeout)
// or the old hold's expiry.
func TestPresenceNewHolderIsWatchedByTheWaiterBehind(t *testing.T) {
	for _, k := range lockKinds {
		t.Run(k.name, func(t *testing.T) {
			redistest.NoLeaks(t)
			mr, clk, c := redistest.Mini(t)
			ctx := context.Background()
			first, err := k.make(redistest.OwnerOn(c, clk, nil), "watched")
			if err != nil {
				t.Fatal(err)
			}
			if err := first.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			nextOwner, cut, sever := cuttableOwner(t, &redis.Options{Addr: mr.Addr(), MaxRetries: -1}, clk)
			next, err := k.make(nextOwner, "watched")
			if err != nil {
				t.Fatal(err)
			}
			lc, counted := countedClient(t, mr)
			last, err := k.make(redistest.OwnerOn(lc, clk, nil), "watched")
			if err != nil {
				t.Fatal(err)
			}
			nextGot, lastGot := make(chan error, 1), make(chan error, 1)
			go func() { nextGot <- next.Lock(ctx) }()
			waitFor(t, "the next to sleep", func() bool { return redistest.Asleep() == 1 })
			go func() { lastGot <- last.Lock(ctx) }()
			waitFor(t, "the last to sleep", func() bool { return redistest.Asleep() == 2 })
			if err := first.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-nextGot; err != nil {
				t.Fatal(err)
			}
			// The release's look, a poll later (the releasing owner's
			// background call, on the fake clock), then the last waiter's
			// try and its first poll: two script calls of its client.
			// The look's goroutine may arm its timer late (real time): the
			// clock moves on in 10 ms steps, a millisecond of real time
			// apart, until the waiter has made both calls.
			calls := counted.Scripts.Load()
			for deadline := time.Now().Add(10 * time.Second); counted.Scripts.Load() < calls+2; {
				if time.Now().After(deadline) {
					t.Fatalf("the waiter behind the new holder made %d script calls in 10 s; want a try and a poll", counted.Scripts.Load()-calls)
				}
				clk.Advance(10 * time.Millisecond)
				waitFor(t, "the last waiter to settle", func() bool { return redistest.Asleep() == 1 })
				time.Sleep(time.Millisecond)
			}
			cut.On.Store(true)
			sever.Sever()
			died := clk.Now()
			presenceDropped(t, c, allPresences)
			for len(lastGot) == 0 {
				if clk.Now().Sub(died) > core.PresenceGrace+2*core.PresencePoll {
					t.Fatalf("the waiter behind did not take the lock within the grace and two polls of the new holder's death")
				}
				clk.Advance(10 * time.Millisecond)
				waitFor(t, "the last waiter to settle", func() bool { return redistest.Asleep() == 1 || len(lastGot) == 1 })
			}
			if err := <-lastGot; err != nil {
				t.Fatal(err)
			}
			t.Logf("taken %v (fake clock) after the new holder's death; lease 30s", clk.Now().Sub(died))
			if err := last.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
