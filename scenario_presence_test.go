package fairlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// presenceScripts plays the scripts of one fair lock as its clients would,
// call by call, under a fake clock, with presence subscriptions that a
// scenario opens and closes itself: what the specifications' processes do
// too, without the timing of their Go side.
type presenceScripts struct {
	t       tb
	scripts *lua.Scripts
	c       *redis.Client
	base    string
	subs    map[string]*redis.PubSub // client id -> its presence subscription
	n       int
}

// newPresenceScripts starts a miniredis under a fake clock (fakeServer)
// and plays the lock or semaphore at base on it; stop closes everything.
func newPresenceScripts(t tb, scripts *lua.Scripts, base string) (ps *presenceScripts, clk *clock.Fake, stop func()) {
	mr, clk := fakeServer(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	ps = &presenceScripts{t: t, scripts: scripts, c: c, base: base, subs: map[string]*redis.PubSub{}}
	return ps, clk, func() {
		for _, sub := range ps.subs {
			_ = sub.Close()
		}
		_ = c.Close()
		mr.Close()
	}
}

// present subscribes client's presence channel, as an owner made
// WithPresence does, and waits for the server to count it.
func (ps *presenceScripts) present(client string) {
	ps.t.Helper()
	sub := ps.c.Subscribe(context.Background(), transport.PresenceChannel(client))
	if _, err := sub.Receive(context.Background()); err != nil {
		ps.t.Fatalf("subscribing %s's presence: %v", client, err)
	}
	ps.subs[client] = sub
}

// gone closes client's presence subscription and waits until the server
// has dropped it, as when the client's connection breaks.
func (ps *presenceScripts) gone(client string) {
	ps.t.Helper()
	_ = ps.subs[client].Close()
	delete(ps.subs, client)
	presenceDropped(ps.t, ps.c, transport.PresenceChannel(client))
}

// acquire runs one attempt of fair_acquire.lua for owner's entry.
func (ps *presenceScripts) acquire(owner, entry, mode string) transport.FairAcquireReply {
	ps.t.Helper()
	return ps.acquireOn(ps.base, transport.FairAcquire{Owner: owner, Entry: entry, Mode: mode})
}

// acquireOn runs one attempt of fair_acquire.lua on the fair queue at base
// (a lock, or a semaphore's gate), a's request id, lease, wait timeout,
// origin and channel filled in.
func (ps *presenceScripts) acquireOn(base string, a transport.FairAcquire) transport.FairAcquireReply {
	ps.t.Helper()
	ps.n++
	a.Request, a.Lease, a.Wait = fmt.Sprintf("%s#%d", a.Owner, ps.n), int64(30000), int64(10000)
	a.Origin, a.Publish, a.Channel = transport.EscapeJSON(transport.EncodeOrigin("host", 1, "")), "PUBLISH", transport.Channel(base)
	v, err := ps.scripts.FairAcquire.Run(context.Background(), ps.c, nil, transport.QueueKeys(base), a.Args()...).Result()
	if err != nil {
		ps.t.Fatalf("%s's attempt: %v", a.Owner, err)
	}
	r, err := transport.DecodeFairAcquire(v)
	if err != nil {
		ps.t.Fatalf("%s's attempt: %v", a.Owner, err)
	}
	return r
}

// release runs owner's final release of its hold with token, and returns
// what it answered: transport.Released, or transport.ReleasedWatch.
func (ps *presenceScripts) release(owner string, token int64) int {
	ps.t.Helper()
	return ps.releaseOn(ps.base, owner, token)
}

// releaseOn is release on the fair queue at base (a lock, or a semaphore's
// gate).
func (ps *presenceScripts) releaseOn(base, owner string, token int64) int {
	ps.t.Helper()
	ps.n++
	v, err := ps.scripts.FairRelease.Run(context.Background(), ps.c, nil, transport.QueueKeys(base), transport.Release{
		Owner: owner, Request: fmt.Sprintf("%s#%d", owner, ps.n), Token: token, Publish: "PUBLISH", Channel: transport.Channel(base),
	}.Args()...).Result()
	if err != nil {
		ps.t.Fatalf("%s's release: %v", owner, err)
	}
	r, err := transport.DecodeRelease(v)
	if err != nil || (r != transport.Released && r != transport.ReleasedWatch) {
		ps.t.Fatalf("%s's release: %v, %v; want released", owner, r, err)
	}
	return r
}

// holder is the lock's holder as Inspect shows it ("" when free).
func (ps *presenceScripts) holder(name string) string {
	ps.t.Helper()
	st, err := fair.Inspect(context.Background(), ps.c, name)
	if err != nil {
		ps.t.Fatalf("Inspect: %v", err)
	}
	if st.Holder == nil {
		return ""
	}
	return st.Holder.Owner
}

// staleAbsenceIsForgotten: what waiters saw of a holder's absence ends with
// its hold. Holder A, which keeps a presence, drops it while B waits (B's
// look records when it first found A gone); A comes back and hands the lock
// to B before anyone looks again. Two graces later B, which keeps a
// presence too, drops its own, and C's look must count B's absence from
// that look, not from what was seen of A: B keeps the lock through a blip
// shorter than the grace, and loses it only once the grace has passed.
func staleAbsenceIsForgotten(t tb, scripts *lua.Scripts) {
	t.Helper()
	const name = "stale-absence"
	ps, clk, stop := newPresenceScripts(t, scripts, transport.FairBase(name))
	defer stop()
	a := "AbsentHolderAbsentHolde" + transport.PresenceMark
	b := "BlippingGranteeBlipping" + transport.PresenceMark
	const cw = "PlainWaiterPlainWaiterP" // keeps no presence
	ps.present(a)
	ps.present(b)

	held := ps.acquire(a+".1", a+".1/1", transport.ModeJoin)
	if !held.Held {
		t.Fatalf("A's Lock: %+v, want held", held)
	}
	if r := ps.acquire(b+".1", b+".1/1", transport.ModeJoin); r.Held || !r.Head {
		t.Fatalf("B's join: %+v, want queued as head", r)
	}
	if r := ps.acquire(cw+".1", cw+".1/1", transport.ModeJoin); r.Held || r.Head {
		t.Fatalf("C's join: %+v, want queued behind B", r)
	}
	ps.gone(a)
	if r := ps.acquire(b+".1", b+".1/1", transport.ModeQueued); r.Held || r.HoldMs != core.PresenceGrace.Milliseconds() {
		t.Fatalf("B's look at A's absence: %+v; want the grace to start", r)
	}
	ps.present(a) // back within the grace, and it hands the lock on
	ps.release(a+".1", held.Token)
	if got := ps.holder(name); got != b+".1" {
		t.Fatalf("holder after A's release: %q, want B", got)
	}

	clk.Advance(2 * core.PresenceGrace)
	ps.gone(b)
	if r := ps.acquire(cw+".1", cw+".1/1", transport.ModeQueued); r.Held {
		t.Fatalf("C took the lock at its first look at B's absence: A's absence, seen before the hand-off, was counted for B")
	}
	if got := ps.holder(name); got != b+".1" {
		t.Fatalf("holder after C's first look at B's absence: %q, want B still (the grace starts now)", got)
	}
	clk.Advance(core.PresenceGrace)
	if r := ps.acquire(cw+".1", cw+".1/1", transport.ModeQueued); !r.Held {
		t.Fatalf("C's look a grace after B's presence went: %+v; want the lock", r)
	}
}

func TestStaleAbsenceIsForgotten(t *testing.T) {
	staleAbsenceIsForgotten(t, lua.Default())
}

// absenceSeenBackIsForgotten: a head that sees the holder's presence back
// forgets the absence it saw. Holder A, which keeps a presence, drops it
// (B's look records when it first found A gone), comes back (B's next look
// sees it), and two graces later drops it again: B's look must count this
// absence from now, not from the first: A keeps the lock through a blip
// shorter than the grace, and loses it only once the grace has passed.
func absenceSeenBackIsForgotten(t tb, scripts *lua.Scripts) {
	t.Helper()
	const name = "absence-seen-back"
	ps, clk, stop := newPresenceScripts(t, scripts, transport.FairBase(name))
	defer stop()
	a := "BlippingHolderBlippingH" + transport.PresenceMark
	const bw = "PlainWaiterPlainWaiterP" // keeps no presence
	ps.present(a)
	if r := ps.acquire(a+".1", a+".1/1", transport.ModeJoin); !r.Held {
		t.Fatalf("A's Lock: %+v, want held", r)
	}
	if r := ps.acquire(bw+".1", bw+".1/1", transport.ModeJoin); r.Held || !r.Head {
		t.Fatalf("B's join: %+v, want queued as head", r)
	}
	ps.gone(a)
	if r := ps.acquire(bw+".1", bw+".1/1", transport.ModeQueued); r.Held || r.HoldMs != core.PresenceGrace.Milliseconds() {
		t.Fatalf("B's look at A's absence: %+v; want the grace to start", r)
	}
	ps.present(a)
	if r := ps.acquire(bw+".1", bw+".1/1", transport.ModeQueued); r.Held || r.HoldMs != core.PresencePoll.Milliseconds() {
		t.Fatalf("B's look at A back: %+v; want the poll", r)
	}

	clk.Advance(2 * core.PresenceGrace)
	ps.gone(a)
	if r := ps.acquire(bw+".1", bw+".1/1", transport.ModeQueued); r.Held {
		t.Fatalf("B took the lock at its first look at A's second absence: the first, seen before A came back, was counted")
	}
	clk.Advance(core.PresenceGrace)
	if r := ps.acquire(bw+".1", bw+".1/1", transport.ModeQueued); !r.Held {
		t.Fatalf("B's look a grace after A's presence went: %+v; want the lock", r)
	}
}

func TestAbsenceSeenBackIsForgotten(t *testing.T) {
	absenceSeenBackIsForgotten(t, lua.Default())
}

// semAcquire runs one attempt of sem_acquire.lua on the semaphore at base.
func (ps *presenceScripts) semAcquire(a transport.SemAcquire) transport.SemAcquireReply {
	ps.t.Helper()
	keys := append([]string{ps.base}, transport.QueueKeys(transport.GateBase(ps.base))...)
	a.Lease, a.Permits, a.Origin, a.Publish, a.Channel = 30000, 2, transport.EncodeOrigin("host", 1, ""), "PUBLISH", transport.Channel(transport.GateBase(ps.base))
	v, err := ps.scripts.SemAcquire.Run(context.Background(), ps.c, nil, keys, a.Args()...).Result()
	if err != nil {
		ps.t.Fatalf("%s's attempt: %v", a.Owner, err)
	}
	r, err := transport.DecodeSemAcquire(v)
	if err != nil {
		ps.t.Fatalf("%s's attempt: %v", a.Owner, err)
	}
	return r
}

// permitHolder is the client id of a scenario's permit holder that keeps a
// presence.
const permitHolder = "PermitHolderPermitHolde" + transport.PresenceMark

// semTry is client's first TryAcquire of n permits, which must hold them.
func (ps *presenceScripts) semTry(client string, n int) transport.SemAcquireReply {
	ps.t.Helper()
	r := ps.semAcquire(transport.SemAcquire{Owner: client + ".1#1", N: n, Mode: transport.SemTry})
	if !r.Held {
		ps.t.Fatalf("%s's TryAcquire of %d permits: %+v, want held", client, n, r)
	}
	return r
}

// gateLook is one attempt of client, holding the gate with gateToken, to
// take one permit (its permit hold "<client>.1#2").
func (ps *presenceScripts) gateLook(client string, gateToken int64) transport.SemAcquireReply {
	ps.t.Helper()
	return ps.semAcquire(transport.SemAcquire{Owner: client + ".1#2", N: 1, Mode: transport.SemGate, GateOwner: client + ".1", GateToken: gateToken})
}

// staleAbsenceOfAPermitHolderIsForgotten: the semaphore's first waiter
// forgets a permit holder's absence once it sees the holder back. P, which
// keeps a presence, holds both permits; W holds the gate and looks. P drops
// its presence (W's look records when it first found P gone) and comes
// back (W's next look sees it). Two graces later P drops it again: W's look
// must count this absence from now, not from the first: P keeps its
// permits through a blip shorter than the grace, and loses them only once
// the grace has passed.
func staleAbsenceOfAPermitHolderIsForgotten(t tb, scripts *lua.Scripts) {
	t.Helper()
	ps, clk, stop := newPresenceScripts(t, scripts, transport.SemaphoreBase("stale-permits"))
	defer stop()
	p := permitHolder
	const wc = "PlainWaiterPlainWaiterP" // keeps no presence
	ps.present(p)
	ps.semTry(p, 2)
	// W queues on the gate, which is free: it holds the gate, and waits
	// there for a permit.
	g := ps.acquireOn(transport.GateBase(ps.base), transport.FairAcquire{Owner: wc + ".1", Entry: wc + ".1/1", Mode: transport.ModeJoin,
		Permit: transport.PermitRequest{Owner: wc + ".1#2", N: 1, Lease: 30000}})
	if !g.Held {
		t.Fatalf("W's gate: %+v; want held", g)
	}
	look := func() transport.SemAcquireReply { return ps.gateLook(wc, g.Token) }
	if r := look(); r.Held {
		t.Fatalf("W took a permit from a present holder: %+v", r)
	}
	ps.gone(p)
	if r := look(); r.Held || r.Next-r.Now != core.PresenceGrace.Milliseconds() {
		t.Fatalf("W's look at P's absence: %+v; want the grace to start", r)
	}
	ps.present(p)
	if r := look(); r.Held || r.Next-r.Now != core.PresencePoll.Milliseconds() {
		t.Fatalf("W's look at P back: %+v; want the poll", r)
	}

	clk.Advance(2 * core.PresenceGrace)
	ps.gone(p)
	if r := look(); r.Held {
		t.Fatalf("W took a permit at its first look at P's second absence: the first, seen before P came back, was counted")
	}
	clk.Advance(core.PresenceGrace)
	if r := look(); !r.Held {
		t.Fatalf("W's look a grace after P's presence went: %+v; want a permit", r)
	}
}

func TestStaleAbsenceOfAPermitHolderIsForgotten(t *testing.T) {
	staleAbsenceOfAPermitHolderIsForgotten(t, lua.Default())
}

// permitHolderAbsenceOutlivesAGrant: a grant of permits to one waiter
// keeps what was seen of another permit holder's absence (fence.lua keeps a
// semaphore's table of them across a new token). On a semaphore of 2, P,
// which keeps a presence, and R, which keeps none, hold a permit each; W
// holds the gate and X waits behind it, one permit each. P's presence goes
// and W's look records it; a poll later R releases, which serves W (a new
// token), and W gives the gate on to X. X's look a grace after P's presence
// went must end P's permit and take it: the absence counts from W's look,
// not from X's first.
func permitHolderAbsenceOutlivesAGrant(t tb, scripts *lua.Scripts) {
	t.Helper()
	ps, clk, stop := newPresenceScripts(t, scripts, transport.SemaphoreBase("absence-outlives-a-grant"))
	defer stop()
	p := permitHolder
	const x = "SecondWaiterSecondWaite" // keeps no presence
	ps.present(p)
	ps.semTry(p, 1)
	rp := ps.semTry(plainHolder, 1)
	wg := ps.gateQueue(plainWaiter, 1, transport.ModeJoin)
	if !wg.Held {
		t.Fatalf("W's gate: %+v; want held (the first waiter)", wg)
	}
	if r := ps.gateQueue(x, 1, transport.ModeJoin); r.Held || !r.Head {
		t.Fatalf("X's join: %+v; want queued as the gate's head", r)
	}
	ps.gone(p)
	if r := ps.gateLook(plainWaiter, wg.Token); r.Held || r.Next-r.Now != core.PresenceGrace.Milliseconds() {
		t.Fatalf("W's look at P's absence: %+v; want the grace to start", r)
	}
	clk.Advance(core.PresencePoll)
	ps.semRelease(plainHolder+".1#1", rp.Token)
	if r := ps.gateLook(plainWaiter, wg.Token); !r.Held {
		t.Fatalf("W's look after R's release: %+v; want the permit R's release served it", r)
	}
	ps.releaseOn(transport.GateBase(ps.base), plainWaiter+".1", wg.Token)
	xg := ps.gateQueue(x, 1, transport.ModeQueued)
	if !xg.Held {
		t.Fatalf("X's look after W gave the gate on: %+v; want the gate", xg)
	}
	if r := ps.gateLook(x, xg.Token); r.Held {
		t.Fatalf("X took P's permit a poll after P's presence went: %+v", r)
	}
	clk.Advance(core.PresenceGrace - core.PresencePoll)
	if r := ps.gateLook(x, xg.Token); !r.Held {
		t.Fatalf("X's look a grace after P's presence went: %+v; want P's permit "+
			"(what W's look saw of P's absence was lost with the grant to W)", r)
	}
}

func TestPermitHolderAbsenceOutlivesAGrant(t *testing.T) {
	permitHolderAbsenceOutlivesAGrant(t, lua.Default())
}

// reentrantAcquire runs one attempt of reentrant_acquire.lua by client's
// first handle; waiter names its waiter id ("" for a try that never waits).
func (ps *presenceScripts) reentrantAcquire(client, waiter string) transport.ReentrantAcquireReply {
	ps.t.Helper()
	ps.n++
	v, err := ps.scripts.ReentrantAcquire.Run(context.Background(), ps.c, nil, transport.QueueKeys(ps.base), transport.ReentrantAcquire{
		Owner: client + ".1", Request: fmt.Sprintf("%s.1#%d", client, ps.n), Lease: 30000, Waiter: waiter, Wait: 10000,
	}.Args()...).Result()
	if err != nil {
		ps.t.Fatalf("%s's attempt: %v", client, err)
	}
	r, err := transport.DecodeReentrantAcquire(v)
	if err != nil {
		ps.t.Fatalf("%s's attempt: %v", client, err)
	}
	return r
}

// reentrantDeadHolderEndedAfterTheGrace: a reentrant lock's holder H keeps
// a presence; W waits, and, the longest-waiting live waiter, is told to look
// within the poll (a waiter behind it, X, at the hold's expiry). H is never
// ended while its presence is there, however long W looks; once it is gone,
// W's look records it (told to look at the grace's end), a look just before
// the grace's end finds H still holding, and the one at its end takes the
// lock, with a greater token: H's process died.
func reentrantDeadHolderEndedAfterTheGrace(t tb, scripts *lua.Scripts) {
	t.Helper()
	ps, clk, stop := newPresenceScripts(t, scripts, transport.ReentrantKey("dead-holder"))
	defer stop()
	ps.present(deadHolder)
	h := ps.reentrantAcquire(deadHolder, "")
	if !h.Held {
		t.Fatalf("H's Lock: %+v, want held", h)
	}
	if r := ps.reentrantAcquire(plainWaiter, "w1"); r.Held || r.HoldMs != core.PresencePoll.Milliseconds() {
		t.Fatalf("W's first attempt: %+v; want told to look within the poll (%v)", r, core.PresencePoll)
	}
	if r := ps.reentrantAcquire(deadWaiter(0), "x1"); r.Held || r.HoldMs <= core.PresencePoll.Milliseconds() {
		t.Fatalf("X's attempt, behind W: %+v; want told the hold's expiry, not to poll", r)
	}
	for range 10 {
		clk.Advance(time.Second)
		if r := ps.reentrantAcquire(plainWaiter, "w1"); r.Held {
			t.Fatalf("W took the lock from H, whose presence is there: %+v", r)
		}
	}
	ps.gone(deadHolder)
	if r := ps.reentrantAcquire(plainWaiter, "w1"); r.Held || r.HoldMs != core.PresenceGrace.Milliseconds() {
		t.Fatalf("W's look at H's absence: %+v; want the grace to start", r)
	}
	clk.Advance(core.PresenceGrace - time.Millisecond)
	if r := ps.reentrantAcquire(plainWaiter, "w1"); r.Held {
		t.Fatalf("W took the lock %v after H's presence went, before the grace (%v)", core.PresenceGrace-time.Millisecond, core.PresenceGrace)
	}
	clk.Advance(time.Millisecond)
	r := ps.reentrantAcquire(plainWaiter, "w1")
	if !r.Held || r.Token <= h.Token {
		t.Fatalf("W's look a grace after H's presence went: %+v; want the lock, with a token above H's %d", r, h.Token)
	}
}

func TestReentrantDeadHolderEndedAfterTheGrace(t *testing.T) {
	reentrantDeadHolderEndedAfterTheGrace(t, lua.Default())
}
