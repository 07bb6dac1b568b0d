package fairlock_test

// Dead waiters passed over (docs/presence.md), played on the scripts: a
// queued entry whose client's presence has been gone for the grace is
// passed over, and the first waiter behind a head whose client is gone is
// told to look at the grace's end.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// Clients of the scenarios below: those with the mark keep a presence.
const (
	plainHolder = "PlainHolderPlainHolderP"
	plainWaiter = "PlainWaiterPlainWaiterP"
	deadHolder  = "DeadHolderDeadHolderDea" + transport.PresenceMark
)

// deadWaiter is the client id of the i-th dead waiter of a scenario.
func deadWaiter(i int) string {
	return "DeadWaiterDeadWaiter" + strconv.Itoa(i) + transport.PresenceMark
}

// join queues client's first entry, and reports the reply.
func (ps *presenceScripts) join(client string) transport.FairAcquireReply {
	ps.t.Helper()
	return ps.acquire(client+".1", client+".1/1", transport.ModeJoin)
}

// look is one more attempt of client's first entry, already queued.
func (ps *presenceScripts) look(client string) transport.FairAcquireReply {
	ps.t.Helper()
	return ps.acquire(client+".1", client+".1/1", transport.ModeQueued)
}

// heartbeat runs fair_heartbeat.lua for client's first entry.
func (ps *presenceScripts) heartbeat(client string) transport.HeartbeatReply {
	ps.t.Helper()
	v, err := ps.scripts.FairHeartbeat.Run(context.Background(), ps.c, nil, transport.QueueKeys(ps.base),
		transport.Heartbeat("PUBLISH", transport.Channel(ps.base), []string{client + ".1/1"}, []int64{10000})...).Result()
	if err != nil {
		ps.t.Fatalf("%s's heartbeat: %v", client, err)
	}
	r, err := transport.DecodeHeartbeat(v, 1)
	if err != nil {
		ps.t.Fatalf("%s's heartbeat: %v", client, err)
	}
	return r
}

// inbox subscribes to client's inbox of the fair queue at base (the lock,
// or a semaphore's gate); the caller closes it.
func (ps *presenceScripts) inbox(base, client string) *redis.PubSub {
	ps.t.Helper()
	sub := ps.c.Subscribe(context.Background(), transport.Inbox(transport.Channel(base), client))
	if _, err := sub.Receive(context.Background()); err != nil {
		ps.t.Fatalf("subscribing %s's inbox: %v", client, err)
	}
	return sub
}

// headNotice reads the head notice to client's first entry from its inbox
// (sub), and returns its expiry (Redis ms); 0 if none came within a second.
func headNotice(t tb, sub *redis.PubSub, client string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for {
		msg, err := sub.ReceiveMessage(ctx)
		if err != nil {
			return 0
		}
		for _, note := range strings.Split(msg.Payload, transport.NoteSeparator) {
			if n, mine := transport.ParseNote(note, client+".1/1"); mine {
				if h, ok := n.(transport.HeadNotice); ok {
					return h.Expiry
				}
			}
		}
	}
}

// deadHolderAndHead: H and the first waiter, both keeping a presence, hold
// the lock and queue for it.
func (ps *presenceScripts) deadHolderAndHead() {
	ps.t.Helper()
	ps.present(deadHolder)
	ps.present(deadWaiter(0))
	if r := ps.join(deadHolder); !r.Held {
		ps.t.Fatalf("H's Lock: %+v, want held", r)
	}
	if r := ps.join(deadWaiter(0)); r.Held || !r.Head {
		ps.t.Fatalf("the first waiter's join: %+v, want queued as head", r)
	}
}

// holdsAGraceLater lets the grace pass, and W's look must hold the lock.
func (ps *presenceScripts) holdsAGraceLater(clk *clock.Fake, after string) {
	ps.t.Helper()
	clk.Advance(core.PresenceGrace)
	if r := ps.look(plainWaiter); !r.Held {
		ps.t.Fatalf("W's look a grace after %s: %+v; want the lock", after, r)
	}
}

// queueBehindTheDead: H (no presence) holds; three waiters that keep a
// presence queue, then a waiter that keeps none, W; the three die.
func queueBehindTheDead(t tb, ps *presenceScripts) (token int64) {
	t.Helper()
	h := ps.join(plainHolder)
	if !h.Held {
		t.Fatalf("H's Lock: %+v, want held", h)
	}
	for i := range 3 {
		ps.present(deadWaiter(i))
		if r := ps.join(deadWaiter(i)); r.Held {
			t.Fatalf("dead waiter %d's join: %+v, want queued", i, r)
		}
	}
	if r := ps.join(plainWaiter); r.Held || r.Head {
		t.Fatalf("W's join: %+v, want queued behind the three", r)
	}
	for i := range 3 {
		ps.gone(deadWaiter(i))
	}
	return h.Token
}

// deadWaitersPassedOverByTheHandOff: W looks after the three died (its look
// records their absence, and tells it to look at H's expiry); a grace
// later H unlocks, and the hand-off passes over the three: W holds.
func deadWaitersPassedOverByTheHandOff(t tb, scripts *lua.Scripts) {
	t.Helper()
	const name = "passed-over"
	ps, clk, stop := newPresenceScripts(t, scripts, transport.FairBase(name))
	defer stop()
	token := queueBehindTheDead(t, ps)
	if r := ps.look(plainWaiter); r.Held || !r.Head {
		t.Fatalf("W's look behind the dead: %+v; want queued, told to look (as the head)", r)
	}
	clk.Advance(core.PresenceGrace)
	ps.release(plainHolder+".1", token)
	if got := ps.holder(name); got != plainWaiter+".1" {
		t.Fatalf("holder after H's release, the three gone for the grace: %q, want W", got)
	}
}

func TestDeadWaitersPassedOverByTheHandOff(t *testing.T) {
	deadWaitersPassedOverByTheHandOff(t, lua.Default())
}

// deadWaitersPassedOverByALook: as deadWaitersPassedOverByTheHandOff, but
// a grace after its first look W looks again while H holds: that look's
// cleanup passes over the three, and W is the head.
func deadWaitersPassedOverByALook(t tb, scripts *lua.Scripts) {
	t.Helper()
	ps, clk, stop := newPresenceScripts(t, scripts, transport.FairBase("passed-over-by-a-look"))
	defer stop()
	queueBehindTheDead(t, ps)
	if r := ps.look(plainWaiter); r.Held || !r.Head {
		t.Fatalf("W's look behind the dead: %+v; want queued, told to look (as the head)", r)
	}
	clk.Advance(core.PresenceGrace)
	if r := ps.look(plainWaiter); r.Held || !r.Head || r.Queue != 1 {
		t.Fatalf("W's look a grace later: %+v; want the three passed over (a queue of 1), W the head", r)
	}
}

func TestDeadWaitersPassedOverByALook(t *testing.T) {
	deadWaitersPassedOverByALook(t, lua.Default())
}

// deadWaitersFoundByTheHandOff: nobody looked at the three before H
// unlocks: the hand-off finds the first gone (for less than the grace), and
// grants it the lock, counting its absence from now; W, the first waiter
// behind them whose client is there, is told to look at the grace's end,
// and then holds.
func deadWaitersFoundByTheHandOff(t tb, scripts *lua.Scripts) {
	t.Helper()
	const name = "found-dead"
	ps, clk, stop := newPresenceScripts(t, scripts, transport.FairBase(name))
	defer stop()
	token := queueBehindTheDead(t, ps)
	sub := ps.inbox(ps.base, plainWaiter)
	defer sub.Close()
	released := clk.Now().UnixMilli()
	ps.release(plainHolder+".1", token)
	if got := ps.holder(name); got != deadWaiter(0)+".1" {
		t.Fatalf("holder after H's release: %q, want the first dead waiter (gone for less than the grace)", got)
	}
	if at := headNotice(t, sub, plainWaiter); at == 0 || at > released+core.PresenceGrace.Milliseconds() {
		t.Fatalf("W's head notice after the hand-off: expiry %d, want by the grace's end (%d)", at, released+core.PresenceGrace.Milliseconds())
	}
	ps.holdsAGraceLater(clk, "the hand-off")
}

func TestDeadWaitersFoundByTheHandOff(t *testing.T) {
	deadWaitersFoundByTheHandOff(t, lua.Default())
}

// joinBehindTheDead: H and the first waiter, both keeping a presence, die;
// W joins behind them: its join's reply tells it to look at the grace's
// end (it is the first whose client is there), when it holds.
func joinBehindTheDead(t tb, scripts *lua.Scripts) {
	t.Helper()
	const name = "join-behind"
	ps, clk, stop := newPresenceScripts(t, scripts, transport.FairBase(name))
	defer stop()
	ps.deadHolderAndHead()
	ps.gone(deadHolder)
	ps.gone(deadWaiter(0))
	if r := ps.join(plainWaiter); r.Held || !r.Head || r.HoldMs != core.PresenceGrace.Milliseconds() {
		t.Fatalf("W's join behind the dead: %+v; want queued, told to look at the grace's end", r)
	}
	ps.holdsAGraceLater(clk, "its join")
}

func TestJoinBehindTheDead(t *testing.T) {
	joinBehindTheDead(t, lua.Default())
}

// heartbeatFindsTheDead: H and the first waiter, both keeping a presence,
// die after W queued behind them. Nobody alive is the head; W's heartbeat
// finds both gone and tells W to look at the grace's end, when it holds.
func heartbeatFindsTheDead(t tb, scripts *lua.Scripts) {
	t.Helper()
	const name = "heartbeat-finds"
	ps, clk, stop := newPresenceScripts(t, scripts, transport.FairBase(name))
	defer stop()
	ps.deadHolderAndHead()
	if r := ps.join(plainWaiter); r.Held || r.Head {
		t.Fatalf("W's join: %+v, want queued behind the first", r)
	}
	ps.gone(deadHolder)
	ps.gone(deadWaiter(0))
	beat := clk.Now().UnixMilli()
	if r := ps.heartbeat(plainWaiter); r.Status[0] != transport.BeatBehindGone || r.Expiry != beat+core.PresenceGrace.Milliseconds() {
		t.Fatalf("W's heartbeat behind the dead: %+v; want told to look (as the head) at the grace's end, %d", r, beat+core.PresenceGrace.Milliseconds())
	}
	ps.holdsAGraceLater(clk, "its heartbeat")
}

func TestHeartbeatFindsTheDead(t *testing.T) {
	heartbeatFindsTheDead(t, lua.Default())
}

// waiterSeenBackIsForgotten: a look that finds a waiter's client back
// forgets the absence seen before. D, which keeps a presence, is the head
// behind H; D drops its presence (W's look records it), comes back (W's
// next look sees it), and two graces later drops it again just as H
// unlocks: D's absence counts from the hand-off's look, so D is granted
// the lock, not passed over.
func waiterSeenBackIsForgotten(t tb, scripts *lua.Scripts) {
	t.Helper()
	const name = "waiter-seen-back"
	ps, clk, stop := newPresenceScripts(t, scripts, transport.FairBase(name))
	defer stop()
	d := deadWaiter(0)
	h := ps.join(plainHolder)
	if !h.Held {
		t.Fatalf("H's Lock: %+v, want held", h)
	}
	ps.present(d)
	if r := ps.join(d); r.Held || !r.Head {
		t.Fatalf("D's join: %+v, want queued as head", r)
	}
	if r := ps.join(plainWaiter); r.Held || r.Head {
		t.Fatalf("W's join: %+v, want queued behind D", r)
	}
	ps.gone(d)
	if r := ps.look(plainWaiter); r.Held || !r.Head {
		t.Fatalf("W's look at D gone: %+v; want told to look at the grace's end", r)
	}
	ps.present(d)
	if r := ps.look(plainWaiter); r.Held || r.Head {
		t.Fatalf("W's look at D back: %+v; want queued behind D", r)
	}
	clk.Advance(2 * core.PresenceGrace)
	ps.gone(d)
	ps.release(plainHolder+".1", h.Token)
	if got := ps.holder(name); got != d+".1" {
		t.Fatalf("holder after H's release: %q, want D (its absence, seen before it came back, was counted)", got)
	}
}

func TestWaiterSeenBackIsForgotten(t *testing.T) {
	waiterSeenBackIsForgotten(t, lua.Default())
}

// semRelease runs sem_release.lua for owner's permit hold with token, and
// returns what it answered: transport.Released, or transport.ReleasedWatch.
func (ps *presenceScripts) semRelease(owner string, token int64) int {
	ps.t.Helper()
	ps.n++
	keys := append([]string{ps.base}, transport.QueueKeys(transport.GateBase(ps.base))...)
	v, err := ps.scripts.SemRelease.Run(context.Background(), ps.c, nil, keys,
		owner, fmt.Sprintf("%s#%d", owner, ps.n), token, "PUBLISH", transport.Channel(transport.GateBase(ps.base))).Result()
	r, derr := transport.DecodeRelease(v)
	if err != nil || derr != nil || (r != transport.Released && r != transport.ReleasedWatch) {
		ps.t.Fatalf("%s's release: %v, %v; want released", owner, v, err)
	}
	return r
}

// gateQueue runs one attempt of client's first entry on the semaphore's
// gate, asking for n permits.
func (ps *presenceScripts) gateQueue(client string, n int, mode string) transport.FairAcquireReply {
	ps.t.Helper()
	return ps.acquireOn(transport.GateBase(ps.base), transport.FairAcquire{Owner: client + ".1", Entry: client + ".1/1", Mode: mode,
		Permit: transport.PermitRequest{Owner: client + ".1#2", N: n, Lease: 30000}})
}

// semBehindTheDead: on a semaphore of 2, P (no presence) holds both
// permits; D0, which keeps a presence, holds the gate (the first waiter,
// for 2 permits), D1, which keeps one too, waits behind it, then W, which
// keeps none. It returns P's token.
func (ps *presenceScripts) semBehindTheDead() int64 {
	ps.t.Helper()
	p := ps.semTry(plainHolder, 2)
	ps.present(deadWaiter(0))
	ps.present(deadWaiter(1))
	if r := ps.gateQueue(deadWaiter(0), 2, transport.ModeJoin); !r.Held {
		ps.t.Fatalf("D0's gate: %+v; want held (the first waiter)", r)
	}
	if r := ps.gateQueue(deadWaiter(1), 2, transport.ModeJoin); r.Held || !r.Head {
		ps.t.Fatalf("D1's join: %+v; want queued as the gate's head", r)
	}
	if r := ps.gateQueue(plainWaiter, 1, transport.ModeJoin); r.Held || r.Head {
		ps.t.Fatalf("W's join: %+v; want queued behind D1", r)
	}
	return p.Token
}

// semHoldsAGraceLater lets the grace pass: W's look must take the gate,
// and then a permit (D0's ended).
func (ps *presenceScripts) semHoldsAGraceLater(clk *clock.Fake, after string) {
	ps.t.Helper()
	clk.Advance(core.PresenceGrace)
	g := ps.gateQueue(plainWaiter, 1, transport.ModeQueued)
	if !g.Held {
		ps.t.Fatalf("W's look a grace after %s: %+v; want the gate", after, g)
	}
	r := ps.gateLook(plainWaiter, g.Token)
	if !r.Held {
		ps.t.Fatalf("W's permit, holding the gate a grace after %s: %+v; want it (D0's permits ended)", after, r)
	}
}

// deadFirstWaiterServedAtTheRelease: semBehindTheDead; D0 and D1 die, and
// P releases: the release serves D0 its permits, finds its presence gone,
// records it for its permit hold and its gate hold, and tells W to look at
// the grace's end; then W takes the gate, passing D1 over, and the
// permits, ending D0's.
func deadFirstWaiterServedAtTheRelease(t tb, scripts *lua.Scripts) {
	t.Helper()
	ps, clk, stop := newPresenceScripts(t, scripts, transport.SemaphoreBase("served-gone"))
	defer stop()
	token := ps.semBehindTheDead()
	ps.gone(deadWaiter(0))
	ps.gone(deadWaiter(1))
	sub := ps.inbox(transport.GateBase(ps.base), plainWaiter)
	defer sub.Close()
	released := clk.Now().UnixMilli()
	ps.semRelease(plainHolder+".1#1", token)
	if at := headNotice(t, sub, plainWaiter); at == 0 || at > released+core.PresenceGrace.Milliseconds() {
		t.Fatalf("W's head notice after the release served D0: expiry %d, want by the grace's end (%d)", at, released+core.PresenceGrace.Milliseconds())
	}
	ps.semHoldsAGraceLater(clk, "the release")
}

func TestDeadFirstWaiterServedAtTheRelease(t *testing.T) {
	deadFirstWaiterServedAtTheRelease(t, lua.Default())
}

// watch runs fair_heartbeat.lua with no entries, as the releasing owner's
// look a poll after a hand-off to a waiter that keeps a presence does
// (core's watchHandOff).
func (ps *presenceScripts) watch() {
	ps.t.Helper()
	v, err := ps.scripts.FairHeartbeat.Run(context.Background(), ps.c, nil, transport.QueueKeys(ps.base),
		transport.Heartbeat("PUBLISH", transport.Channel(ps.base), nil, nil)...).Result()
	if err != nil {
		ps.t.Fatalf("the release's watch: %v", err)
	}
	if _, err := transport.DecodeHeartbeat(v, 0); err != nil {
		ps.t.Fatalf("the release's watch: %v", err)
	}
}

// waitersKilledAtTheRelease: H (no presence) holds; D0 and D1, which keep a
// presence, queue, then W, which keeps none. H releases while D0 and D1
// are still there (their deaths not yet read by Redis): D0 is granted the
// lock and D1 told it is the head; then both die. The releasing owner's
// look a poll later finds both gone and tells W to look at the grace's
// end, when W holds.
func waitersKilledAtTheRelease(t tb, scripts *lua.Scripts) {
	t.Helper()
	const name = "killed-at-release"
	ps, clk, stop := newPresenceScripts(t, scripts, transport.FairBase(name))
	defer stop()
	d0, d1 := deadWaiter(0), deadWaiter(1)
	h := ps.join(plainHolder)
	if !h.Held {
		t.Fatalf("H's Lock: %+v, want held", h)
	}
	ps.present(d0)
	ps.present(d1)
	ps.join(d0)
	ps.join(d1)
	if r := ps.join(plainWaiter); r.Held || r.Head {
		t.Fatalf("W's join: %+v, want queued behind the two", r)
	}
	ps.release(plainHolder+".1", h.Token)
	if got := ps.holder(name); got != d0+".1" {
		t.Fatalf("holder after H's release: %q, want D0 (there when it ran)", got)
	}
	ps.gone(d0)
	ps.gone(d1)
	sub := ps.inbox(ps.base, plainWaiter)
	defer sub.Close()
	clk.Advance(core.PresencePoll)
	watched := clk.Now().UnixMilli()
	ps.watch()
	if at := headNotice(t, sub, plainWaiter); at == 0 || at > watched+core.PresenceGrace.Milliseconds() {
		t.Fatalf("W's head notice after the release's watch: expiry %d, want by the grace's end (%d)", at, watched+core.PresenceGrace.Milliseconds())
	}
	ps.holdsAGraceLater(clk, "the watch")
}

func TestWaitersKilledAtTheRelease(t *testing.T) {
	waitersKilledAtTheRelease(t, lua.Default())
}

// releaseAsksForAWatch: a release that hands the lock to a waiter that
// keeps a presence asks its owner to look again a poll later
// (transport.ReleasedWatch); one that hands it to a waiter that keeps none, or
// to nobody, does not.
func releaseAsksForAWatch(t tb, scripts *lua.Scripts) {
	t.Helper()
	ps, _, stop := newPresenceScripts(t, scripts, transport.FairBase("watch-asked"))
	defer stop()
	d := deadWaiter(0)
	h := ps.join(plainHolder)
	ps.present(d)
	ps.join(d)
	ps.join(plainWaiter)
	if r := ps.release(plainHolder+".1", h.Token); r != transport.ReleasedWatch {
		t.Fatalf("a release to a waiter that keeps a presence: %d, want %d (watch it)", r, transport.ReleasedWatch)
	}
	g := ps.look(d)
	if !g.Held {
		t.Fatalf("D's look at its hand-off: %+v, want held", g)
	}
	if r := ps.release(d+".1", g.Token); r != transport.Released {
		t.Fatalf("a release to a waiter that keeps no presence: %d, want %d", r, transport.Released)
	}
}

func TestReleaseAsksForAWatch(t *testing.T) {
	releaseAsksForAWatch(t, lua.Default())
}

// firstWaiterKilledAtTheSemaphoreRelease: deadFirstWaiterServedAtTheRelease,
// but D0 and D1 die as the release runs, after it: it serves D0 while D0
// is there, and asks for a watch ({1, 1}); the releasing owner's look a
// poll later (sem_watch.lua) finds both gone and tells W to look at the
// grace's end, when it takes the gate and the permits.
func firstWaiterKilledAtTheSemaphoreRelease(t tb, scripts *lua.Scripts) {
	t.Helper()
	ps, clk, stop := newPresenceScripts(t, scripts, transport.SemaphoreBase("killed-at-sem-release"))
	defer stop()
	token := ps.semBehindTheDead()
	if r := ps.semRelease(plainHolder+".1#1", token); r != transport.ReleasedWatch {
		t.Fatalf("P's release, serving D0, which keeps a presence: %v, want %d (watch it)", r, transport.ReleasedWatch)
	}
	ps.gone(deadWaiter(0))
	ps.gone(deadWaiter(1))
	ps.semWatchTellsW(clk)
}

func TestFirstWaiterKilledAtTheSemaphoreRelease(t *testing.T) {
	firstWaiterKilledAtTheSemaphoreRelease(t, lua.Default())
}

// firstWaiterGoneAloneAtTheSemaphoreRelease: semBehindTheDead; D0 is gone
// when P releases, D1 (killed with it) still there: Redis reads the closes
// of their sockets one by one, and the release ran between. The release
// serves D0, finds it gone, and asks for a watch all the same ({1, 1}):
// the look a poll later finds D1 gone too and tells W to look at the
// grace's end, when it takes the gate and the permits. (Before, such a
// release asked for none: W waited for its heartbeat, 0.87 s in 3 of 10
// fault runs.)
func firstWaiterGoneAloneAtTheSemaphoreRelease(t tb, scripts *lua.Scripts) {
	t.Helper()
	ps, clk, stop := newPresenceScripts(t, scripts, transport.SemaphoreBase("gone-alone-at-sem-release"))
	defer stop()
	token := ps.semBehindTheDead()
	ps.gone(deadWaiter(0))
	if r := ps.semRelease(plainHolder+".1#1", token); r != transport.ReleasedWatch {
		t.Fatalf("P's release, serving D0, gone, with D1 still there: %v, want %d (watch it)", r, transport.ReleasedWatch)
	}
	ps.gone(deadWaiter(1))
	ps.semWatchTellsW(clk)
}

func TestFirstWaiterGoneAloneAtTheSemaphoreRelease(t *testing.T) {
	firstWaiterGoneAloneAtTheSemaphoreRelease(t, lua.Default())
}

// semWatchTellsW plays the releasing owner's look a poll after a release
// of semBehindTheDead's that asked for one (sem_watch.lua), D0 and D1 gone
// by then: it must tell W (1), with a head notice due by the grace's end,
// when W takes the gate and the permits.
func (ps *presenceScripts) semWatchTellsW(clk *clock.Fake) {
	ps.t.Helper()
	gate := transport.GateBase(ps.base)
	sub := ps.inbox(gate, plainWaiter)
	defer sub.Close()
	clk.Advance(core.PresencePoll)
	watched := clk.Now().UnixMilli()
	keys := append([]string{ps.base}, transport.QueueKeys(gate)...)
	if v, err := ps.scripts.SemWatch.Run(context.Background(), ps.c, nil, keys, "PUBLISH", transport.Channel(gate)).Result(); err != nil || fmt.Sprint(v) != "1" {
		ps.t.Fatalf("the release's watch: %v, %v; want 1 (W told)", v, err)
	}
	if at := headNotice(ps.t, sub, plainWaiter); at == 0 || at > watched+core.PresenceGrace.Milliseconds() {
		ps.t.Fatalf("W's head notice after the watch: expiry %d, want by the grace's end (%d)", at, watched+core.PresenceGrace.Milliseconds())
	}
	ps.semHoldsAGraceLater(clk, "the watch")
}
