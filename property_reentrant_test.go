package fairlock_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"
)

// The reentrant lock's waiters specification. The reentrant lock is not
// fair: any caller may take a free lock. But its waiters are known to Redis
// (reentrant_acquire.lua), and each time the lock is freed (the last
// Unlock, ForceUnlock, or the leave of the waiter the last wake-up went to)
// exactly one of them is woken, in its own client's inbox: the
// longest-waiting live one. This property drives the scripts directly and
// checks, after every step, against a model:
//
//   - the lock is held by the model's holder, or free (mutual exclusion;
//     a lease that runs out frees it);
//   - a step that frees the lock publishes one note, "<waiter> freed", to
//     the inbox of that waiter's client ("<channel>:<client>"), for the
//     longest-waiting waiter whose deadline has not passed, or nothing when
//     no waiter is live; every other step publishes nothing;
//   - a woken waiter that a barger beat to the lock stays first: the next
//     wake-up is its again;
//   - a waiter's try pushes its deadline forward; a waiter that took the
//     lock or left is never woken;
//   - a fresh hold reports freed (a lost wake-up: its timer should have
//     been beaten by the message) exactly when the last wake-up went to the
//     waiter that took it and no token was issued since;
//   - every key of the lock has a TTL.
//
// A waiter whose deadline passed is taken for dead: the model never makes
// it try again (a live client's tries keep its deadline ahead).
//
// With presence (TestReentrantSpecificationWithPresence), client cb keeps a
// presence (its id ends in "~") that the property drops and brings back
// ("drop", "back": a process that dies, a blip seen by the scripts). Then
// also:
//
//   - a hold of cb's is ended by another handle's try (a TryLock or a
//     waiter's), which takes the lock, exactly when cb's presence has been
//     gone for the grace, counted from the first try that found it gone and
//     forgotten by one that finds it back (or by a new hold); never while
//     it is there;
//   - while cb holds, the longest-waiting live waiter whose client is there
//     (a waiter that tries is) is told to try again within the poll (at the
//     grace's end once the holder's absence was seen), never after the
//     hold's expiry, and every other try is told the expiry;
//   - a waiter of cb's is passed over by a wake-up, and loses its place to
//     a look for the waiter that polls, once cb's presence has been gone
//     for the grace, counted from the first look at a waiter that found it
//     gone (a record of its own, forgotten by a look that finds cb back,
//     and counted afresh once a minute old); gone for less, it is woken
//     with the first waiter behind it whose client is there;
//   - a last release answers that its owner should look again a poll later
//     exactly when it woke a waiter of cb's and no look an earlier release
//     asked for is due (one is due a poll after it was asked for); that look (reentrant_watch.lua)
//     wakes again as a release would while the lock is free and the woken
//     waiter's client is gone, and tells the waiter that should poll a hold
//     of cb's to try.

const (
	reentrantSpecLease = 2 * time.Second
	reentrantSpecWait  = 3 * time.Second
	reentrantSpecBase  = "fairlock:r:{spec}"
)

type reentrantHandle struct {
	owner  string // "<client>.<handle>"
	joins  int
	waiter string // its waiter id while it waits, "" otherwise
	count  int    // its hold's count (0: none)
	token  int64
	reqs   int
}

type reentrantSpec struct {
	t       *rapid.T
	mr      *miniredis.Miniredis
	clk     *clock.Fake
	c       *redis.Client
	scripts *lua.Scripts
	keys    []string
	handles []*reentrantHandle
	log     *miniLog // what the scripts publish

	holder  *reentrantHandle // the model's holder, nil if free
	expires time.Time        // its hold's expiry
	// The waiters in arrival order, and the deadline of each that has not
	// taken the lock or left (a waiter without one is a tombstone).
	order     []string
	deadlines map[string]time.Time
	woken     string    // the waiter the last wake-up went to, until a token is issued
	horizon   time.Time // every deadline ever written is before it (hold.lua's h)
	watchDue  time.Time // when the look a release last asked for is due (wt)

	// Presence: cb's subscription while it is there (nil: gone, or no
	// client keeps one), and when a try first found it gone while cb held
	// (zero: not seen, or forgotten).
	presence    bool
	presenceSub *miniredis.Subscriber // cb's, subscribed to its presence channel while there
	there       bool
	absentSince time.Time
	// When a look at a waiter of cb's first found cb's presence gone (zero:
	// not seen, or forgotten): queue.lua's wa, a record apart from the
	// holder's.
	waiterAbsentSince time.Time
	// caller is the owner id of the script call being modelled ("" for a
	// call with none: the watch, ForceUnlock).
	caller string
}

// reentrantPresenceClient is the client that keeps a presence in
// TestReentrantSpecificationWithPresence.
const reentrantPresenceClient = "cb" + transport.PresenceMark

// keepsPresence reports whether hd's client keeps a presence.
func (s *reentrantSpec) keepsPresence(hd *reentrantHandle) bool {
	return s.keepsPresenceID(hd.owner)
}

// drop ends cb's presence subscription, as its process's death does.
func (s *reentrantSpec) drop(t *rapid.T) {
	if !s.there {
		t.Skip("cb's presence is gone already")
	}
	s.presenceSub.Unsubscribe(transport.PresenceChannel(reentrantPresenceClient))
	s.there = false
}

// back subscribes cb's presence again.
func (s *reentrantSpec) back(t *rapid.T) {
	if s.there {
		t.Skip("cb's presence is there")
	}
	s.presenceSub.Subscribe(transport.PresenceChannel(reentrantPresenceClient))
	s.there = true
}

// lookAtHolder is the model of another handle's try looking at a holder
// that keeps a presence: it reports whether the hold ends (its presence
// gone for the grace), and records or forgets the absence.
func (s *reentrantSpec) lookAtHolder() bool {
	if s.holder == nil || !s.keepsPresence(s.holder) || !s.callerCounts() {
		return false
	}
	switch {
	case s.there:
		s.absentSince = time.Time{}
	case s.absentSince.IsZero():
		s.absentSince = s.now()
	case s.now().Sub(s.absentSince) >= core.PresenceGrace:
		s.holder.count = 0
		s.holder = nil
		s.absentSince = time.Time{}
		return true
	}
	return false
}

// callerCounts reports whether the script the model runs now counts an
// absence (queue.lua's absence_counts): only where its caller's own
// subscription is, if its caller keeps one (cb's: while cb is there).
func (s *reentrantSpec) callerCounts() bool { return !s.keepsPresenceID(s.caller) || s.there }

// lookAtWaiter is the model of a look at the presence of waiter id's client
// (queue.lua's waiter_absent_since): whether it is gone, and since when.
func (s *reentrantSpec) lookAtWaiter(id string) (time.Time, bool) {
	if !s.keepsPresenceID(id) || !s.callerCounts() {
		return time.Time{}, false
	}
	if s.there {
		s.waiterAbsentSince = time.Time{}
		return time.Time{}, false
	}
	if s.waiterAbsentSince.IsZero() || s.now().Sub(s.waiterAbsentSince) > time.Minute {
		s.waiterAbsentSince = s.now()
	}
	return s.waiterAbsentSince, true
}

// live reports whether waiter id has a deadline that has not passed.
func (s *reentrantSpec) live(id string) bool {
	d, ok := s.deadlines[id]
	return ok && d.After(s.now())
}

// passOver drops waiter id's deadline: its client's presence has been gone
// for the grace, and its handle (dead) never tries again.
func (s *reentrantSpec) passOver(id string) {
	delete(s.deadlines, id)
	for _, hd := range s.handles {
		if hd.waiter == id {
			hd.waiter = ""
		}
	}
}

// firstPresentWaiter is the model's longest-waiting live waiter whose
// client is there (caller, which tries, is), among the first 16 elements
// of the list, passing over on the way those of cb's gone for the grace
// ("" if none).
func (s *reentrantSpec) firstPresentWaiter(caller string) string {
	for _, id := range s.order[:min(len(s.order), 16)] {
		if !s.live(id) {
			continue
		}
		if id == caller {
			return id
		}
		since, absent := s.lookAtWaiter(id)
		if !absent {
			return id
		}
		if s.now().Sub(since) >= core.PresenceGrace {
			s.passOver(id)
		}
	}
	return ""
}

func (s *reentrantSpec) now() time.Time { return s.clk.Now() }

// free drops a hold whose lease ran out: the lock is free, and its holder
// (lost) holds nothing.
func (s *reentrantSpec) free() {
	if s.holder != nil && !s.expires.After(s.now()) {
		s.holder.count = 0
		s.holder = nil
		s.absentSince = time.Time{}
	}
	for _, hd := range s.handles {
		if d, ok := s.deadlines[hd.waiter]; ok && !d.After(s.now()) {
			hd.waiter = "" // dead: it never tries again
		}
	}
}

// wake is the model's wake-up: the longest-waiting live waiter, dead ones
// ahead of it dropped for good, and those of cb's passed over once cb has
// been gone for the grace; "" if none. With it, the waiter woken too: while
// the one woken is cb's and cb has been gone for less than the grace, the
// first live waiter behind it, among the next 8 elements, whose client is
// there ("" if none, or not so). Nothing is read once the horizon passed.
func (s *reentrantSpec) wake() (string, string) {
	if !s.horizon.After(s.now()) {
		return "", ""
	}
	for len(s.order) > 0 {
		id := s.order[0]
		if !s.live(id) {
			s.order = s.order[1:]
			delete(s.deadlines, id)
			continue
		}
		since, absent := s.lookAtWaiter(id)
		if !absent {
			s.woken = id
			return id, ""
		}
		if s.now().Sub(since) < core.PresenceGrace {
			s.woken = id
			for _, e := range s.order[1:min(len(s.order), 9)] {
				if !s.live(e) {
					continue
				}
				gone, absent := s.lookAtWaiter(e)
				if !absent {
					return id, e
				}
				if s.now().Sub(gone) >= core.PresenceGrace {
					s.passOver(e)
				}
			}
			return id, ""
		}
		s.order = s.order[1:]
		s.passOver(id)
	}
	return "", ""
}

func (s *reentrantSpec) call(sc *transport.Script, args ...any) []int64 {
	return runInts(s.t, sc, s.c, s.keys, args...)
}

// published returns the notes published since the last call, as
// "<channel> <payload>", in order.
func (s *reentrantSpec) published() []string {
	var got []string
	for _, m := range s.log.take(s.t) {
		got = append(got, m.Channel+" "+m.Message)
	}
	return got
}

// expectWake checks that the step published the wake-up of waiters (""s
// skipped; none: nothing), as publish_notes does: one message per client,
// its notes in order.
func (s *reentrantSpec) expectWake(what string, waiters ...string) {
	got := s.published()
	var want, clients []string
	by := map[string][]string{}
	for _, w := range waiters {
		if w == "" {
			continue
		}
		client, _, _ := strings.Cut(w, ".")
		if by[client] == nil {
			clients = append(clients, client)
		}
		by[client] = append(by[client], w+" freed")
	}
	for _, client := range clients {
		want = append(want, reentrantSpecBase+":wake:"+client+" "+strings.Join(by[client], ";"))
	}
	if !slices.Equal(got, want) {
		s.t.Fatalf("%s published %q, want %q (waiters in order: %v)", what, got, want, s.orderIDs())
	}
}

func (s *reentrantSpec) orderIDs() []string {
	var ids []string
	for _, id := range s.order {
		if d, ok := s.deadlines[id]; ok {
			ids = append(ids, fmt.Sprintf("%s(until %v)", id, d.Sub(redistest.Epoch)))
		} else {
			ids = append(ids, id+"(gone)")
		}
	}
	return ids
}

func (s *reentrantSpec) req(hd *reentrantHandle) string {
	hd.reqs++
	return fmt.Sprintf("%s#%d", hd.owner, hd.reqs)
}

// acquire is one try of hd: a TryLock that never waits (waiter ""), or a
// waiter's try (its first, or one a wake-up or its timer prompted).
func (s *reentrantSpec) acquire(t *rapid.T, hd *reentrantHandle, waits bool) {
	s.caller = hd.owner
	a := transport.ReentrantAcquire{Owner: hd.owner, Request: s.req(hd), Lease: reentrantSpecLease.Milliseconds()}
	ask := rapid.Bool().Draw(t, "ask freed")
	if waits {
		if hd.waiter == "" {
			hd.joins++
			hd.waiter = fmt.Sprintf("%s/%d", hd.owner, hd.joins)
		}
		a.Waiter, a.Wait, a.AskFreed = hd.waiter, reentrantSpecWait.Milliseconds(), ask
	}
	r := s.call(s.scripts.ReentrantAcquire, a.Args()...)
	if s.holder != hd && s.lookAtHolder() && r[0] != 1 {
		t.Fatalf("%s's try, the grace (%v) after a try first found cb's presence gone: %v, want the lock", hd.owner,
			core.PresenceGrace, r)
	}
	switch s.holder {
	case nil:
		if r[0] != 1 {
			t.Fatalf("%s's try of a free lock: %v", hd.owner, r)
		}
		wantFreed := waits && ask && s.woken == hd.waiter
		if got := len(r) >= 3 && r[2] == 1; got != wantFreed {
			t.Fatalf("%s took the lock with freed=%v, want %v (last wake-up to %q)", hd.waiter, got, wantFreed, s.woken)
		}
		if waits && s.woken == hd.waiter {
			s.order = s.order[1:] // the woken waiter is the list's head, popped
		}
		s.woken = ""
		s.holder, hd.count, hd.token = hd, 1, r[1]
		s.expires = s.now().Add(reentrantSpecLease)
		s.absentSince = time.Time{}
		s.leaveOrder(hd)
	case hd:
		if r[0] != 1 || r[1] != hd.token {
			t.Fatalf("%s's re-entry: %v, want its token %d", hd.owner, r, hd.token)
		}
		hd.count++
		if e := s.now().Add(reentrantSpecLease); e.After(s.expires) {
			s.expires = e
		}
		s.leaveOrder(hd)
	default:
		if r[0] != 0 {
			t.Fatalf("%s took a lock %s holds: %v", hd.owner, s.holder.owner, r)
		}
		if waits {
			if _, ok := s.deadlines[hd.waiter]; !ok {
				s.order = append(s.order, hd.waiter)
			}
			s.deadlines[hd.waiter] = s.now().Add(reentrantSpecWait)
			if d := s.now().Add(reentrantSpecWait); d.After(s.horizon) {
				s.horizon = d.Add(10 * time.Second) // hold.lua's SLACK_MS
			}
		}
		// When to try again: the hold's expiry; within the poll for the
		// longest-waiting live waiter whose client is there while the
		// holder keeps a presence.
		want := s.expires
		if waits && s.keepsPresence(s.holder) && s.firstPresentWaiter(hd.waiter) == hd.waiter {
			at := s.now().Add(core.PresencePoll)
			if !s.absentSince.IsZero() {
				// At the grace's end, or at once (1 ms) if it is over:
				// a caller whose own presence is gone counts no absence
				// (callerCounts), and finds the grace over.
				at = maxTime(s.absentSince.Add(core.PresenceGrace), s.now().Add(time.Millisecond))
			}
			if at.Before(want) {
				want = at
			}
		}
		if got := time.Duration(r[1]) * time.Millisecond; got != want.Sub(s.now()) {
			t.Fatalf("%s's try, %s holding until %v, presence %v (absent since %v): told to try again in %v, want %v",
				hd.owner, s.holder.owner, s.expires.Sub(redistest.Epoch), s.there, s.absentSince, got, want.Sub(s.now()))
		}
	}
	s.expectWake(hd.owner+"'s try", "")
}

// leaveOrder: hd took the lock or left; its waiter is a tombstone.
func (s *reentrantSpec) leaveOrder(hd *reentrantHandle) {
	delete(s.deadlines, hd.waiter)
	hd.waiter = ""
}

func (s *reentrantSpec) pick(t *rapid.T, ok func(*reentrantHandle) bool) *reentrantHandle {
	return pickWhere(t, s.handles, ok, "handle")
}

func (s *reentrantSpec) tryLock(t *rapid.T) {
	s.acquire(t, s.pick(t, func(hd *reentrantHandle) bool { return hd.waiter == "" }), false)
}

func (s *reentrantSpec) join(t *rapid.T) {
	s.acquire(t, s.pick(t, func(hd *reentrantHandle) bool { return hd.waiter == "" }), true)
}

func (s *reentrantSpec) waiterTries(t *rapid.T) {
	s.acquire(t, s.pick(t, func(hd *reentrantHandle) bool { return hd.waiter != "" }), true)
}

func (s *reentrantSpec) unlock(t *rapid.T) {
	hd := s.pick(t, func(hd *reentrantHandle) bool { return hd.count > 0 })
	s.caller = hd.owner
	r := s.call(s.scripts.ReentrantRelease, hd.owner, s.req(hd), hd.token, "PUBLISH", reentrantSpecBase+":wake")
	hd.count--
	if hd.count > 0 {
		if r[0] != 2 {
			t.Fatalf("%s's release of a re-entered hold: %v, want {2}", hd.owner, r)
		}
		s.expectWake(hd.owner+"'s inner release", "")
		return
	}
	s.holder, s.absentSince = nil, time.Time{}
	woken, also := s.wake()
	if want := []int64{1}; woken != "" && s.keepsPresenceID(woken) && !s.watchDue.After(s.now()) {
		if !slices.Equal(r, []int64{1, 1}) {
			t.Fatalf("%s's last release, waking %s: %v, want {1, 1} (look again)", hd.owner, woken, r)
		}
		s.watchDue = s.now().Add(core.PresencePoll)
	} else if !slices.Equal(r, want) {
		t.Fatalf("%s's last release, waking %q (a look due at %v): %v, want %v", hd.owner, woken, s.watchDue.Sub(redistest.Epoch), r, want)
	}
	s.expectWake(hd.owner+"'s last release", woken, also)
}

// keepsPresenceID reports whether the client of waiter or hold id keeps a
// presence.
func (s *reentrantSpec) keepsPresenceID(id string) bool {
	return s.presence && strings.HasPrefix(id, reentrantPresenceClient+".")
}

// watch is the releasing owner's look a poll after a release that woke a
// waiter of cb's (reentrant_watch.lua); the property may make it at any
// time: it is safe whenever it runs.
func (s *reentrantSpec) watch(t *rapid.T) {
	s.caller = ""
	r := s.call(s.scripts.ReentrantWatch, "PUBLISH", reentrantSpecBase+":wake")
	var woken, also string
	switch {
	case s.holder == nil && s.woken != "":
		if _, absent := s.lookAtWaiter(s.woken); absent {
			woken, also = s.wake()
		}
	case s.holder != nil && s.keepsPresence(s.holder):
		woken = s.firstPresentWaiter("")
	}
	if (r[0] == 1) != (woken != "") {
		t.Fatalf("the watch answered %v; the model wakes %q (waiters in order: %v)", r, woken, s.orderIDs())
	}
	s.expectWake("the watch", woken, also)
}

func (s *reentrantSpec) forceUnlock(t *rapid.T) {
	s.caller = ""
	r := s.call(s.scripts.ReentrantForceUnlock, "PUBLISH", reentrantSpecBase+":wake")
	if (r[0] == 1) != (s.holder != nil) {
		t.Fatalf("ForceUnlock answered %v with the lock held by %v", r, s.holder)
	}
	if s.holder == nil {
		s.expectWake("ForceUnlock of a free lock", "")
		return
	}
	s.holder.count = 0
	s.holder, s.absentSince = nil, time.Time{}
	woken, also := s.wake()
	s.expectWake("ForceUnlock", woken, also)
}

func (s *reentrantSpec) leave(t *rapid.T) {
	hd := s.pick(t, func(hd *reentrantHandle) bool { return hd.waiter != "" })
	id := hd.waiter
	s.caller = hd.owner
	r := s.call(s.scripts.ReentrantLeave, hd.owner, id, "PUBLISH", reentrantSpecBase+":wake")
	s.leaveOrder(hd)
	next, also := "", ""
	if s.holder == nil && s.woken == id {
		s.woken = ""
		next, also = s.wake()
	}
	if (r[0] == 1) != (next != "") {
		t.Fatalf("%s's leave answered %v; the model passes its wake-up on to %q", id, r, next)
	}
	s.expectWake(id+"'s leave", next, also)
}

func (s *reentrantSpec) advance(t *rapid.T) {
	s.clk.Advance(time.Duration(rapid.IntRange(1, 2500).Draw(t, "ms")) * time.Millisecond)
	s.free()
}

func (s *reentrantSpec) check(t *rapid.T) {
	v, err := s.scripts.State.Run(context.Background(), s.c, nil, s.keys[:1]).Slice()
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case s.holder == nil && len(v) != 0:
		t.Fatalf("Redis says %v holds the lock; the model says it is free", v)
	case s.holder != nil && (len(v) == 0 || v[0] != s.holder.owner || v[1] != int64(s.holder.count)):
		t.Fatalf("Redis says %v; the model says %s holds it %d times", v, s.holder.owner, s.holder.count)
	}
	for _, k := range s.keys {
		if s.mr.Exists(k) && s.mr.TTL(k) <= 0 {
			t.Fatalf("key %s has no TTL", k)
		}
	}
}

func reentrantSpecOf(scripts *lua.Scripts) func(*rapid.T) { return reentrantSpecWith(scripts, false) }

// reentrantPresenceSpecOf is the property with client cb keeping a presence.
func reentrantPresenceSpecOf(scripts *lua.Scripts) func(*rapid.T) {
	return reentrantSpecWith(scripts, true)
}

func reentrantSpecWith(scripts *lua.Scripts, presence bool) func(*rapid.T) {
	return func(t *rapid.T) {
		mr, clk := fakeServer(t)
		defer mr.Close()
		log := newMiniLog(mr, reentrantSpecBase+":wake*", reentrantSpecBase+":wake:~")
		defer log.close()
		c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
		defer c.Close()
		s := &reentrantSpec{t: t, mr: mr, clk: clk, c: c, scripts: scripts, log: log,
			deadlines: map[string]time.Time{},
			keys:      []string{reentrantSpecBase, reentrantSpecBase + ":queue", reentrantSpecBase + ":deadlines"}}
		// Two clients with two handles each, and one with one: notes must
		// reach the right client's inbox.
		cb := "cb"
		if presence {
			s.presence, cb = true, reentrantPresenceClient
			s.presenceSub = mr.NewSubscriber()
			defer s.presenceSub.Close()
			s.back(t)
		}
		for _, o := range []string{"ca.h1", "ca.h2", cb + ".h1", cb + ".h2", "cc.h1"} {
			s.handles = append(s.handles, &reentrantHandle{owner: o})
		}
		actions := map[string]func(*rapid.T){
			"tryLock":     s.tryLock,
			"join":        s.join,
			"waiterTries": s.waiterTries,
			"unlock":      s.unlock,
			"forceUnlock": s.forceUnlock,
			"leave":       s.leave,
			"watch":       s.watch,
			"advance":     s.advance,
			"":            s.check,
		}
		if presence {
			actions["drop"], actions["back"] = s.drop, s.back
		}
		t.Repeat(actions)
	}
}

func TestReentrantWaitersSpecification(t *testing.T) {
	checkWith(t, 1000, reentrantSpecOf(lua.Default()))
}

// TestReentrantSpecificationWithPresence is the property with one client
// keeping a presence that comes and goes: its holds end exactly a grace
// after a try first found it gone; only the longest-waiting live waiter
// whose client is there polls; waiters of a client gone for the grace are
// passed over. The scripts alone, so it is as quick as the plain one.
func TestReentrantSpecificationWithPresence(t *testing.T) {
	checkWith(t, 500, reentrantPresenceSpecOf(lua.Default()))
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
