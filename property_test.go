package fairlock_test

// The executable specification of the fair lock.
//
// A rapid state machine drives real fair.Mutex handles, each on a client of
// its own (a "process"), against miniredis, with the fake clock moving
// miniredis's TIME and the library's timers together. Its actions are what
// users and failures do: join the queue, try without waiting, re-enter,
// unlock, force the lock open (ForceUnlock, by an operator's handle or by
// the holder), give up, crash (fall silent for good), stall (a waiter cut off
// from Redis for a while, then back), replay a release late (a go-redis retry
// that comes after others used the lock), and let time pass in steps no
// longer than a quarter of a heartbeat; where some processes keep a presence
// (fairlock.WithPresence), break a live one's connections (blip) or drop a
// holder's on the server's side alone (hide). After every step it checks
// what a user can observe, one property per guarantee of package fair, and
// what Redis itself shows: every message published on the lock's channel
// (read by a subscriber of its own, counted per change of head and per
// hand-off) and the queue's two keys (tidiness).
//
//	go test -run TestFairLockSpecification .                      # 1,000 checks (250 under -race)
//	RAPID_CHECKS=100000 go test -run TestFairLockSpecification -timeout 0 .
//
// TestSpecificationCatchesBrokenScripts runs the same machine against
// deliberately broken scripts and expects it to fail for each.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	"github.com/fairlock/fairlock/observe"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"pgregory.net/rapid"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// 1,000 checks unless told otherwise: the mutation test's default;
	// each specification sets its own count (checkWith).
	checksGiven = os.Getenv("RAPID_CHECKS") != "" || flagSet("rapid.checks")
	if !checksGiven {
		_ = flag.Set("rapid.checks", "1000")
	}
	redistest.Exit(m)
}

// checksGiven: the number of checks was given (RAPID_CHECKS or
// -rapid.checks), for every specification.
var checksGiven bool

func flagSet(name string) (set bool) {
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

const (
	waitTimeout = 3 * time.Second
	heartbeat   = waitTimeout / 3
	lease       = 5 * time.Second
	maxStep     = heartbeat / 4
	processes   = 5
	lockName    = "spec"
	lockKey     = "fairlock:f:{" + lockName + "}" // the hold; its queue keys and channel add a suffix
	// leaseEndSlack is how long after a hold's end (Redis's clock) the head
	// may still wait: its timer fires 1 ms after the expiry, and one more
	// for rounding. A real network adds one round trip.
	leaseEndSlack = 2 * time.Millisecond
)

type phase int

const (
	idle phase = iota
	waiting
	holding
	crashed
)

// proc is one handle on a client of its own.
type proc struct {
	label   string
	client  *redis.Client
	m       *fair.Mutex
	phase   phase
	count   int // holds, as the model counts them
	joined  int // join order among waiters
	entry   string
	cancel  context.CancelFunc
	result  chan error    // the running Lock call's outcome
	running bool          // a Lock call's goroutine has not returned
	fixed   time.Duration // the lease its Lock asked for; 0: kept by the watchdog

	crashedAt    time.Time
	crashedPhase phase
	entryDied    bool // its entry was seen past its deadline: it lost its place

	cut        *redistest.Partition // cuts the process off from Redis
	sever      *redistest.Severable // breaks its connections (a reset, a CLIENT KILL)
	muffle     *redistest.Muffle    // drops them on the server's side alone (hide)
	hidden     time.Time            // when hide dropped its connections, until resume
	broken     time.Time            // when breakFor broke its connections, until it reconnects
	jeopardy   bool                 // its hold outlived a break: it may end it early (the session's jeopardy)
	presence   *fairlock.Owner      // its owner, if it keeps a presence (fairlock.WithPresence)
	releases   *releaseLog          // its last final release, to replay
	stalled    bool                 // cut off now
	stalledAt  time.Time
	wasStalled bool     // stalled since its Lock call began: it may lose its place once
	cutGrant   int64    // the token of a grant Redis made it while it was stalled
	orphans    []orphan // entries left behind by calls that failed while cut off
	token      int64    // the token of its latest hold
	lostToken  int64    // the token of its latest hold that it lost

	// forced: another handle's ForceUnlock ended its hold; it must see Lost
	// by lostBy (its next renewal or claim, or its fixed lease's end).
	forced bool
	lostBy time.Time
	// forcedGrant: the token of a grant that ForceUnlock ended while it was
	// on its way to this waiter (a cut-off waiter hears of a hand-off with
	// no round trip, and SyncHubs cannot wait for its hub): if its Lock
	// returns that hold, the hold is forced (lostBy: forcedBy).
	forcedGrant int64
	forcedBy    time.Time

	rec *redistest.Recorder // its observer: what its calls reported

	everCut bool // it was cut off from Redis at some time: it may be rescued
	rescues int  // the rescues its observer reported, as of the last check
}

// orphan is a queue entry whose waiter's call failed while it was cut off
// from Redis: it could not leave, so the entry must die by its deadline.
type orphan struct {
	entry string
	since time.Time // the waiter's last contact with Redis was before this
}

// spec is the model: only what a user can observe.
type spec struct {
	t         *rapid.T
	mr        *miniredis.Miniredis
	clk       *clock.Fake
	probe     *redis.Client
	procs     []*proc
	joins     int
	lastToken int64
	freeSince time.Time // the lock was free while a live waiter waited, since

	// The hold seen at the last check, and the waiter then at the front of
	// the queue: when that hold ends, this waiter must take over at once.
	holdEnds time.Time
	headThen string
	// The live head of the queue at the last check, and since which check
	// it has been: the head of a lock held by a process that kept a
	// presence looks every poll.
	head      string
	headSince time.Time
	// The first live waiter with only the crashed that kept a presence
	// ahead of it (and holding the lock, if anyone does), and since which
	// check it has been: it passes them within a heartbeat and the grace.
	passer      string
	passerSince time.Time

	synced string // what had been published when the hubs were last synced

	finalReleases atomic.Int64 // releases that ended a hold, by any process

	admin  *fair.Mutex  // an operator's handle, on the probe's client: ForceUnlock
	ledger *queueLedger // the messages Redis published, and the queue's keys
}

// newSpec makes the model; the last present of its processes keep a
// presence (fairlock.WithPresence).
func newSpec(t *rapid.T, scripts *lua.Scripts, present int) *spec {
	mr, clk := fakeServer(t)
	s := &spec{t: t, mr: mr, clk: clk}
	s.probe = redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	s.ledger = newQueueLedger(t, s.probe, "the lock", lockKey, "")
	s.ledger.replies = newHeadReplies(scripts.FairAcquire)
	admin, err := fair.New(redistest.OwnerOn(s.probe, s.clk, scripts), lockName, fair.WithLabel("admin"))
	if err != nil {
		t.Fatal(err)
	}
	s.admin = admin
	for i := 0; i < processes; i++ {
		c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
		cut, sever, muffle := &redistest.Partition{}, &redistest.Severable{}, &redistest.Muffle{}
		c.AddHook(cut)
		c.AddHook(sever)
		if i >= processes-present {
			c.AddHook(muffle) // hide drops only the connections of those that keep a presence
		}
		rl := &releaseLog{script: scripts.FairRelease, seq: &s.finalReleases, clk: s.clk}
		c.AddHook(rl)
		c.AddHook(s.ledger.replies)
		rec := &redistest.Recorder{}
		// Those that keep a presence: their holds end soon after they
		// crash, and when their connections break.
		owner, presence := redistest.OwnerOn(c, s.clk, scripts), (*fairlock.Owner)(nil)
		if i >= processes-present {
			var err error
			if presence, err = redistest.PresentOwner(c, s.clk, scripts); err != nil {
				t.Fatal(err)
			}
			owner = presence
		}
		m, err := fair.New(owner, lockName,
			fair.WithLabel(fmt.Sprintf("p%d", i)), fairlock.WithWaitTimeout(waitTimeout), fairlock.WithLease(lease),
			fairlock.WithObserver(rec))
		if err != nil {
			t.Fatal(err)
		}
		s.procs = append(s.procs, &proc{label: fmt.Sprintf("p%d", i), client: c, m: m, cut: cut, sever: sever, muffle: muffle,
			presence: presence, releases: rl, rec: rec})
	}
	return s
}

func (s *spec) inspect() fair.State {
	st, err := fair.Inspect(context.Background(), s.probe, lockName)
	if err != nil {
		s.t.Fatalf("Inspect: %v", err)
	}
	return st
}

func (s *spec) pick(ph phase) *proc {
	var c []*proc
	for _, p := range s.procs {
		if p.phase == ph && !p.stalled && !p.forced {
			c = append(c, p)
		}
	}
	if len(c) == 0 {
		s.t.Skip("no such handle")
	}
	return rapid.SampledFrom(c).Draw(s.t, "handle")
}

// Actions.

func (s *spec) join(t *rapid.T) {
	p := s.pick(idle)
	// Half the joins ask for a fixed lease, as TryLock(ctx, wait, lease)
	// does: those holds end by themselves, with no Unlock, often within one
	// wait action. Some are shorter than a heartbeat interval.
	fixed := time.Duration(0)
	if rapid.Bool().Draw(t, "fixed lease") {
		fixed = time.Duration(rapid.IntRange(500, 2500).Draw(t, "lease ms")) * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.joins++
	p.phase, p.joined, p.cancel, p.entry, p.wasStalled, p.fixed = waiting, s.joins, cancel, "", false, fixed
	p.entryDied, p.forcedGrant = false, 0
	p.result, p.running = make(chan error, 1), true
	news, before := len(p.rec.Snapshot().Queue), s.inspect().Queue
	go func() {
		ok, err := p.m.TryLock(ctx, time.Hour, fixed)
		if err == nil && !ok {
			err = errors.New("wait elapsed")
		}
		p.result <- err
	}()
	s.settle()
	s.checkJoinedLength(p, news, before)
}

// checkJoinedLength checks the queue's length that p's observer heard its
// join report (fair_acquire.lua's answer to a join): the live entries then,
// p's included. p's place now is at most that (those ahead of it can only
// leave), and nobody else joined since, so the queue now holds no more.
// This call's entry is the one of p's that was not queued before it
// (before): entries of p's earlier calls (orphans, or a crashed call's)
// may still be there.
func (s *spec) checkJoinedLength(p *proc, news int, before []fair.Waiter) {
	st := s.inspect()
	pos := slices.IndexFunc(st.Queue, func(w fair.Waiter) bool {
		return w.Label == p.label && !slices.ContainsFunc(before, func(b fair.Waiter) bool { return b.Entry == w.Entry })
	}) + 1
	if pos == 0 || p.wasStalled {
		return // not queued (it took the lock, or failed), or cut off
	}
	// The entry shows in Redis as soon as the join's script ran; its reply
	// may still be on its way to p.
	var joined []observe.QueueEvent
	for deadline := time.Now().Add(10 * time.Second); len(joined) == 0 && time.Now().Before(deadline); {
		for _, e := range p.rec.Snapshot().Queue[news:] {
			if e.Kind == observe.Joined {
				joined = append(joined, e)
			}
		}
		if len(joined) == 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	if len(joined) != 1 {
		s.t.Fatalf("%s is queued at %d, and its observer heard %d joins: %+v", p.label, pos, len(joined), joined)
	}
	if n := joined[0].Length; n < pos || n > len(st.Queue) {
		s.t.Fatalf("%s joined a queue of %d, by its observer; it stands at %d of %d now", p.label, n, pos, len(st.Queue))
	}
}

func (s *spec) tryWithoutWaiting(t *rapid.T) {
	p := s.pick(idle)
	before := s.inspect()
	ok, err := p.m.TryLock(context.Background(), 0, 0)
	if err != nil {
		t.Fatalf("%s TryLock(0): %v", p.label, err)
	}
	// The caller's own entries, left behind by calls that failed while it was
	// cut off, are removed by this call before it tries: they do not count.
	// Nor must the entries of processes that kept a presence and have been
	// gone for the grace: this call may pass them over (it does once it, or
	// an earlier look, found them gone the grace ago).
	live := slices.ContainsFunc(before.Queue, func(w fair.Waiter) bool {
		return !w.Expired && !p.isOrphan(w.Entry) && !s.goneFor(w.Label, core.PresenceGrace)
	})
	passable := slices.ContainsFunc(before.Queue, func(w fair.Waiter) bool {
		return !w.Expired && !p.isOrphan(w.Entry) && s.goneFor(w.Label, core.PresenceGrace)
	})
	// Likewise a hand-off to such an entry is given back first, and a hold
	// the caller lost (its client gave it up a margin before Redis does) is
	// ended first.
	held := before.Holder != nil && !(before.Holder.Pending && p.isOrphan(before.Holder.Entry)) &&
		!(p.lostToken != 0 && before.Holder.Token == p.lostToken)
	// A hold of a process that kept a presence and crashed the grace ago
	// or more may be ended by any attempt (once one found it gone).
	gone := held && s.presenceGone(before.Holder)
	// Guarantee 3, no barging: only a free lock with no live waiter is taken.
	if ok && ((held && !gone) || live) {
		t.Fatalf("no barging: %s took the lock with TryLock(0) while holder=%v and queue=%+v", p.label, before.Holder, before.Queue)
	}
	if !ok && !held && !live && !passable {
		t.Fatalf("TryLock(0) by %s failed on a free lock with no live waiter", p.label)
	}
	if after := s.inspect(); len(after.Queue) > len(before.Queue) {
		t.Fatalf("no barging: TryLock(0) by %s joined the queue", p.label)
	}
	if ok {
		s.acquired(p)
	}
	// Giving back a grant made to an abandoned entry hands the lock on.
	s.settle()
}

// reenter takes the lock again on its holder's handle, with the watchdog's
// lease or a fixed one (at most the watchdog's, so that a crashed holder's
// hold still ends within lease). A re-entry may lengthen the hold, never
// shorten it: Redis's expiry becomes the later of the hold's and now plus
// the lease asked for, whatever the hold's lease mode.
func (s *spec) reenter(t *rapid.T) {
	p := s.pick(holding)
	asked := time.Duration(0)
	if rapid.Bool().Draw(t, "fixed lease") {
		asked = time.Duration(rapid.IntRange(100, int(lease/time.Millisecond)).Draw(t, "lease ms")) * time.Millisecond
	}
	before := s.inspect()
	ok, err := p.m.TryLock(p.m.HoldContext(), 0, asked)
	if !ok || err != nil {
		t.Fatalf("re-entry by holder %s = %v, %v", p.label, ok, err)
	}
	p.count++
	after := s.inspect()
	want := asked
	if want == 0 {
		want = lease
	}
	want = max(want, before.Holder.TTL)
	if after.Holder == nil || after.Holder.Token != p.token || after.Holder.TTL != want {
		t.Fatalf("re-entry: %s asked for %v on a hold with %v left; Redis now has %+v, want %v left",
			p.label, asked, before.Holder.TTL, after.Holder, want)
	}
}

// forceUnlock ends the hold whoever has it, as an operator does: the lock is
// handed to the live head of the queue (with the queue behind it kept), or
// left free when nobody live waits. The holder's handle is told at its next
// renewal (or claim, or when its fixed lease ends): it sees Lost then, and
// its Unlock says ErrLockLost. The holder may also force its own hold open:
// that ends it as released, not lost.
func (s *spec) forceUnlock(t *rapid.T) {
	before := s.inspect()
	var old *proc
	for _, p := range s.procs {
		if p.phase == holding && !p.forced && before.Holder != nil && before.Holder.Label == p.label &&
			before.Holder.Token == p.token && !isClosed(p.m.Lost()) {
			old = p
		}
	}
	caller, byHolder := s.admin, false
	if old != nil && !old.stalled && rapid.Bool().Draw(t, "by the holder") {
		caller, byHolder = old.m, true
	}
	was, err := caller.ForceUnlock(context.Background())
	if err != nil {
		t.Fatalf("ForceUnlock: %v", err)
	}
	if old == nil && before.Holder != nil {
		// A grant still on its way to a waiter: its Lock may return it
		// later, a hold already forced open (acquired).
		for _, p := range s.procs {
			if p.phase == waiting && p.label == before.Holder.Label {
				p.forcedGrant, p.forcedBy = before.Holder.Token, s.clk.Now().Add(before.Holder.TTL+time.Millisecond)
			}
		}
	}
	if was != (before.Holder != nil) {
		t.Fatalf("ForceUnlock reported held=%v; the holder was %+v", was, before.Holder)
	}
	after := s.inspect()
	if next := handedOn(t, "ForceUnlock", before, after, s.mayPass); next >= 0 {
		if before.Holder != nil && after.Holder.Token <= before.Holder.Token {
			t.Fatalf("fencing: the hand-off after ForceUnlock got token %d, not above %d", after.Holder.Token, before.Holder.Token)
		}
		// The dead entries before the new holder are popped, and so are
		// those right behind it (and among them those passed over); the
		// rest of the queue stays.
		rest := before.Queue[next+1:]
		for len(rest) > 0 && (rest[0].Expired || (s.mayPass(rest[0]) && len(after.Queue) < len(rest))) {
			rest = rest[1:]
		}
		if !slices.EqualFunc(after.Queue, rest, func(a, b fair.Waiter) bool { return a.Entry == b.Entry }) {
			t.Fatalf("ForceUnlock changed the queue behind the head: %+v, then %+v", before.Queue, after.Queue)
		}
	}
	if old != nil {
		if byHolder {
			// Its own ForceUnlock: released, not lost.
			if isClosed(old.m.Lost()) || !errors.Is(context.Cause(old.m.HoldContext()), fairlock.ErrReleased) {
				t.Fatalf("%s forced its own hold open: Lost closed=%v, HoldContext cause %v, want ErrReleased",
					old.label, isClosed(old.m.Lost()), context.Cause(old.m.HoldContext()))
			}
			old.phase, old.count = idle, 0
		} else {
			// It learns at its next renewal or claim (within lease/2), or,
			// cut off or with a fixed lease, when its lease runs out.
			old.forced = true
			old.lostBy = s.clk.Now().Add(before.Holder.TTL + time.Millisecond)
			if old.fixed == 0 && !old.stalled {
				old.lostBy = s.clk.Now().Add(lease/2 + time.Millisecond)
			}
		}
	}
	s.settle()
}

// unlock undoes one level of a hold. The last one hands the lock, in the
// same call, to the first waiter whose deadline is ahead (guarantee 6), or
// frees it.
func (s *spec) unlock(t *rapid.T) {
	p := s.pick(holding)
	before := s.inspect()
	if err := p.m.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock by holder %s: %v", p.label, err)
	}
	p.count--
	if p.count == 0 {
		p.phase = idle
		handedOn(t, p.label+"'s last Unlock", before, s.inspect(), s.mayPass)
	}
	s.settle()
}

// handedOn checks a call that ended the hold (what), from the states
// before and after it: the first waiter whose deadline was ahead holds the
// lock now, as a hand-off not yet claimed, or, with no such waiter, the lock
// is free (guarantee 6). Waiters that mayPass reports (their client's
// presence gone for the grace) may have been passed over, or not, as the
// scripts' record of their absence says. It returns the new holder's
// index in before.Queue, -1 if none.
func handedOn(t *rapid.T, what string, before, after fair.State, mayPass func(fair.Waiter) bool) int {
	var next []int // who may hold it now: those that may be passed over, then the first that may not
	for i, w := range before.Queue {
		if w.Expired {
			continue
		}
		next = append(next, i)
		if !mayPass(w) {
			break
		}
	}
	if len(next) == 0 {
		if after.Holder != nil {
			t.Fatalf("hand-off: %s, with no live waiter, left the lock held: %+v", what, after.Holder)
		}
		return -1
	}
	if after.Holder == nil && mayPass(before.Queue[next[len(next)-1]]) {
		return -1 // every live waiter was passed over
	}
	if after.Holder != nil && after.Holder.Pending {
		for _, i := range next {
			if before.Queue[i].Entry == after.Holder.Entry {
				return i
			}
		}
	}
	t.Fatalf("hand-off: %s did not hand the lock to the live head %s (or one of the waiters it may pass over before it): the holder is %+v",
		what, before.Queue[next[len(next)-1]].Entry, after.Holder)
	return -1
}

// mayPass reports whether w is a waiter that a hand-off may pass over: its
// process kept a presence that has been gone for the grace.
func (s *spec) mayPass(w fair.Waiter) bool { return s.goneFor(w.Label, core.PresenceGrace) }

func (s *spec) giveUp(t *rapid.T) {
	p := s.pick(waiting)
	entry := p.entry
	p.cancel()
	err := <-p.result
	p.running = false
	if err == nil {
		// Granted just before giving up: it holds the lock.
		s.acquired(p)
		return
	}
	if s.lockFailed(p, err) {
		return
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("%s gave up with %v, want context.Canceled", p.label, err)
	}
	p.phase = idle
	// Guarantee 5: once the call has returned, the entry is gone.
	for _, w := range s.inspect().Queue {
		if (w.Label == p.label && !p.isOrphan(w.Entry)) || (entry != "" && w.Entry == entry) {
			t.Fatalf("giving up: %s's entry is still listed after TryLock returned", p.label)
		}
	}
	s.settle()
}

func (s *spec) crash(t *rapid.T) {
	var c []*proc
	for _, p := range s.procs {
		if p.phase != crashed {
			c = append(c, p)
		}
	}
	if len(c) == 0 {
		t.Skip("everyone crashed")
	}
	p := rapid.SampledFrom(c).Draw(t, "handle")
	p.crashedPhase, p.crashedAt, p.phase = p.phase, s.clk.Now(), crashed
	_ = p.client.Close() // it falls silent: no heartbeat, renewal or unlock gets through
	// Its socket closes, and with it its presence, if it kept one.
	p.cut.On.Store(true)
	p.sever.Sever()
	s.settle()
}

// presenceGone reports whether h is the hold (or a grant not yet claimed)
// of a process whose presence has been gone from Redis for at least the
// grace: an attempt may end it.
func (s *spec) presenceGone(h *fair.Holder) bool {
	return s.goneFor(h.Label, core.PresenceGrace)
}

// goneFor reports whether the process labelled label kept a presence that
// has been gone from Redis for at least d.
func (s *spec) goneFor(label string, d time.Duration) bool {
	for _, p := range s.procs {
		if since, gone := p.presenceGoneSince(); p.label == label && gone && s.clk.Now().Sub(since) >= d {
			return true
		}
	}
	return false
}

// crashedWithPresence reports whether the process labelled label kept a
// presence and crashed.
func (s *spec) crashedWithPresence(label string) bool {
	for _, p := range s.procs {
		if p.label == label && p.presence != nil && p.phase == crashed {
			return true
		}
	}
	return false
}

// presenceGoneSince reports whether p kept a presence that Redis no longer
// has, and since when: since hide dropped its connections, or since it
// crashed.
func (p *proc) presenceGoneSince() (time.Time, bool) {
	switch {
	case p.presence == nil:
		return time.Time{}, false
	case !p.hidden.IsZero():
		return p.hidden, true
	case !p.broken.IsZero():
		return p.broken, true
	case p.phase == crashed:
		return p.crashedAt, true
	}
	return time.Time{}, false
}

// pickLiveWithPresence draws a process that keeps a presence and holds the
// lock (a hold it still believes in) or waits, and is not cut off.
func (s *spec) pickLiveWithPresence(t *rapid.T) *proc {
	var c []*proc
	for _, p := range s.procs {
		holds := p.phase == holding && !p.forced && !isClosed(p.m.Lost())
		if p.presence != nil && (holds || p.phase == waiting) && !p.stalled {
			c = append(c, p)
		}
	}
	if len(c) == 0 {
		t.Skip("no live holder or waiter that keeps a presence")
	}
	p := rapid.SampledFrom(c).Draw(t, "handle")
	return p
}

// hide drops every connection of a process that keeps a presence and holds
// the lock, on the server's side alone, and cuts it off: a partition that
// the server noticed (its keepalive closed the connections) and the holder
// did not. Its presence is gone from Redis while it believes it holds, and
// a live head takes the lock once the grace has passed: the one case in
// which two handles may both believe they hold (guarantee 10,
// docs/presence.md), bounded by the fencing token, which must be greater
// for the next holder. resume lets it learn. A waiter so hidden may be
// passed over as dead once the grace has passed (it lost its place, as a
// stalled waiter may): resumed, it learns and re-joins at the tail.
func (s *spec) hide(t *rapid.T) {
	p := s.pickLiveWithPresence(t)
	p.cut.On.Store(true)
	p.muffle.Drop()
	p.stalled, p.stalledAt, p.wasStalled, p.everCut = true, s.clk.Now(), true, true
	p.hidden = s.clk.Now()
	s.settle()
}

// blip breaks every connection of a live process that keeps a presence (a
// network reset, a CLIENT KILL), holding the lock or idle: it connects again
// at once, within the grace. A blip costs nothing: its presence comes back
// and confirms its hold, which it keeps (the checks after it see Lost open
// and Redis agreeing); a fixed lease is kept too (checked, not lengthened),
// until it runs out, which the checks after it judge.
func (s *spec) blip(t *rapid.T) {
	var c []*proc
	for _, p := range s.procs {
		if p.presence != nil && (p.phase == holding || p.phase == idle) && !p.stalled && !p.forced {
			c = append(c, p)
		}
	}
	if len(c) == 0 {
		t.Skip("no live process that keeps a presence, holding or idle")
	}
	p := rapid.SampledFrom(c).Draw(t, "handle")
	p.everCut = true
	live := p.phase == holding && !isClosed(p.m.Lost())
	if live {
		pingAnswered(t, p.label, p.presence, s.clk)
	}
	ups := redistest.PresenceUps(p.presence)
	p.sever.Sever()
	if ups > 0 {
		riddenOut(t, p.label, p.presence, s.clk, ups)
	}
	if live && !p.forced && p.fixed == 0 && isClosed(p.m.Lost()) {
		t.Fatalf("presence: a blip cost %s its hold", p.label)
	}
	s.settle()
}

// breakFor breaks every connection of a live process that keeps a presence,
// holding the lock or waiting, and cuts it off for 10 ms to 400 ms: a
// partition both sides notice, a network that resets connections and
// refuses new ones, a break that may outlast the grace. Its presence is
// gone from Redis, and it cannot subscribe again. Guarantee 10's other
// half: a holder so cut off stops believing (Lost) before anyone else can
// take the lock (the check after every 10 ms step, half the session's
// margin, sees at most one believer), and a live head takes the lock within
// the grace and two polls of the break (presenceGoneSince). Then it
// reconnects: a hold it kept through a break shorter than its jeopardy is
// confirmed and kept; a lost one's Unlock says ErrLockLost; a waiter passed
// over re-joins at the tail.
func (s *spec) breakFor(t *rapid.T) {
	p := s.pickLiveWithPresence(t)
	if p.phase == holding {
		pingAnswered(t, p.label, p.presence, s.clk)
		p.jeopardy = true
	}
	ups := redistest.PresenceUps(p.presence)
	p.cut.On.Store(true)
	p.sever.Sever()
	p.stalled, p.stalledAt, p.wasStalled, p.everCut = true, s.clk.Now(), true, true
	p.broken = s.clk.Now()
	s.settle()
	for range rapid.IntRange(1, 40).Draw(t, "10 ms steps") {
		s.step10(t)
	}
	// Reconnected, it subscribes again at its next try (each a retry pause
	// apart, on its clock): its presence is gone until then. A hold it
	// ended as lost, whose release failed while it was cut off, is released
	// when the presence is back (the owner's background call): the lock is
	// given back before the checks go on, which must not race it.
	p.cut.On.Store(false)
	p.stalled = false
	presenceBack(t, p.label, p.presence, s.clk, ups)
	p.broken = time.Time{}
	if p.phase == holding && isClosed(p.m.Lost()) {
		s.gaveBack(t, p, "its connections broke for a while")
	}
	s.settle()
}

// step10 moves the clock 10 ms (half the session's margin: a holder's end
// and a waiter's takeover that it orders fall in different steps), lets
// everyone act on it, and checks.
func (s *spec) step10(t *rapid.T) {
	s.clk.Advance(10 * time.Millisecond)
	s.settle()
	s.check(t)
}

// waitBriefly polls cond for up to 20 ms of real time.
func waitBriefly(cond func() bool) bool {
	for deadline := time.Now().Add(20 * time.Millisecond); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// pingAnswered makes sure that owner, a holder, has had a session PING
// answered within the last SessionPing, as an owner that holds has had
// on a live link: the fake clock's due PINGs run at its next tick.
func pingAnswered(t tb, label string, owner *fairlock.Owner, clk *clock.Fake) {
	t.Helper()
	if redistest.PresenceAlive(owner).Before(clk.Now().Add(-core.SessionPing)) {
		clk.Advance(time.Millisecond)
	}
	since := clk.Now().Add(-core.SessionPing)
	waitFor(t, label+"'s session PING to be answered", func() bool { return !redistest.PresenceAlive(owner).Before(since) })
}

// riddenOut waits, after a blip of owner's connections, for its presence
// to come back (it had come up ups times) and to confirm its holds: their
// renewals, due at once, run at the fake clock's next tick.
func riddenOut(t tb, label string, owner *fairlock.Owner, clk *clock.Fake, ups int64) {
	t.Helper()
	waitFor(t, label+"'s presence to come back", func() bool { return redistest.PresenceUps(owner) > ups })
	clk.Advance(time.Millisecond)
	waitFor(t, label+"'s holds to be confirmed", func() bool { return redistest.PresenceConfirmed(owner) })
}

// gaveBack waits until p, a holder whose presence connection failed (why),
// has ended its hold (Lost closed) and given the lock back (Redis no longer
// has its token), then checks that its Unlock says ErrLockLost.
func (s *spec) gaveBack(t *rapid.T, p *proc, why string) {
	waitFor(t, p.label+"'s Lost to close after "+why, func() bool { return isClosed(p.m.Lost()) })
	waitFor(t, p.label+" to give the lock back after "+why, func() bool {
		h := s.inspect().Holder
		return h == nil || h.Token != p.token
	})
	if err := p.m.Unlock(context.Background()); !errors.Is(err, fairlock.ErrLockLost) {
		t.Fatalf("presence: Unlock of %s's hold, ended when %s = %v, want ErrLockLost", p.label, why, err)
	}
	p.phase, p.count, p.lostToken, p.forced, p.jeopardy = idle, 0, p.token, false, false
}

// stall cuts a waiter off from Redis: its heartbeats fail, so once its
// deadline passes it is dead to the queue.
func (s *spec) stall(t *rapid.T) {
	p := s.pick(waiting)
	s.cutOff(p)
}

// stallHead cuts off the waiter at the head of the queue of a held lock,
// with a live waiter behind it: its death changes the head, and the waiter
// behind must be told. The clock then runs to just past its deadline, where
// the next call, before any heartbeat, finds it dead (see toDeadline).
func (s *spec) stallHead(t *rapid.T) {
	st := s.inspect()
	var live []*proc
	for _, w := range st.Queue {
		for _, p := range s.procs {
			if !w.Expired && p.entry == w.Entry && p.phase == waiting && !p.stalled {
				live = append(live, p)
			}
		}
	}
	if st.Holder == nil || len(live) < 2 || st.Queue[0].Entry != live[0].entry {
		t.Skip("no live head of a held lock with a live waiter behind it")
	}
	s.cutOff(live[0])
	s.toDeadline(t)
}

func (s *spec) cutOff(p *proc) {
	p.cut.On.Store(true)
	p.stalled, p.stalledAt, p.wasStalled, p.everCut = true, s.clk.Now(), true, true
	s.settle()
}

// stallFor cuts a waiter off for up to two wait timeouts, checking after
// every step, then reconnects it.
func (s *spec) stallFor(t *rapid.T) {
	p := s.pick(waiting)
	p.cut.On.Store(true)
	p.stalled, p.stalledAt, p.wasStalled, p.everCut = true, s.clk.Now(), true, true
	s.settle()
	n := rapid.IntRange(1, int(2*waitTimeout/maxStep)).Draw(t, "steps")
	for i := 0; i < n; i++ {
		s.clk.Advance(maxStep)
		s.settle()
		s.check(t)
	}
	if p.stalled {
		p.cut.On.Store(false)
		p.stalled = false
		s.settle()
	}
}

// resume reconnects a stalled process.
func (s *spec) resume(t *rapid.T) {
	var c []*proc
	for _, p := range s.procs {
		if p.stalled && p.phase != crashed {
			c = append(c, p)
		}
	}
	if len(c) == 0 {
		t.Skip("nobody is stalled")
	}
	p := rapid.SampledFrom(c).Draw(t, "handle")
	p.cut.On.Store(false)
	p.stalled = false
	if !p.hidden.IsZero() {
		s.unhide(t, p)
	}
	s.settle()
}

// unhide lets a process that hide cut off learn that its connections were
// dropped: its presence connection's read fails, and it subscribes again.
// Its hold ends (Lost, and it gives the lock back if Redis still has it)
// at its jeopardy, or when its confirming renewal finds it taken over, both
// due at the fake clock's next tick; a hold Redis still has at that renewal
// was never taken over, and is kept (the checks see Redis agree).
func (s *spec) unhide(t *rapid.T, p *proc) {
	ups := redistest.PresenceUps(p.presence)
	p.hidden = time.Time{}
	p.muffle.Release()
	waitFor(t, p.label+"'s presence to come back", func() bool { return redistest.PresenceUps(p.presence) > ups })
	s.clk.Advance(time.Millisecond)
	if p.phase != holding {
		return
	}
	waitFor(t, p.label+"'s hold to be confirmed or ended", func() bool {
		return isClosed(p.m.Lost()) || redistest.PresenceConfirmed(p.presence)
	})
	if isClosed(p.m.Lost()) {
		s.gaveBack(t, p, "it learned its connections were dropped")
	}
}

func (s *spec) advance(t *rapid.T) {
	d := time.Duration(rapid.IntRange(1, int(maxStep/time.Millisecond)).Draw(t, "ms")) * time.Millisecond
	s.clk.Advance(d)
	s.settle()
}

// toDeadline lets time pass until just after the next deadline of a silent
// waiter in Redis: the moment an entry that fell silent dies, before the
// heartbeats of the others (each a third of a wait timeout apart) come to
// evict it. Then a newcomer, if there is one, joins or tries at once: its
// call is the one that finds the entry dead, and must do what the heartbeat
// would have.
func (s *spec) toDeadline(t *rapid.T) {
	now := redisNow(s.clk.Now())
	q := readQueue(t, s.probe, lockKey+":queue", lockKey+":deadlines")
	// Live waiters push their deadlines on; only a silent one's is kept.
	live := map[string]bool{}
	for _, p := range s.procs {
		if p.phase == waiting && !p.stalled {
			live[p.entry] = true
		}
	}
	next := int64(0)
	for e, d := range q.deadlines {
		if d > now && !live[e] && (next == 0 || d < next) {
			next = d
		}
	}
	if next == 0 {
		t.Skip("no silent waiter's deadline ahead")
	}
	// In steps no longer than advance's, as wait does: a waiter woken on
	// the way acts before the clock moves on.
	for left := time.Duration(next-now+1) * time.Millisecond; left > 0; left -= maxStep {
		s.clk.Advance(min(left, maxStep))
		s.settle()
		if left > maxStep {
			s.check(t)
		}
	}
	if !slices.ContainsFunc(s.procs, func(p *proc) bool { return p.phase == idle && !p.stalled && !p.forced }) {
		return
	}
	s.check(t)
	if rapid.Bool().Draw(t, "joins") {
		s.join(t)
	} else {
		s.tryWithoutWaiting(t)
	}
}

// wait lets up to two wait timeouts pass, in full steps, checking after each.
func (s *spec) wait(t *rapid.T) {
	n := rapid.IntRange(1, int(2*waitTimeout/maxStep)).Draw(t, "steps")
	for i := 0; i < n; i++ {
		s.clk.Advance(maxStep)
		s.settle()
		s.check(t)
	}
}

// lateRetry replays a process's last final release, as go-redis does when
// the reply was lost, but late: other handles may have taken and released
// the lock since, overwriting the stored answer. It must change nothing
// (never a second release or hand-off), and answer "released" ({1}) while
// the hold's token is among the last four released; after that "not held"
// ({0}) is allowed: a false ErrLockLost, not a safety matter.
func (s *spec) lateRetry(t *rapid.T) {
	var c []*proc
	for _, p := range s.procs {
		if args, _, _ := p.releases.last(); args != nil {
			c = append(c, p)
		}
	}
	if len(c) == 0 {
		t.Skip("no final release yet")
	}
	p := rapid.SampledFrom(c).Draw(t, "handle")
	args, at, when := p.releases.last()
	before := s.inspect()
	res, err := s.probe.Do(context.Background(), args...).Result()
	if err != nil {
		t.Fatalf("replaying %s's release: %v", p.label, err)
	}
	v, ok := res.([]any)
	if !ok {
		v = []any{res} // the uncontended path's bare 1, for {1}
	}
	after := s.inspect()
	if !sameState(before, after) {
		t.Fatalf("a late retry of %s's release changed the lock: %+v / %+v, then %+v / %+v",
			p.label, before.Holder, before.Queue, after.Holder, after.Queue)
	}
	// The memory lives in the hold's key, which outlives the last hold and
	// deadline by 30 s: a real retry comes within milliseconds.
	since, age := s.finalReleases.Load()-at, s.clk.Now().Sub(when)
	if since <= 3 && age < 30*time.Second && (len(v) != 1 || v[0] != int64(1)) {
		t.Fatalf("a retry of %s's release, %v and %d later final releases after it, answered %v, want {1}", p.label, age, since, v)
	}
	if len(v) != 1 || (v[0] != int64(0) && v[0] != int64(1)) {
		t.Fatalf("a late retry of %s's release answered %v, want {1} or {0}", p.label, v)
	}
	s.settle()
}

// sameState compares what Inspect shows of two states.
func sameState(a, b fair.State) bool {
	if (a.Holder == nil) != (b.Holder == nil) {
		return false
	}
	if h, g := a.Holder, b.Holder; h != nil && (h.Owner != g.Owner || h.Token != g.Token || h.Count != g.Count ||
		h.Pending != g.Pending || h.Entry != g.Entry || h.TTL != g.TTL) {
		return false
	}
	return slices.EqualFunc(a.Queue, b.Queue, func(x, y fair.Waiter) bool {
		return x.Entry == y.Entry && x.Deadline == y.Deadline && x.Expired == y.Expired
	})
}

// releaseLog is a go-redis hook that keeps a process's last release that
// ended its hold (answered {1} or {1, 1}), to replay it as a late retry, and counts
// every such release of every process (undoing ones too: they are kept in
// the same memory of released tokens).
type releaseLog struct {
	script *transport.Script
	seq    *atomic.Int64
	clk    clock.Clock

	mu   sync.Mutex
	args []any
	at   int64     // seq after it
	when time.Time // when it ran
}

func (r *releaseLog) last() ([]any, int64, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.args, r.at, r.when
}

func (r *releaseLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *releaseLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if err != nil || !redistest.Calls(r.script, args) {
			return err
		}
		if res, ok := reply(cmd); ok {
			// {1}, or {1, 1}: ended, and handed to a waiter that keeps a
			// presence. Both note the token among the released ones.
			if len(res) >= 1 && res[0] == int64(1) {
				n := r.seq.Add(1)
				// owner, request, token, publish, channel: no request to undo.
				if len(args) == 3+3+5 {
					r.mu.Lock()
					r.args, r.at, r.when = slices.Clone(args), n, r.clk.Now()
					r.mu.Unlock()
				}
			}
		}
		return err
	}
}

func (r *releaseLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// acquired records a fresh acquisition by p.
func (s *spec) acquired(p *proc) {
	// Guarantee 2, FIFO: nobody alive who joined earlier is still waiting.
	for _, o := range s.procs {
		if o.phase == waiting && !o.wasStalled && o != p && p.phase == waiting && o.joined < p.joined {
			s.t.Fatalf("FIFO: %s (joined #%d) got the lock while %s (joined #%d) still waits", p.label, p.joined, o.label, o.joined)
		}
	}
	// Guarantee 12: no acquisition returns success without holding. (A hold
	// whose lease ran out as it was made, or that its presence could not
	// confirm, makes Lock fail with ErrLockLost instead: lockFailed.)
	tok := p.m.Token()
	if tok == 0 || isClosed(p.m.Lost()) || p.m.HoldContext().Err() != nil {
		s.t.Fatalf("%s's Lock returned success without the lock: token %d, Lost closed %v, hold's context %v",
			p.label, tok, isClosed(p.m.Lost()), context.Cause(p.m.HoldContext()))
	}
	if tok == p.forcedGrant {
		// A grant forced open before its Lock returned (it heard of its
		// hand-off while cut off, with no round trip): it learns at its
		// claim or its lease's end, as a holder forced open does, and the
		// next holder may have a greater token already.
		p.phase, p.count, p.token = holding, 1, tok
		p.forced, p.lostBy = true, p.forcedBy
		return
	}
	if tok <= s.lastToken {
		s.t.Fatalf("fencing: %s got token %d, not above the previous %d", p.label, tok, s.lastToken)
	}
	s.lastToken = tok
	p.phase, p.count, p.token = holding, 1, tok
}

// lockFailed reports, and records, a Lock of p that failed with
// ErrLockLost: it was granted, yet could not count on the hold (its lease
// ran out as the grant came back, the clock having moved past it), so it
// says why rather than return a hold already lost. Its grant is given back.
func (s *spec) lockFailed(p *proc, err error) bool {
	if !errors.Is(err, fairlock.ErrLockLost) {
		return false
	}
	p.phase = idle
	return true
}

// settle lets every background reaction finish: each live waiter has either
// returned or is asleep, no message is on its way to one (the hubs have read
// all Redis sent, and every waiter took what was delivered to it), and none
// has been handed the lock without knowing.
func (s *spec) settle() {
	deadline := time.Now().Add(10 * time.Second)
	for spins := 0; ; spins++ {
		running := 0
		for _, p := range s.procs {
			if !p.running {
				continue
			}
			select {
			case err := <-p.result:
				p.running = false
				if p.phase == crashed {
					continue // a crashed process's call fails; nobody sees it
				}
				if err != nil && (p.stalled || (p.wasStalled && errors.Is(err, redistest.ErrPartitioned))) {
					// Cut off, its call failed and could not leave the queue
					// (seen here possibly only after it was reconnected).
					p.orphans = append(p.orphans, orphan{entry: p.entry, since: p.stalledAt})
					p.phase = idle
					continue
				}
				if s.lockFailed(p, err) {
					continue
				}
				if err != nil {
					s.t.Fatalf("%s's Lock failed: %v", p.label, err)
				}
				s.acquired(p)
			default:
				running++
			}
		}
		if running == redistest.Asleep() && redistest.Unread() == 0 && redistest.Following() == 0 {
			st := s.inspect()
			if !s.grantPending(st) {
				// Every message a script publishes comes with a new
				// holder token or a new front of the queue list: if
				// neither changed since the last sync, none is in flight.
				if pub := published(st); pub != s.synced {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					redistest.SyncHubs(ctx)
					cancel()
					s.synced = pub
					continue // look again: a waiter may have woken
				}
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("waiters did not settle: %d running, %d asleep", running, redistest.Asleep())
		}
		if spins < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// published names what Redis has published so far: the holder's token and
// the front of the queue list change with every message.
func published(st fair.State) string {
	var token int64
	if st.Holder != nil {
		token = st.Holder.Token
	}
	front := ""
	if len(st.Queue) > 0 {
		front = st.Queue[0].Entry
	}
	return fmt.Sprint(token, " ", front)
}

// grantPending reports a live waiter that Redis made the holder but whose
// Lock has not returned yet (its hand-off message is on the way).
func (s *spec) grantPending(st fair.State) bool {
	h := st.Holder
	if h == nil {
		return false
	}
	for _, p := range s.procs {
		if p.label != h.Label || p.phase != waiting {
			continue
		}
		// A waiter cut off from Redis cannot claim its grant until it is
		// reconnected (resume): the grant stays pending, and its lease
		// runs out if the cut lasts. One with too little of its first
		// lease left to use unclaimed (fair/queue.go, usable) it tried to
		// claim as it heard of it, failed, and claims at its next try,
		// after its backoff, which only the clock moving brings: not on
		// the way. (One with more it takes without a round trip, cut off
		// or not.)
		if p.stalled {
			if h.TTL <= claimedFirst {
				p.cutGrant = h.Token
			}
			return false
		}
		return h.Token != p.cutGrant
	}
	return false
}

// claimedFirst is the most of a hand-off's first lease that a waiter
// claims before it uses it (fair/queue.go, usable): twice the safety margin
// of the longest first lease here (the wait timeout's, 1% plus 2 ms), and
// 1 ms of rounding.
const claimedFirst = 2*(waitTimeout/100+2*time.Millisecond) + time.Millisecond

// lostEarlySlack is how long before Redis's expiry a handle may give up its
// hold: the safety margin of the longest lease here (1% plus 2 ms), and 1 ms
// of rounding.
const lostEarlySlack = lease/100 + 3*time.Millisecond

// check runs after every step: each property is named after its guarantee.
func (s *spec) check(t *rapid.T) {
	now := s.clk.Now()
	// Unlocking a hold its handle lost does not reach Redis: st stays true
	// through the loop below.
	st := s.inspect()

	// A hold is lost only by a process that was cut off from Redis, when
	// its fixed lease ran out, or after another handle forced it open; never
	// while Redis still keeps it for longer than the safety margin. Its
	// Unlock then says so. A forced-out holder sees Lost by its next renewal.
	for _, p := range s.procs {
		if p.phase != holding {
			continue
		}
		select {
		case <-p.m.Lost():
		default:
			if p.forced && now.After(p.lostBy) {
				t.Fatalf("ForceUnlock: %s's hold was forced open, and its Lost is still open %v after its next renewal was due",
					p.label, now.Sub(p.lostBy))
			}
			continue
		}
		if !p.wasStalled && p.fixed == 0 && !p.forced {
			t.Fatalf("%s lost a hold that its watchdog kept alive", p.label)
		}
		if h := st.Holder; h != nil && h.Token == p.token && h.TTL > lostEarlySlack && !p.jeopardy {
			t.Fatalf("%s's Lost is closed while Redis keeps its hold for %v more", p.label, h.TTL)
		}
		if p.stalled {
			continue // it cannot even tell Redis yet
		}
		if err := p.m.Unlock(context.Background()); !errors.Is(err, fairlock.ErrLockLost) {
			t.Fatalf("Unlock of %s's lost hold = %v, want ErrLockLost", p.label, err)
		}
		p.phase, p.count, p.lostToken, p.forced, p.jeopardy = idle, 0, p.token, false, false
	}
	// Messages, heads and tidiness, as Redis shows them.
	raw := s.ledger.check(t, s.probe, now)

	// Guarantee 6: a hand-off is claimed (made a full hold) halfway through
	// its first lease, by a holder that can reach Redis.
	if field(raw, "e") != "" && st.Holder != nil {
		g, x := number(raw, "g"), number(raw, "x")
		for _, p := range s.procs {
			if p.label == st.Holder.Label && p.phase == holding && !p.stalled && !p.wasStalled && !p.forced &&
				redisNow(now) > g+(x-g)/2+1 {
				t.Fatalf("hand-off: %s's hold, granted at %d until %d, is still not claimed at %d", p.label, g, x, redisNow(now))
			}
		}
	}

	// Guarantee 1, mutual exclusion: at most one handle believes it holds
	// the lock, and Redis agrees with it, hold count included.
	var holders []*proc
	for _, p := range s.procs {
		if p.phase == holding && !p.forced && !isClosed(p.m.Lost()) {
			if !p.hidden.IsZero() {
				// Its presence was dropped where it could not hear of it
				// (hide): another may hold the lock meanwhile, with a
				// greater token.
				if h := st.Holder; h != nil && h.Token != p.token && h.Token <= p.token {
					t.Fatalf("fencing: %s holds token %d while %s, whose presence was dropped unheard, believes in %d",
						h.Label, h.Token, p.label, p.token)
				}
				continue
			}
			holders = append(holders, p)
		}
	}
	if len(holders) > 1 {
		t.Fatalf("mutual exclusion: %s and %s both hold the lock", holders[0].label, holders[1].label)
	}
	if len(holders) == 1 {
		p := holders[0]
		if st.Holder == nil || st.Holder.Label != p.label || st.Holder.Count != p.count {
			t.Fatalf("mutual exclusion: %s holds %d times, Redis says %+v", p.label, p.count, st.Holder)
		}
	}
	if st.Holder != nil && st.Holder.Token < s.lastToken {
		t.Fatalf("fencing: the holder's token %d is below one already issued, %d", st.Holder.Token, s.lastToken)
	}

	// Guarantee 2, FIFO: live waiters are queued in join order, each at the
	// place it first got. Guarantee 4, second half: a waiter that was cut
	// off for longer than its wait timeout may have lost its place; it then
	// re-joins at the tail.
	var live []*proc
	for _, p := range s.procs {
		if p.phase == waiting && !p.stalled {
			live = append(live, p)
		}
	}
	listed := map[*proc]bool{}
	var queued []string
	for _, w := range st.Queue {
		for _, p := range s.procs {
			if p.label == w.Label && w.Expired && w.Entry == p.entry {
				p.entryDied = true
			}
		}
		for _, p := range live {
			if p.label != w.Label || w.Expired || p.isOrphan(w.Entry) {
				continue
			}
			if p.entry == w.Entry && p.entryDied {
				t.Fatalf("eviction: %s's entry %s was past its deadline, and is a live waiter again: it lost its place, and must re-join at the tail",
					p.label, w.Entry)
			}
			listed[p] = true
			queued = append(queued, p.label)
			switch {
			case p.entry == "":
				p.entry = w.Entry
			case p.entry != w.Entry && !p.wasStalled:
				t.Fatalf("FIFO: live waiter %s lost its place (entry %s became %s)", p.label, p.entry, w.Entry)
			case p.entry != w.Entry:
				// Evicted during its stall, it re-joined: from now on it
				// counts from the tail.
				s.joins++
				p.joined, p.entry, p.wasStalled, p.entryDied = s.joins, w.Entry, false, false
			}
		}
	}
	slices.SortFunc(live, func(a, b *proc) int { return a.joined - b.joined })
	var want []string
	for _, p := range live {
		if p.wasStalled && !listed[p] {
			continue // evicted during its stall; its re-join is on the way
		}
		want = append(want, p.label)
	}
	if !slices.Equal(queued, want) {
		t.Fatalf("FIFO: live waiters queued as %v, want join order %v (queue %+v)", queued, want, st.Queue)
	}

	// Guarantee 4, eviction: a waiter cut off from Redis (stalled, or
	// crashed) stops counting by its deadline, at most one wait timeout
	// after it fell silent, and a grant handed to it ends by then too; a
	// crashed holder's lease runs out. Guarantee 5: an entry a waiter could
	// not remove when it gave up is gone within one wait timeout.
	for _, p := range s.procs {
		if p.stalled && p.phase == waiting && now.Sub(p.stalledAt) >= waitTimeout {
			for _, w := range st.Queue {
				if w.Entry == p.entry && !w.Expired {
					t.Fatalf("eviction: %s, cut off for %v, is still a live waiter", p.label, now.Sub(p.stalledAt))
				}
			}
			if st.Holder != nil && st.Holder.Label == p.label {
				t.Fatalf("eviction: %s, cut off for %v, still holds a grant", p.label, now.Sub(p.stalledAt))
			}
		}
		kept := p.orphans[:0]
		for _, o := range p.orphans {
			if now.Sub(o.since) < waitTimeout {
				kept = append(kept, o)
				continue
			}
			for _, w := range st.Queue {
				if w.Entry == o.entry && !w.Expired {
					t.Fatalf("giving up: %s's entry, left behind while cut off, is still live %v later", p.label, now.Sub(o.since))
				}
			}
		}
		p.orphans = kept
	}
	for _, p := range s.procs {
		if p.phase != crashed {
			continue
		}
		silent := now.Sub(p.crashedAt)
		if p.crashedPhase == waiting && silent >= waitTimeout {
			for _, w := range st.Queue {
				if w.Label == p.label && !w.Expired {
					t.Fatalf("eviction: %s, silent for %v, is still a live waiter", p.label, silent)
				}
			}
			if st.Holder != nil && st.Holder.Label == p.label {
				t.Fatalf("eviction: %s, silent for %v, still holds a grant", p.label, silent)
			}
		}
		if p.crashedPhase == holding && silent >= lease && st.Holder != nil && st.Holder.Label == p.label {
			t.Fatalf("lease: %s crashed %v ago and still holds the lock", p.label, silent)
		}
	}

	// Presence (fairlock.WithPresence): a process that kept a presence and
	// crashed holding the lock loses it once it has been gone for the grace,
	// to a live head that waits: within the grace and two polls of the later
	// of the crash and that waiter becoming head, and one step.
	head := ""
	for _, w := range st.Queue {
		if !w.Expired {
			head = w.Entry
			break
		}
	}
	if head != s.head {
		s.head, s.headSince = head, now
	}
	for _, p := range s.procs {
		since, gone := p.presenceGoneSince()
		if !gone || st.Holder == nil || st.Holder.Label != p.label || st.Holder.Token != p.token {
			continue
		}
		for _, h := range live {
			if h.entry != head || h.wasStalled {
				continue
			}
			from := since
			if s.headSince.After(from) {
				from = s.headSince
			}
			if d := now.Sub(from); d > core.PresenceGrace+2*core.PresencePoll+maxStep {
				t.Fatalf("presence: %s's presence is gone for %v and it held the lock, and %s, the live head for %v, still waits",
					p.label, now.Sub(since), h.label, now.Sub(s.headSince))
			}
		}
	}

	// Presence, waiters: the entries of processes that kept a presence and
	// crashed are passed over. The first live waiter with only such entries
	// ahead of it, on a lock free or held by such a process, holds the lock
	// within its next heartbeat (which finds them gone, if no look has),
	// the grace, two polls and one step of that becoming so.
	passer, blocked := "", false
	if st.Holder == nil || s.crashedWithPresence(st.Holder.Label) {
		blocked = st.Holder != nil
		for _, w := range st.Queue {
			if w.Expired {
				continue
			}
			if s.crashedWithPresence(w.Label) {
				blocked = true
				continue
			}
			for _, p := range live {
				if p.entry == w.Entry && !p.wasStalled && p.hidden.IsZero() {
					passer = w.Entry
				}
			}
			break
		}
	}
	if !blocked || passer == "" {
		s.passer = ""
	} else if passer != s.passer {
		s.passer, s.passerSince = passer, now
	} else if d := now.Sub(s.passerSince); d > heartbeat+core.PresenceGrace+2*core.PresencePoll+maxStep {
		t.Fatalf("presence: %s has waited %v behind the crashed that kept a presence (holder %+v, queue %+v)",
			passer, d, st.Holder, st.Queue)
	}

	// Guarantee 6, hand-off: a free lock never keeps a live waiter waiting
	// longer than one heartbeat (the fallback that covers lost messages).
	if st.Holder == nil && len(live) > 0 {
		if s.freeSince.IsZero() {
			s.freeSince = now
		} else if d := now.Sub(s.freeSince); d > heartbeat+maxStep {
			t.Fatalf("hand-off: the lock has been free for %v while %s waits", d, live[0].label)
		}
	} else {
		s.freeSince = time.Time{}
	}

	// Guarantee 6, progress after a lease ends: when a hold ends because its
	// lease ran out (a fixed lease, a holder that crashed or was cut off, a
	// grant never claimed), no message says so; the live waiter that was at the front of
	// the queue while it was held must hold the lock within leaseEndSlack of
	// the hold's end, not a heartbeat later.
	if st.Holder != nil {
		s.holdEnds, s.headThen = now.Add(st.Holder.TTL), ""
		if len(st.Queue) > 0 && !st.Queue[0].Expired {
			s.headThen = st.Queue[0].Entry
		}
	} else if s.headThen != "" && now.Sub(s.holdEnds) > leaseEndSlack &&
		len(st.Queue) > 0 && st.Queue[0].Entry == s.headThen {
		for _, p := range live {
			if p.entry == s.headThen && !p.wasStalled {
				t.Fatalf("progress after a lease ends: the hold ended %v ago and %s, at the head of the queue since before, still waits",
					now.Sub(s.holdEnds), p.label)
			}
		}
	}

	// Guarantee 8, nothing leaks: every key carries a TTL.
	for _, k := range s.mr.Keys() {
		if s.mr.TTL(k) <= 0 {
			t.Fatalf("leak: key %s has no TTL", k)
		}
	}

	// Guarantee 9, no rescues without faults: a process that was never cut
	// off from Redis (nor crashed) learns of every turn from its message.
	for _, p := range s.procs {
		n := p.rec.QueueEvents(observe.Rescued)
		if n > p.rescues && !p.everCut && p.phase != crashed {
			t.Fatalf("no rescues: %s, never cut off from Redis, learned of its turn from a fallback, not from its message", p.label)
		}
		p.rescues = n
	}
}

func (p *proc) isOrphan(entry string) bool {
	return slices.ContainsFunc(p.orphans, func(o orphan) bool { return o.entry == entry })
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// finish ends every hold and wait, then lets time pass: no key may be left.
func (s *spec) finish() {
	for _, p := range s.procs {
		p.cut.On.Store(false)
		p.stalled = false
		p.muffle.Release()
	}
	for _, p := range s.procs {
		if p.running {
			p.cancel()
			err := <-p.result
			p.running = false
			if err == nil && p.phase == waiting {
				// Granted just before giving up, as in giveUp: it holds the
				// lock, and is unlocked below.
				p.phase, p.count = holding, 1
			}
		}
	}
	for _, p := range s.procs {
		if p.phase == holding {
			for p.m.Unlock(context.Background()) == nil {
			}
		}
	}
	noKeysAfterAMinute(s.t, s.clk, s.mr)
}

// noKeysAfterAMinute lets a minute pass once every hold and wait has ended:
// every key must have expired by then.
//
// A call that runs on after its caller stopped waiting (a release or a leave
// in the background: core.Bounded) is a client not yet gone. It ends within
// the cleanup timeout, in real time, however the fake clock moves; until
// then it may write (a hold written afresh, with a TTL), so the minute
// starts once none is left. The clock moves on meanwhile, a little at a
// time, for its retries' pauses. (CI's RW lock specification failed so: a
// background call was counted through the whole minute, and the gate's
// hold was written again 45 s into it.)
func noKeysAfterAMinute(t *rapid.T, clk *clock.Fake, mr *miniredis.Miniredis) {
	bound := time.Now().Add(core.DefaultCleanupTimeout + time.Second)
	for redistest.Background() > 0 {
		if time.Now().After(bound) {
			t.Fatalf("%d calls still running in the background %v after every hold and wait ended, past the cleanup timeout",
				redistest.Background(), core.DefaultCleanupTimeout+time.Second)
		}
		clk.Advance(10 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	for i := 0; i < 60; i++ {
		clk.Advance(time.Second)
	}
	if keys := redistest.LockKeys(mr); len(keys) != 0 {
		var left []string
		for _, k := range keys {
			v, _ := mr.Get(k) // empty for a list or a sorted set
			left = append(left, fmt.Sprintf("%s (ttl %v) %s", k, mr.TTL(k), v))
		}
		t.Fatalf("leak: keys left a minute after every client was gone: %s", strings.Join(left, "; "))
	}
}

func (s *spec) close() {
	for _, p := range s.procs {
		if p.running {
			p.cancel()
			<-p.result
		}
		_ = p.client.Close()
	}
	s.ledger.close()
	_ = s.probe.Close()
	s.mr.Close()
	redistest.CloseOwners() // or every later check's SyncHubs looks at this one's too
}

// fairLockSpec is the property: any sequence of actions keeps every guarantee.
func fairLockSpec(scripts *lua.Scripts) func(*rapid.T) {
	return fairLockSpecOf(scripts, true, 0, false)
}

// fairLockPresenceSpec is fairLockSpec with two of the five processes
// keeping a presence (fairlock.WithPresence), and the blip action.
func fairLockPresenceSpec(scripts *lua.Scripts) func(*rapid.T) {
	return fairLockSpecOf(scripts, true, 2, false)
}

// fairLockHiddenDropSpec is fairLockPresenceSpec with the hide and
// breakFor actions too: the holder's connection faults that it may not
// ride out.
// (A machine of its own: the mutation test's witness seeds of
// fairLockPresenceSpec stay as they were found.)
func fairLockHiddenDropSpec(scripts *lua.Scripts) func(*rapid.T) {
	return fairLockSpecOf(scripts, true, 2, true)
}

// fairLockSpecOf is fairLockSpec, with its fault actions (crashes, cuts from
// Redis, late retries) or without them: without, nobody may be rescued;
// present of its processes keep a presence; with hide, a holder's
// connections may be dropped on the server's side alone.
func fairLockSpecOf(scripts *lua.Scripts, faults bool, present int, hide bool) func(*rapid.T) {
	return func(t *rapid.T) {
		s := newSpec(t, scripts, present)
		defer s.close()
		s.t = t
		actions := map[string]func(*rapid.T){
			"join":              s.join,
			"tryWithoutWaiting": s.tryWithoutWaiting,
			"reenter":           s.reenter,
			"unlock":            s.unlock,
			"forceUnlock":       s.forceUnlock,
			"giveUp":            s.giveUp,
			"advance":           s.advance,
			"toDeadline":        s.toDeadline,
			"wait":              s.wait,
			"":                  s.check,
		}
		if faults {
			actions["crash"] = s.crash
			actions["stall"] = s.stall
			actions["stallHead"] = s.stallHead
			actions["stallFor"] = s.stallFor
			actions["resume"] = s.resume
			actions["lateRetry"] = s.lateRetry
		}
		if faults && present > 0 {
			actions["blip"] = s.blip
		}
		if faults && present > 0 && hide {
			actions["hide"] = s.hide
			actions["breakFor"] = s.breakFor
		}
		t.Repeat(actions)
		s.finish()
		if !faults {
			for _, p := range s.procs {
				if p.rescues != 0 {
					t.Fatalf("no rescues: %s was rescued %d times in a run without faults", p.label, p.rescues)
				}
			}
		}
	}
}

func TestFairLockSpecification(t *testing.T) {
	checkWith(t, 1000, fairLockSpec(lua.Default()))
}

// The fair lock's specification with two processes that keep a presence
// (fairlock.WithPresence), whose crashes end their holds within the grace
// and whose connections break (blip). It runs 300 checks: while such a
// process holds and another waits, the head looks every 50 ms of the fake
// clock, which makes each check about three times as long as the plain
// machine's; everything else it checks, the plain machine checks too.
func TestFairLockSpecificationWithPresence(t *testing.T) {
	checkWith(t, 300, fairLockPresenceSpec(lua.Default()))
}

// The same, with a holder's connections dropped on the server's side while
// it is cut off and cannot hear of it (hide): the one case in which two
// handles may believe they hold at once, bounded by the fencing token; and
// with breaks that it hears of and that may outlast the grace (breakFor):
// it must stop believing before anyone else holds. 60 checks, without
// -race (checkWithoutRace): it adds two actions to the machine above.
func TestFairLockSpecificationWithHiddenDrops(t *testing.T) {
	checkWithoutRace(t, 60, fairLockHiddenDropSpec(lua.Default()))
}

// The fair lock's specification with its fault actions off: every turn of
// every waiter is learned from its message (guarantee 9). It runs 300
// checks: it draws from fewer actions, and its one extra property (no
// rescues) is checked by the full machine too, for processes never cut off.
func TestFairLockSpecificationWithoutFaults(t *testing.T) {
	checkWith(t, 300, fairLockSpecOf(lua.Default(), false, 0, false))
}

// checkWithoutRace is checkWith for a variant of a specification whose Go
// paths another specification drives under -race already: under -race it
// is skipped, and .ci/run's Specification step runs it in full without.
// What it adds is more histories of the scripts, which run in Redis, where
// the race detector sees nothing (the presence variants of the semaphore
// and the RW lock, and the hidden drops, would add about 75 s to the root
// package's run under -race on 2 cores).
func checkWithoutRace(t *testing.T, n int, prop func(*rapid.T)) {
	if raceEnabled {
		t.Skip("its Go paths run under -race in another specification; in full: go test -count=1 -run Specification .")
	}
	checkWith(t, n, prop)
}

// checkWith checks prop with n checks (a quarter of them under -race),
// unless the run says how many (checksGiven), and then that no goroutine
// outlived it.
//
// Under -race a specification runs a quarter of its checks. The race
// detector watches the library's Go code, whose paths a quarter of the
// checks runs many times over; most of what the other three quarters add
// is more histories of the scripts, which run in Redis, where the detector
// sees nothing, at about 3 times the cost (the specifications took 11 to
// 12 of the root package's minutes under -race on 2 cores). .ci/run runs
// every specification in full without -race, beside the mutation test:
//
//	go test -count=1 -run Specification .
func checkWith(t *testing.T, n int, prop func(*rapid.T)) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	if !checksGiven {
		if raceEnabled {
			n = max(1, n/4)
		}
		old := flag.Lookup("rapid.checks").Value.String()
		_ = flag.Set("rapid.checks", strconv.Itoa(n))
		defer flag.Set("rapid.checks", old)
	}
	rapid.Check(t, prop)
}
