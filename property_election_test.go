package fairlock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"
)

// The election's specification. An election (fair.Election) is a fair lock
// whose hold names the leader's value, and whose every change of leader,
// term or value is published on its leader channel. This property drives
// the scripts directly (campaigns, their tries and heartbeats, resigns,
// leaves, proclaims, renewals, ForceUnlock, time passing) and checks after
// every step, against a model of the candidates:
//
//   - one leader per term, and one at a time: a new term begins only once
//     the model's last leader resigned, was forced out, or its lease ran
//     out; the hold's owner is the model's leader;
//   - terms grow: each new term's number is above every earlier one;
//   - candidates lead in campaign order: a new leader is the
//     longest-waiting live candidate (a free election with nobody live
//     waiting goes to whoever campaigns);
//   - the leader's value is what it campaigned with or last proclaimed;
//   - every observer ends on the last leader: a step publishes at most one
//     leadership, with a version above the last, and what Redis says leads
//     is what the last message said, unless a lease ran out since (which
//     publishes nothing, and which observers read at its expiry);
//   - every key has a TTL.

const (
	electionSpecLease = 2 * time.Second
	electionSpecWait  = 3 * time.Second
	electionSpecBase  = "fairlock:e:{spec}"
)

// Every candidate's origin: its label needs escaping in a leadership.
var electionSpecOrigin = transport.Origin{Host: "host", PID: 7, Label: "a label; 100%"}

type candidate struct {
	owner    string
	n        int
	entry    string // its queue entry while it campaigns, "" otherwise
	deadline time.Time
	value    string
	token    int64 // its term while it leads
}

type electionSpec struct {
	t       *rapid.T
	mr      *miniredis.Miniredis
	clk     *clock.Fake
	c       *redis.Client
	scripts *lua.Scripts
	keys    []string
	cands   []*candidate
	log     *miniLog // the leader channel
	reqs    int

	order   []*candidate // campaigning candidates, in campaign order
	leader  *candidate   // the model's leader, nil if none
	expires time.Time    // its lease's end
	maxTerm int64
	seen    transport.Leadership // the last leadership published
	seenAny bool
	actor   *candidate // the candidate whose own acquire ran this step
	handoff bool       // that acquire's reply was a hand-off
}

func (s *electionSpec) now() time.Time { return s.clk.Now() }

func (s *electionSpec) channel() string { return transport.Channel(electionSpecBase) }

func (s *electionSpec) call(sc *transport.Script, args ...any) []int64 {
	return runInts(s.t, sc, s.c, s.keys, args...)
}

func (s *electionSpec) live(c *candidate) bool {
	return c.entry != "" && c.deadline.After(s.now())
}

// firstLive is the longest-waiting live candidate, nil if none.
func (s *electionSpec) firstLive() *candidate {
	for _, c := range s.order {
		if s.live(c) {
			return c
		}
	}
	return nil
}

func (s *electionSpec) dequeue(c *candidate) {
	for i, o := range s.order {
		if o == c {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
	c.entry = ""
}

func (s *electionSpec) pick(t *rapid.T, ok func(*candidate) bool) *candidate {
	return pickWhere(t, s.cands, ok, "candidate")
}

func (s *electionSpec) req(c *candidate) string {
	s.reqs++
	return fmt.Sprintf("%s#%d", c.owner, s.reqs)
}

// acquire is a candidate's try: its campaign (join) or a try of a
// campaigning candidate (queued).
func (s *electionSpec) acquire(c *candidate, mode string) {
	if mode == transport.ModeJoin {
		s.dequeue(c) // a candidate the model let die campaigns afresh
		c.n++
		c.entry = fmt.Sprintf("%s/%d", c.owner, c.n)
		c.value = fmt.Sprintf("v %s;%d|", c.owner, c.n) // escaping matters
		c.deadline = s.now().Add(electionSpecWait)
		s.order = append(s.order, c)
	}
	r := s.call(s.scripts.FairAcquire, transport.FairAcquire{Owner: c.owner, Entry: c.entry, Request: s.req(c),
		Lease: electionSpecLease.Milliseconds(), Wait: electionSpecWait.Milliseconds(), Mode: mode,
		Origin:  transport.EscapeJSON(transport.EncodeOrigin(electionSpecOrigin.Host, electionSpecOrigin.PID, electionSpecOrigin.Label)),
		Publish: "PUBLISH", Channel: s.channel(), Stale: 0, Value: transport.EscapeValue(c.value)}.Args()...)
	s.actor = c
	switch r[0] {
	case 1:
		s.handoff = len(r) >= 3 && r[2] == 1
	case -1:
		s.dequeue(c) // it fell silent too long: the model let it die
	default:
		c.deadline = s.now().Add(electionSpecWait)
	}
}

func (s *electionSpec) campaign(t *rapid.T) {
	s.acquire(s.pick(t, func(c *candidate) bool { return !s.live(c) && c != s.leader }), transport.ModeJoin)
}

func (s *electionSpec) tryAgain(t *rapid.T) {
	s.acquire(s.pick(t, func(c *candidate) bool { return s.live(c) }), transport.ModeQueued)
}

func (s *electionSpec) heartbeat(t *rapid.T) {
	c := s.pick(t, func(c *candidate) bool { return s.live(c) })
	r := s.call(s.scripts.FairHeartbeat, "PUBLISH", s.channel(), c.entry, electionSpecWait.Milliseconds())
	if r[0] <= 0 { // still queued (a grant to it leaves its deadline as it was)
		c.deadline = s.now().Add(electionSpecWait)
	}
}

func (s *electionSpec) leave(t *rapid.T) {
	c := s.pick(t, func(c *candidate) bool { return s.live(c) })
	s.call(s.scripts.FairLeave, c.owner, c.entry, "PUBLISH", s.channel())
	s.dequeue(c)
}

func (s *electionSpec) resign(t *rapid.T) {
	c := s.pick(t, func(c *candidate) bool { return c == s.leader })
	r := s.call(s.scripts.FairRelease, c.owner, s.req(c), c.token, "PUBLISH", s.channel())
	if s.expires.After(s.now()) && r[0] != 1 {
		t.Fatalf("the leader's resign answered %v", r)
	}
	s.leader = nil
}

func (s *electionSpec) proclaim(t *rapid.T) {
	c := s.pick(t, func(c *candidate) bool { return c == s.leader && s.expires.After(s.now()) })
	v := fmt.Sprintf("%s proclaims %d", c.value, rapid.IntRange(0, 3).Draw(t, "value"))
	r := s.call(s.scripts.ElectionProclaim, c.owner, c.token, transport.EscapeValue(v), "PUBLISH", s.channel())
	if r[0] != 1 {
		t.Fatalf("the leader's proclaim answered %v", r)
	}
	c.value = v
}

// staleProclaim: a candidate whose term is over proclaims with its old
// token, as a leader that was paused past its lease would: refused,
// nothing changes.
func (s *electionSpec) staleProclaim(t *rapid.T) {
	c := s.pick(t, func(c *candidate) bool { return c.token != 0 && (c != s.leader || !s.expires.After(s.now())) })
	r := s.call(s.scripts.ElectionProclaim, c.owner, c.token, "stale", "PUBLISH", s.channel())
	if r[0] != 0 {
		t.Fatalf("%s proclaimed in its old term %d: %v", c.owner, c.token, r)
	}
}

func (s *electionSpec) renew(t *rapid.T) {
	c := s.pick(t, func(c *candidate) bool { return c == s.leader && s.expires.After(s.now()) })
	r := s.call(s.scripts.Renew, c.owner, c.token, electionSpecLease.Milliseconds(), "0")
	if r[0] != 1 {
		t.Fatalf("the leader's renewal answered %v", r)
	}
	if e := s.now().Add(electionSpecLease); e.After(s.expires) {
		s.expires = e
	}
}

func (s *electionSpec) forceUnlock(t *rapid.T) {
	s.call(s.scripts.FairForceUnlock, "PUBLISH", s.channel())
	s.leader = nil
}

func (s *electionSpec) advance(t *rapid.T) {
	s.clk.Advance(time.Duration(rapid.IntRange(1, 2500).Draw(t, "ms")) * time.Millisecond)
	if s.leader != nil && !s.expires.After(s.now()) {
		s.leader = nil // its lease ran out
	}
}

// published returns the leaderships published since the last call.
func (s *electionSpec) published() []string {
	var got []string
	for _, m := range s.log.take(s.t) {
		got = append(got, m.Message)
	}
	return got
}

// check holds Redis and the messages of the step to the model.
func (s *electionSpec) check(t *rapid.T) {
	actor, handoff := s.actor, s.handoff
	s.actor, s.handoff = nil, false
	text, err := s.scripts.ElectionLeader.Run(context.Background(), s.c, nil, s.keys[:1]).Text()
	if err != nil {
		t.Fatal(err)
	}
	now, err := transport.ParseLeadership(text)
	if err != nil {
		t.Fatal(err)
	}
	msgs := s.published()
	if len(msgs) > 1 {
		t.Fatalf("one step published %d leaderships: %q", len(msgs), msgs)
	}
	if len(msgs) == 1 {
		l, err := transport.ParseLeadership(msgs[0])
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(msgs[0], transport.NoteSeparator) {
			t.Fatalf("leadership %q has a note separator: the hub would split it", msgs[0])
		}
		if l.Term != 0 && l.Origin != electionSpecOrigin {
			t.Fatalf("leadership %q: origin %+v, want %+v", msgs[0], l.Origin, electionSpecOrigin)
		}
		if s.seenAny && l.Version <= s.seen.Version {
			t.Fatalf("version %d published after %d", l.Version, s.seen.Version)
		}
		s.seen, s.seenAny = l, true
	}

	// Who leads, by the model; a new term's leader.
	if now.Term != 0 && (s.leader == nil || now.Term != s.leader.token) {
		if s.leader != nil {
			t.Fatalf("term %d began while %s led term %d until %v", now.Term, s.leader.owner, s.leader.token, s.expires.Sub(s.now()))
		}
		if now.Term <= s.maxTerm {
			t.Fatalf("term %d began after term %d", now.Term, s.maxTerm)
		}
		want := s.firstLive()
		if want == nil && actor != nil {
			want = actor
		}
		if want == nil || now.Value != want.value {
			t.Fatalf("%q leads term %d; the longest-waiting live candidate is %v (campaign order %v)", now.Value, now.Term, want, s.orderOf())
		}
		if now.Since != now.Now {
			t.Fatalf("term %d began at %d, read at %d in the step that began it", now.Term, now.Since, now.Now)
		}
		s.leader, s.maxTerm, want.token = want, now.Term, now.Term
		s.expires = s.now().Add(electionSpecLease)
		if !(want == actor && !handoff) {
			if want.deadline.Before(s.expires) { // a hand-off lasts no longer than its deadline
				s.expires = want.deadline
			}
		}
		s.dequeue(want)
	}
	switch {
	case s.leader == nil && now.Term != 0:
		t.Fatalf("Redis says term %d leads; the model says nobody", now.Term)
	case s.leader != nil && now.Term == 0:
		t.Fatalf("Redis says nobody leads; the model says %s until %v", s.leader.owner, s.expires.Sub(s.now()))
	case s.leader != nil && now.Value != s.leader.value:
		t.Fatalf("the leader's value is %q, want %q", now.Value, s.leader.value)
	}

	// Every observer ends on the last leader: the last message says what
	// Redis says, unless a lease ran out since.
	if now.Term != 0 && (!s.seenAny || s.seen.Term != now.Term || s.seen.Value != now.Value) {
		t.Fatalf("Redis says %q leads term %d, the last message said %q in term %d", now.Value, now.Term, s.seen.Value, s.seen.Term)
	}
	if now.Term == 0 && s.seenAny && s.seen.Term != 0 && s.seen.Expiry > now.Now {
		t.Fatalf("nobody leads, but the last message said term %d leads until %d (now %d)", s.seen.Term, s.seen.Expiry, now.Now)
	}
	for _, k := range s.keys {
		if s.mr.Exists(k) && s.mr.TTL(k) <= 0 {
			t.Fatalf("key %s has no TTL", k)
		}
	}
}

func (s *electionSpec) orderOf() []string {
	var out []string
	for _, c := range s.order {
		out = append(out, fmt.Sprintf("%s(live %v)", c.entry, s.live(c)))
	}
	return out
}

func (c *candidate) String() string { return c.owner + " " + strings.TrimSpace(c.value) }

func electionSpecOf(scripts *lua.Scripts) func(*rapid.T) {
	return func(t *rapid.T) {
		mr, clk := fakeServer(t)
		defer mr.Close()
		leader := transport.LeaderChannel(transport.Channel(electionSpecBase))
		log := newMiniLog(mr, leader, leader)
		defer log.close()
		c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
		defer c.Close()
		s := &electionSpec{t: t, mr: mr, clk: clk, c: c, scripts: scripts, log: log, keys: transport.QueueKeys(electionSpecBase)}
		for _, o := range []string{"ca.h1", "ca.h2", "cb.h1", "cc.h1"} {
			s.cands = append(s.cands, &candidate{owner: o})
		}
		t.Repeat(map[string]func(*rapid.T){
			"campaign":    s.campaign,
			"tryAgain":    s.tryAgain,
			"heartbeat":   s.heartbeat,
			"leave":       s.leave,
			"resign":      s.resign,
			"proclaim":    s.proclaim,
			"stale":       s.staleProclaim,
			"renew":       s.renew,
			"forceUnlock": s.forceUnlock,
			"advance":     s.advance,
			"":            s.check,
		})
	}
}

func TestElectionSpecification(t *testing.T) {
	checkWith(t, 1000, electionSpecOf(lua.Default()))
}
