package fairlock_test

// A failover, modelled (docs/presence.md, "Failovers"): a master swap that
// keeps the data and loses the subscriptions. Two miniredis on one fake
// clock: the swap copies every key, with its TTL, to the other server, and
// from then on every client's commands and new connections go there, while
// the pub/sub connections made before stay on the old one, as after a
// gentle SENTINEL FAILOVER (go-redis moves its pool to the new master at
// once, and leaves its pub/sub connections where they are). The holder
// lives through it: no waiter may end its hold, and both subscriptions
// must follow the master, after which the holder's death passes the lock
// on as on a single server.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	waitloop "github.com/fairlock/fairlock/internal/waiting"
	"github.com/redis/go-redis/v9"
)

// swapped is a deployment of two servers, one of them the master.
type swapped struct {
	servers [2]*miniredis.Miniredis
	direct  [2]*redis.Client // a plain client of each, for the routed commands
	master  atomic.Int32
	clk     *clock.Fake
	clients []*redis.Client
}

func newSwapped(t tb) *swapped {
	t.Helper()
	d := &swapped{}
	for i := range d.servers {
		mr := miniredis.NewMiniRedis()
		if err := mr.Start(); err != nil {
			t.Fatalf("miniredis: %v", err)
		}
		mr.ClockTTL(true)
		d.servers[i] = mr
		d.direct[i] = redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	}
	redistest.Booted(d.servers[0])
	d.clk = clock.NewFake(redistest.Epoch, func(t time.Time) {
		for _, mr := range d.servers {
			mr.SetTime(t)
		}
	})
	return d
}

// client is a process's client: its connections are dialled to the master
// of the moment, and its commands go to it (DialHook, ProcessHook).
func (d *swapped) client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: d.servers[0].Addr(), MaxRetries: -1})
	c.AddHook(d)
	d.clients = append(d.clients, c)
	return c
}

func (d *swapped) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		return next(ctx, network, d.servers[d.master.Load()].Addr())
	}
}

func (d *swapped) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if d.master.Load() == 0 {
			return next(ctx, cmd)
		}
		return d.direct[1].Process(ctx, cmd) // the pool's connections are the old master's
	}
}

func (d *swapped) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if d.master.Load() == 0 {
			return next(ctx, cmds)
		}
		var first error
		for _, cmd := range cmds {
			if err := d.direct[1].Process(ctx, cmd); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
}

// swap promotes the second server: it gets every key of the first, with
// its TTL, and none of its subscriptions.
func (d *swapped) swap(t tb) {
	t.Helper()
	d.replicate(t)
	d.master.Store(1)
}

// replicate copies every key of the first server, with its TTL, to the
// second: what the replica has when it is promoted.
func (d *swapped) replicate(t tb) {
	t.Helper()
	from, to := d.servers[0], d.servers[1]
	for _, k := range from.Keys() {
		switch typ := from.Type(k); typ {
		case "string":
			v, _ := from.Get(k)
			_ = to.Set(k, v)
		case "list":
			vs, _ := from.List(k)
			for _, v := range vs {
				_, _ = to.Push(k, v)
			}
		case "zset":
			members, _ := from.SortedSet(k)
			for m, score := range members {
				_, _ = to.ZAdd(k, score, m)
			}
		default:
			t.Fatalf("swap: key %s of type %s", k, typ)
		}
		if ttl := from.TTL(k); ttl > 0 {
			to.SetTTL(k, ttl)
		}
	}
}

func (d *swapped) stop() {
	for _, c := range d.clients {
		_ = c.Close()
	}
	for i, mr := range d.servers {
		_ = d.direct[i].Close()
		mr.Close()
	}
}

// presences are the presence channels subscribed on server i.
func (d *swapped) presences(i int) []string {
	chans, _ := d.direct[i].PubSubChannels(context.Background(), allPresences).Result()
	return chans
}

// inboxes are the waiters' inbox channels (transport.Inbox) subscribed on
// server i.
func (d *swapped) inboxes(i int) []string {
	chans, _ := d.direct[i].PubSubChannels(context.Background(), "fairlock:*:wake:*").Result()
	return chans
}

// failoverKeepsTheLiveHold plays a failover under a fair lock's holder with
// a waiter queued, both owners keeping a presence: for two seconds after
// the swap (ten graces) the waiter does not hold and the holder's Lost stays
// open; by then both subscriptions are on the new master (no later than a
// check after the swap: SessionPing for the holder, a wait check for the
// waiter); the holder's death then passes the lock on within the grace and
// two polls.
func failoverKeepsTheLiveHold(t tb, scripts *lua.Scripts) {
	t.Helper()
	d := newSwapped(t)
	defer d.stop()
	ctx := context.Background()
	hc := d.client()
	cut, sever := &redistest.Partition{}, &redistest.Severable{}
	hc.AddHook(cut)
	hc.AddHook(sever)
	ho, err := redistest.PresentOwner(hc, d.clk, scripts)
	if err != nil {
		t.Fatalf("%v", err)
	}
	wo, err := redistest.PresentOwner(d.client(), d.clk, scripts)
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer func() {
		_ = wo.Close(ctx)
		_ = ho.Close(ctx)
	}()
	h, err := fair.New(ho, "failover", fair.WithLabel("holder"))
	if err != nil {
		t.Fatalf("%v", err)
	}
	w, err := fair.New(wo, "failover", fair.WithLabel("waiter"))
	if err != nil {
		t.Fatalf("%v", err)
	}
	if err := h.Lock(ctx); err != nil {
		t.Fatalf("%v", err)
	}
	token := h.Token()
	got := make(chan error, 1)
	go func() { got <- w.Lock(ctx) }()
	waitFor(t, "the waiter to sleep", func() bool { return redistest.Asleep() == 1 })
	// A step settles before the next: the waiter asleep (or done), no
	// background call running, and each live owner's subscription up with
	// its holds confirmed. A follow takes a round trip or two on a real
	// clock, well within the grace; here it takes no fake time: its
	// confirming renewals, due at once, run at an Advance(0).
	live := []*fairlock.Owner{ho, wo}
	step := func(dt time.Duration) {
		d.clk.Advance(dt)
		waitFor(t, "the owners to settle", func() bool {
			if (redistest.Asleep() != 1 && len(got) == 0) || redistest.Background() != 0 {
				return false
			}
			for _, o := range live {
				if !redistest.PresenceConfirmed(o) {
					d.clk.Advance(0)
					return false
				}
			}
			return true
		})
	}

	d.swap(t)
	swapped := d.clk.Now()
	for d.clk.Now().Sub(swapped) < 10*core.PresenceGrace {
		step(10 * time.Millisecond)
		if len(got) == 1 {
			t.Fatalf("the waiter took the lock %v after the failover, while its holder lived", d.clk.Now().Sub(swapped))
		}
		if isClosed(h.Lost()) {
			t.Fatalf("the holder lost its hold %v after the failover", d.clk.Now().Sub(swapped))
		}
	}
	if n := len(d.presences(1)); n != 2 {
		t.Fatalf("%v after the failover the new master has %d presence subscriptions (%v); want the holder's and the waiter's",
			d.clk.Now().Sub(swapped), n, d.presences(1))
	}
	if n := len(d.inboxes(1)); n != 1 {
		t.Fatalf("%v after the failover the new master has %d waiters' inbox subscriptions (%v); want the waiter's",
			d.clk.Now().Sub(swapped), n, d.inboxes(1))
	}

	// The holder dies: nothing of it reaches either server again.
	live = live[1:]
	cut.On.Store(true)
	sever.Sever()
	died := d.clk.Now()
	waitFor(t, "the new master to drop the holder's presence", func() bool { return len(d.presences(1)) == 1 })
	for len(got) == 0 {
		if d.clk.Now().Sub(died) > core.PresenceGrace+2*core.PresencePoll {
			t.Fatalf("the waiter did not take the lock within the grace and two polls of the holder's death on the new master")
		}
		step(10 * time.Millisecond)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter's Lock: %v", err)
	}
	if w.Token() <= token {
		t.Fatalf("the waiter's token %d is not above the dead holder's %d", w.Token(), token)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatalf("%v", err)
	}
}

func TestPresenceFailoverKeepsTheLiveHold(t *testing.T) {
	redistest.NoLeaks(t)
	failoverKeepsTheLiveHold(t, lua.Default())
}

// A release lost in a failover (it reached the old master after the
// replica was promoted, or before the replica had it): the new master
// still has the hold, under the hold id the handle reuses for its next
// turn. That turn's Lock must not take it for a re-entry (before: it
// returned the old token and counted 2, its Unlock counted 1 back, and the
// watchdog kept the hold for good, every other Lock timing out); it ends
// that hold first, as a late release, and takes the lock with a new token,
// whose Unlock frees it. On owners with and without a presence.
func releaseLostInAFailover(t tb, scripts *lua.Scripts, mk func(*fairlock.Owner, string) (fairlock.MutexHandle, error)) {
	t.Helper()
	d := newSwapped(t)
	defer d.stop()
	ctx := context.Background()
	for _, present := range []bool{false, true} {
		var o *fairlock.Owner
		var err error
		if present {
			o, err = redistest.PresentOwner(d.client(), d.clk, scripts)
		} else {
			o = redistest.OwnerOn(d.client(), d.clk, scripts)
		}
		if err != nil {
			t.Fatalf("%v", err)
		}
		name := fmt.Sprintf("lost-release-%v", present)
		m, err := mk(o, name)
		if err != nil {
			t.Fatalf("%v", err)
		}
		other, err := mk(redistest.OwnerOn(d.client(), d.clk, scripts), name)
		if err != nil {
			t.Fatalf("%v", err)
		}
		d.master.Store(0)
		if err := m.Lock(ctx); err != nil {
			t.Fatalf("%v", err)
		}
		old := m.Token()
		d.replicate(t)                        // the replica has the hold...
		if err := m.Unlock(ctx); err != nil { // ...and not its release
			t.Fatalf("%v", err)
		}
		// The handle tries again before its client learns of the failover
		// (its answer must not make it forget the hold it released): the
		// old master has the lock free, until another takes it.
		blocker, err := mk(redistest.OwnerOn(d.client(), d.clk, scripts), name)
		if err != nil {
			t.Fatalf("%v", err)
		}
		if err := blocker.Lock(ctx); err != nil {
			t.Fatalf("%v", err)
		}
		if ok, err := m.TryLock(ctx, 0, 0); ok || err != nil {
			t.Fatalf("TryLock on the old master beside another's hold: %v, %v", ok, err)
		}
		// ...and, once the other let go, holds and releases again there:
		// its latest ended hold is not the one the new master has.
		if err := blocker.Unlock(ctx); err != nil {
			t.Fatalf("%v", err)
		}
		if err := m.Lock(ctx); err != nil {
			t.Fatalf("%v", err)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Fatalf("%v", err)
		}
		d.master.Store(1)
		if err := m.Lock(ctx); err != nil {
			t.Fatalf("%v", err)
		}
		if n, err := m.HoldCount(ctx); m.Token() <= old || n != 1 || err != nil {
			t.Fatalf("presence %v: Lock after the failover held token %d (count %d, %v); want a new hold, token above %d, count 1",
				present, m.Token(), n, err, old)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Fatalf("%v", err)
		}
		ok, err := other.TryLock(ctx, 0, 0)
		if err != nil || !ok {
			t.Fatalf("presence %v: the lock is not free after the Unlock: TryLock = %v, %v", present, ok, err)
		}
		if err := other.Unlock(ctx); err != nil {
			t.Fatalf("%v", err)
		}
		if present {
			if err := o.Close(ctx); err != nil {
				t.Fatalf("%v", err)
			}
		}
	}
}

func fairReleaseLostInAFailover(t tb, scripts *lua.Scripts) {
	releaseLostInAFailover(t, scripts, newFair)
}

func TestAReleaseLostInAFailoverIsNotTakenForAReentry(t *testing.T) {
	for _, k := range lockKinds {
		t.Run(k.name, func(t *testing.T) {
			redistest.NoLeaks(t)
			releaseLostInAFailover(t, lua.Default(), k.make)
		})
	}
}

// A hold granted by the old master after the promotion never reaches the
// new one, whose earlier state another handle of the same owner then takes
// the lock from: here the replica had a hold of m's, which m released and
// w then took on the old master; once the client moved, m's next Lock ends
// its own stale hold on the new master (fair_acquire.lua's step 1) and is
// granted the lock. w's hold is gone from Redis, and w must stop counting
// on it before m's Lock returns: Lost closed, its Unlock ErrLockLost.
// Before, w went on believing until its next renewal or its Unlock, and a
// worker pool through a SENTINEL FAILOVER saw two of its goroutines in the
// critical section at once (TestSentinelFailoverDoesNotStopAPool). On
// owners with and without a presence, for both locks.
func TestAHoldAFailoverLostEndsBeforeAnotherHandleOfItsOwnerTakesTheLock(t *testing.T) {
	for _, k := range lockKinds {
		for _, present := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/presence=%v", k.name, present), func(t *testing.T) {
				redistest.NoLeaks(t)
				lostHoldEndsFirst(t, k.make, present)
			})
		}
	}
}

func lostHoldEndsFirst(t *testing.T, mk func(*fairlock.Owner, string) (fairlock.MutexHandle, error), present bool) {
	d := newSwapped(t)
	defer d.stop()
	ctx := context.Background()
	o := redistest.OwnerOn(d.client(), d.clk, lua.Default())
	if present {
		var err error
		if o, err = redistest.PresentOwner(d.client(), d.clk, lua.Default()); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { _ = o.Close(ctx) }()
	m, err := mk(o, "lost-on-the-new-master")
	if err != nil {
		t.Fatal(err)
	}
	w, err := mk(o, "lost-on-the-new-master")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	d.replicate(t) // the replica has m's hold, and nothing after
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Lock(ctx); err != nil { // on the old master only
		t.Fatal(err)
	}
	lost := w.Lost()
	d.clk.Advance(core.PresencePoll) // the release's second look
	waitFor(t, "the second look", func() bool { return redistest.Background() == 0 })
	d.master.Store(1)
	if err := m.Lock(ctx); err != nil {
		t.Fatalf("m's Lock on the new master: %v", err)
	}
	select {
	case <-lost:
	default:
		t.Fatal("m holds the lock on the new master while w, of the same owner, still counts on the hold the old master granted it")
	}
	if err := w.Unlock(ctx); !errors.Is(err, fairlock.ErrLockLost) {
		t.Fatalf("w's Unlock = %v; want ErrLockLost", err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatalf("m's Unlock: %v", err)
	}
}

// After a failover the waiters' inbox subscriptions follow the master with
// the owner's presence (transport.Hubs.Follow): a hand-off published on the new
// master reaches its waiter as a message. Before, they stayed on the old
// master until Sentinel demoted it (about 10 s on a real group), every
// hand-off meanwhile was lost, and each waiter learned of its turn from its
// timers: the pool paused for 10 s after every failover. Here the waiter
// takes the lock with the fake clock standing still: no timer can have
// told it.
func TestAHandOffAfterAFailoverReachesItsWaiterAsAMessage(t *testing.T) {
	redistest.NoLeaks(t)
	d := newSwapped(t)
	defer d.stop()
	ctx := context.Background()
	ho, err := redistest.PresentOwner(d.client(), d.clk, lua.Default())
	if err != nil {
		t.Fatal(err)
	}
	wo, err := redistest.PresentOwner(d.client(), d.clk, lua.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = wo.Close(ctx)
		_ = ho.Close(ctx)
	}()
	h, _ := fair.New(ho, "failover-handoff")
	w, _ := fair.New(wo, "failover-handoff")
	if err := h.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- w.Lock(ctx) }()
	waitFor(t, "the waiter to sleep", func() bool { return redistest.Asleep() == 1 })
	d.swap(t)
	swapped := d.clk.Now()
	for moved := false; !moved; {
		if d.clk.Now().Sub(swapped) > 10*core.PresenceGrace {
			t.Fatalf("the waiter's inbox subscription is not on the new master %v after the failover", d.clk.Now().Sub(swapped))
		}
		d.clk.Advance(10 * time.Millisecond)
		// Settled: the hub's move (background) is over, and a follow's
		// confirming renewals, due at once, have run.
		waitFor(t, "the owners to settle", func() bool {
			if redistest.Background() != 0 || !redistest.PresenceConfirmed(ho) || !redistest.PresenceConfirmed(wo) {
				d.clk.Advance(0)
				return false
			}
			return true
		})
		moved = len(d.inboxes(1)) > 0
	}
	waitFor(t, "the waiter to sleep", func() bool { return redistest.Asleep() == 1 && redistest.Unread() == 0 })
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiter's Lock: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not hear of its hand-off: the message went where its subscription is not")
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A waiter that learned of its hand-off from its fallback looks whether
// the message was only late (waiting.Loop.Delivered, up to MaxPause) before
// its Lock returns. That look ends with the caller's ctx: here the waiter's
// inbox stayed on the old master (its owner keeps no presence, so nothing
// moves it), the look can never end by itself, and the ctx is cancelled
// while it runs. Before, Lock returned a second (MaxPause) later: a newcomer
// saw 10 s deadlines return nil 0.07-0.89 s after they passed.
func TestALookForALostMessageEndsWithTheCallersContext(t *testing.T) {
	redistest.NoLeaks(t)
	d := newSwapped(t)
	defer d.stop()
	ctx := context.Background()
	h, _ := fair.New(redistest.OwnerOn(d.client(), d.clk, lua.Default()), "lost-message")
	w, _ := fair.New(redistest.OwnerOn(d.client(), d.clk, lua.Default()), "lost-message")
	if err := h.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- w.Lock(wctx) }()
	waitFor(t, "the waiter to sleep", func() bool { return redistest.Asleep() == 1 })

	// The look publishes a marker where commands go now, the new master.
	watch := d.direct[1].PSubscribe(ctx, "fairlock:*")
	defer watch.Close()
	if _, err := watch.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	looking := make(chan struct{})
	go func() {
		for m := range watch.Channel() {
			if strings.HasPrefix(m.Payload, transport.FlushMarker) {
				close(looking)
				return
			}
		}
	}()
	d.swap(t)
	if err := h.Unlock(ctx); err != nil { // its hand-off message reaches nobody
		t.Fatal(err)
	}
	for !isClosed(looking) {
		if len(got) > 0 {
			t.Fatalf("the waiter's Lock returned (%v) before it looked for its message", <-got)
		}
		if d.clk.Now().Sub(redistest.Epoch) > time.Hour {
			t.Fatal("the waiter never learned of its hand-off")
		}
		// Timers run within Advance, and the look may begin in one: its own
		// goroutine, so that the look can be seen running.
		advanced := make(chan struct{})
		go func() {
			defer close(advanced)
			d.clk.Advance(100 * time.Millisecond)
		}()
		waitFor(t, "the waiter to sleep or look", func() bool {
			return isClosed(advanced) && redistest.Asleep() == 1 || isClosed(looking) || len(got) > 0
		})
	}
	cancel()
	cancelled := time.Now()
	var err error
	select {
	case err = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter's Lock did not return")
	}
	took := time.Since(cancelled)
	t.Logf("Lock returned %v after its ctx was cancelled: %v", took, err)
	if took >= waitloop.MaxPause/2 {
		t.Fatalf("Lock returned %v after its ctx ended; want at once, not after the look's own bound (%v)", took, waitloop.MaxPause)
	}
	if err == nil {
		if n, herr := w.HoldCount(ctx); n != 1 || herr != nil {
			t.Fatalf("Lock returned nil, and the waiter's hold count is %d (%v)", n, herr)
		}
		_ = w.Unlock(ctx)
	} else if !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock = %v; want the grant, or an error wrapping context.Canceled", err)
	}
}

// Exits a failover undid are sent again. The replica had a hold and a queue
// entry whose release and leave reached only the old master: the hold of a
// handle that did not lock again, and the entry of a waiter that had taken
// the lock by it, released it, and queued again under a new entry. Their
// owner lives and keeps a presence, so no waiter passes either over: before,
// the lock stayed with the old hold until its lease ran out (30 s), and the
// old entry, once handed the lock, kept it until its wait timeout (10 s): a
// pool of goroutines on one owner paused 9-10 s after each SENTINEL
// FAILOVER. Now the owner, when Redis answers that a hold it counted on is
// gone (here: the Unlock on the new master), checks at once where its
// presence subscription is, follows the master, and sends its recent
// releases and leaves again (core's replay.go): the lock moves on, and the
// waiter behind hears of it at once (its hub followed too). An owner made
// WithoutPresence replays nothing: there the undone hold lasts its lease.
func TestExitsAFailoverUndidAreSentAgain(t *testing.T) {
	redistest.NoLeaks(t)
	exitsAFailoverUndidAreSentAgain(t, lua.Default(), true)
}

func exitsAFailoverUndidAreSentAgain(t tb, scripts *lua.Scripts, present bool) {
	t.Helper()
	d := newSwapped(t)
	defer d.stop()
	ctx := context.Background()
	var o *fairlock.Owner
	if present {
		var err error
		if o, err = redistest.PresentOwner(d.client(), d.clk, scripts); err != nil {
			t.Fatalf("%v", err)
		}
		defer func() { _ = o.Close(ctx) }()
	} else {
		o = redistest.OwnerOn(d.client(), d.clk, scripts)
	}
	h, _ := fair.New(o, "undone-exits")
	w, _ := fair.New(o, "undone-exits")
	other, _ := fair.New(o, "undone-exits")
	if err := h.Lock(ctx); err != nil {
		t.Fatalf("%v", err)
	}
	got := make(chan error, 1)
	go func() { got <- w.Lock(ctx) }()
	waitFor(t, "the waiter to sleep", func() bool { return redistest.Asleep() == 1 })
	d.replicate(t) // the replica has h's hold and w's entry, and nothing after
	if err := h.Unlock(ctx); err != nil {
		t.Fatalf("%v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("%v", err)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatalf("%v", err)
	}
	if err := h.Lock(ctx); err != nil {
		t.Fatalf("%v", err)
	}
	go func() { got <- w.Lock(ctx) }() // queued again, under a new entry
	waitFor(t, "the waiter to sleep", func() bool { return redistest.Asleep() == 1 })
	d.clk.Advance(core.PresencePoll) // the releases' second looks
	waitFor(t, "the second looks", func() bool { return redistest.Background() == 0 })
	d.master.Store(1) // the promoted replica has what replicate copied
	swapped := d.clk.Now()
	if err := h.Unlock(ctx); !errors.Is(err, fairlock.ErrLockLost) {
		t.Fatalf("Unlock on the new master = %v; want ErrLockLost (the hold it has there is an earlier one)", err)
	}
	took := make(chan error, 1)
	go func() { took <- other.Lock(ctx) }()
	bound := 4 * core.PresenceGrace
	if !present {
		bound = fairlock.DefaultWaitTimeout / 2 // the heartbeat's, well below the wait timeout and the lease
	}
	for len(got)+len(took) == 0 {
		if d.clk.Now().Sub(swapped) > bound {
			t.Fatalf("the lock did not move on within %v of the failover: the undone release and leave stand", d.clk.Now().Sub(swapped))
		}
		d.clk.Advance(10 * time.Millisecond)
		waitFor(t, "the owner to settle", func() bool {
			if redistest.Background() != 0 || !redistest.PresenceConfirmed(o) {
				d.clk.Advance(0)
				return false
			}
			return len(got)+len(took) > 0 || redistest.Asleep() == 2 && redistest.Unread() == 0
		})
	}
	// Whoever took it first releases it; the other takes it then (the
	// message of its turn may have gone to the old master: its heartbeat
	// tells it, within a third of its wait timeout).
	first, second := w, other
	firstDone, secondDone := got, took
	if len(took) == 1 {
		first, second, firstDone, secondDone = other, w, took, got
	}
	if err := <-firstDone; err != nil {
		t.Fatalf("%v", err)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatalf("%v", err)
	}
	released := d.clk.Now()
	for len(secondDone) == 0 {
		if d.clk.Now().Sub(released) > fairlock.DefaultWaitTimeout/2 {
			t.Fatalf("the second waiter did not take the lock after the first released it")
		}
		d.clk.Advance(10 * time.Millisecond)
		waitFor(t, "the waiter to sleep or hold", func() bool {
			return len(secondDone) > 0 || redistest.Asleep() == 1 && redistest.Background() == 0
		})
	}
	if err := <-secondDone; err != nil {
		t.Fatalf("%v", err)
	}
	if err := second.Unlock(ctx); err != nil {
		t.Fatalf("%v", err)
	}
}

// A queue entry the new master handed the lock to, though its waiter had
// left it on the old master, is given back when the owner replays its
// exits. The replica had the waiter's entry and a holder's hold with a
// fixed lease of a second; on the old master the waiter then took the lock
// and released it, and went idle. On the new master the hold runs out and
// the next acquisition hands the lock to that entry: its owner lives, so
// nobody passes it over. The replayed leave of the entry gives the grant
// back (fair_leave.lua), and the lock goes to the live waiter behind;
// before, it waited for the entry's wait timeout.
func TestAStaleEntryHandedTheLockAfterAFailoverGivesItBack(t *testing.T) {
	redistest.NoLeaks(t)
	staleEntryGivesItBack(t, lua.Default())
}

func staleEntryGivesItBack(t tb, scripts *lua.Scripts) {
	t.Helper()
	d := newSwapped(t)
	defer d.stop()
	ctx := context.Background()
	o, err := redistest.PresentOwner(d.client(), d.clk, scripts)
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer func() { _ = o.Close(ctx) }()
	h, _ := fair.New(o, "stale-entry")
	w, _ := fair.New(o, "stale-entry")
	other, _ := fair.New(o, "stale-entry")
	if ok, err := h.TryLock(ctx, 0, time.Second); !ok || err != nil {
		t.Fatalf("TryLock: %v, %v", ok, err)
	}
	got := make(chan error, 1)
	go func() { got <- w.Lock(ctx) }()
	waitFor(t, "the waiter to sleep", func() bool { return redistest.Asleep() == 1 })
	d.replicate(t) // the replica has h's hold and w's entry
	if err := h.Unlock(ctx); err != nil {
		t.Fatalf("%v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("%v", err)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatalf("%v", err)
	}
	d.clk.Advance(core.PresencePoll) // the releases' second looks
	waitFor(t, "the second looks", func() bool { return redistest.Background() == 0 })
	d.master.Store(1)
	d.clk.Advance(time.Second) // h's hold runs out on the new master
	swapped := d.clk.Now()
	took := make(chan error, 1)
	go func() { took <- other.Lock(ctx) }() // hands the lock to w's old entry, and queues
	for len(took) == 0 {
		if d.clk.Now().Sub(swapped) > 4*core.PresenceGrace {
			t.Fatalf("the live waiter did not take the lock within %v: the grant to the entry its waiter left stands", d.clk.Now().Sub(swapped))
		}
		d.clk.Advance(10 * time.Millisecond)
		waitFor(t, "the owner to settle", func() bool {
			if redistest.Background() != 0 || !redistest.PresenceConfirmed(o) {
				d.clk.Advance(0)
				return false
			}
			return len(took) > 0 || redistest.Asleep() == 1 && redistest.Unread() == 0
		})
	}
	if err := <-took; err != nil {
		t.Fatalf("%v", err)
	}
	if err := other.Unlock(ctx); err != nil {
		t.Fatalf("%v", err)
	}
}

// blockNext holds the next command sent once armed until release is
// closed: a release in flight.
type blockNext struct {
	armed   atomic.Bool
	sent    chan struct{}
	release chan struct{}
}

func (b *blockNext) DialHook(next redis.DialHook) redis.DialHook { return next }

func (b *blockNext) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if b.armed.CompareAndSwap(true, false) {
			close(b.sent)
			<-b.release
		}
		return next(ctx, cmd)
	}
}

func (b *blockNext) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// An Unlock whose hold is given up for lost while its release runs
// returns ErrLockLost, as Lost said, though Redis still had the hold for
// the release to end. A newcomer saw Unlock return nil after Lost had
// closed, in a forced failover (the presence could not confirm the hold
// while the release waited on the hung old master). Here the hold's fixed
// lease runs out as the client counts it (a safety margin before Redis's)
// while the release is held back.
func TestAnUnlockOfAHoldLostMeanwhileSaysLost(t *testing.T) {
	redistest.NoLeaks(t)
	mr, clk := fakeServer(t)
	defer mr.Close()
	b := &blockNext{sent: make(chan struct{}), release: make(chan struct{})}
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer func() { _ = c.Close() }()
	c.AddHook(b)
	m, err := fair.New(redistest.OwnerOn(c, clk, lua.Default()), "lost-meanwhile")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if ok, err := m.TryLock(ctx, 0, time.Second); !ok || err != nil {
		t.Fatalf("TryLock: %v, %v", ok, err)
	}
	b.armed.Store(true)
	done := make(chan error, 1)
	go func() { done <- m.Unlock(ctx) }()
	<-b.sent
	clk.Advance(990 * time.Millisecond) // past the client's count of the lease, not Redis's
	waitFor(t, "the hold to be given up for lost", func() bool { return isClosed(m.Lost()) })
	close(b.release)
	if err := <-done; !errors.Is(err, fairlock.ErrLockLost) {
		t.Fatalf("Unlock of a hold given up for lost while its release ran = %v; want ErrLockLost, as Lost said", err)
	}
	if locked, err := m.IsLocked(ctx); locked || err != nil {
		t.Fatalf("after the Unlock the lock is held (%v, %v): the release must still end the hold Redis had", locked, err)
	}
}
