package core

// Replaying exits after a failover (docs/deployments.md has why and the
// figures). A release or a queue leave that the promoted replica had not
// received is undone, and nobody passes the hold over while its owner is
// present. So each slot remembers its recent exits (past: the tokens of its
// ended holds, the entries of its ended turns, never a turn under way), and
// when its owner's presence follows the master it sends them again, by
// exact token and entry, which change nothing where they took effect. An
// owner without a presence replays nothing.

import (
	"context"
	"sync"
	"time"

	"github.com/fairlock/fairlock/internal/transport"
)

// replayWindow is how far back a replay reaches: exits made earlier are
// forgotten. A gentle failover loses the writes of the second or so
// between the promotion and the clients' switch; the window covers a
// switch that takes longer (a partition, a slow Sentinel), up to it.
// replayPerSlot bounds what one slot remembers: its latest exits.
const (
	replayWindow  = 30 * time.Second
	replayPerSlot = 32
)

// past is what one slot left in Redis lately (replay.go).
type past struct {
	mu      sync.Mutex
	tokens  ring // ended holds
	entries ring // queue entries of ended turns
	// current are the entries of the slot's turn under way (its wait's,
	// a re-join's, its re-entries'), which no replay may leave: one of
	// them may be the live hold's, handed to it and not yet claimed. They
	// join entries when the turn ends.
	current []string
	inTurn  bool
	tracked time.Time // when it last told its owner (track)
}

type stamped struct {
	at    time.Time
	token int64
	entry string
}

// ring keeps the latest replayPerSlot exits of a kind, made at first use:
// no allocation after it, on the hot path.
type ring struct {
	buf  []stamped
	next int // where the next one goes
	n    int // how many it holds
}

func (r *ring) add(x stamped) {
	if r.buf == nil {
		r.buf = make([]stamped, replayPerSlot)
	}
	r.buf[r.next] = x
	r.next = (r.next + 1) % len(r.buf)
	r.n = min(r.n+1, len(r.buf))
}

// since returns those made no earlier than from, the oldest first.
func (r *ring) since(from time.Time) (xs []stamped) {
	for i := range r.n {
		if x := r.buf[(r.next-r.n+i+len(r.buf))%len(r.buf)]; !x.at.Before(from) {
			xs = append(xs, x)
		}
	}
	return xs
}

// markRecent registers s with its owner, for a replay to find, at most every
// quarter window (a slot counts as recent for the window and a quarter).
// The owner forgets slots idle longer as it goes: a program that makes and
// drops handles keeps only the recent ones.
func (s *slot) markRecent(now time.Time) {
	p := s.past
	if !p.tracked.IsZero() && now.Sub(p.tracked) < replayWindow/4 {
		return
	}
	p.tracked = now
	o := s.agent.Owner
	o.pastMu.Lock()
	if o.pasts == nil {
		o.pasts = map[*slot]time.Time{}
	}
	o.pasts[s] = now
	if len(o.pasts) >= o.prunedAt {
		for old, at := range o.pasts {
			if now.Sub(at) > replayWindow+replayWindow/4 {
				delete(o.pasts, old)
			}
		}
		o.prunedAt = 2*len(o.pasts) + 64
	}
	o.pastMu.Unlock()
}

// entryMade records a queue entry of s's turn.
func (s *slot) entryMade(entry string) {
	if s.past == nil {
		return
	}
	p := s.past
	p.mu.Lock()
	if len(p.current) == replayPerSlot { // a long hold's many re-entries: the latest count
		copy(p.current, p.current[1:])
		p.current = p.current[:replayPerSlot-1]
	}
	p.current = append(p.current, entry)
	p.mu.Unlock()
}

// holdEnded records the end of s's hold with token.
func (s *slot) holdEnded(token int64) {
	if s.past == nil {
		return
	}
	now := s.agent.Config.Clock.Now()
	s.past.mu.Lock()
	s.past.tokens.add(stamped{at: now, token: token})
	s.markRecent(now)
	s.past.mu.Unlock()
}

// setTurn records that s's turn begins (in) or ended: the entries it made
// become past then.
func (s *slot) setTurn(in bool) {
	p := s.past
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if in == p.inTurn {
		return
	}
	p.inTurn = in
	if in || len(p.current) == 0 {
		return
	}
	now := s.agent.Config.Clock.Now()
	for _, e := range p.current {
		p.entries.add(stamped{at: now, entry: e})
	}
	p.current = p.current[:0]
	s.markRecent(now)
}

// suspect is told when Redis answered that a hold the owner counted on is
// gone (a release, a renewal or a claim found it so), or that a waiter's
// entry is (EntryVanished): the commands may reach a promoted replica.
// With a presence, the owner checks at once where its subscription is: if
// it is elsewhere, the owner follows, replays its exits and moves its
// hub. These signs alone replay nothing: they may as well be a lease that
// ran out or a partition, and a replayed release that ends a hold takes a
// place in the lock's memory of releases that retried releases are
// answered from (the specification caught a retry answered [0]). Without a
// presence nothing is done.
func (o *Owner) suspect() {
	if o.presence != nil {
		o.presence.checkSoon()
	}
}

// followHubs moves the waiters' hub where the commands go now
// (transport.Hubs.Follow), in the background; Close waits for it. One that
// runs already serves a second: both were asked after the commands had
// moved.
func (o *Owner) followHubs() {
	if !o.following.CompareAndSwap(false, true) {
		return
	}
	o.hubs.ProbeFollowing(1)
	if !o.cleanups.add(&o.closed) {
		o.hubs.ProbeFollowing(-1)
		o.following.Store(false)
		return
	}
	go func() {
		defer o.hubs.ProbeFollowing(-1)
		defer o.cleanups.done()
		defer o.following.Store(false)
		o.hubs.Follow()
	}()
}

// EntryVanished tells ag's owner that a waiter found its entry gone before
// its wait timeout, as a failover to a replica leaves it: the owner acts
// as on any sign that its commands may reach another server (suspect).
func (ag Agent) EntryVanished() { ag.Owner.suspect() }

// replay sends again, in the background, the releases and leaves of the
// owner's slots within the window (see above): the presence found its
// subscription elsewhere (follow). Close waits for it.
func (o *Owner) replay() {
	now := o.clock.Now()
	o.pastMu.Lock()
	var slots []*slot
	for s, at := range o.pasts {
		if now.Sub(at) > replayWindow+replayWindow/4 {
			delete(o.pasts, s)
			continue
		}
		slots = append(slots, s)
	}
	o.pastMu.Unlock()
	if len(slots) == 0 || !o.cleanups.add(&o.closed) {
		return
	}
	o.hubs.ProbeFollowing(1)
	go func() {
		defer o.hubs.ProbeFollowing(-1)
		defer o.cleanups.done()
		ctx, cancel := context.WithTimeout(context.Background(), o.cfgCleanup(slots))
		defer cancel()
		// Every leave first: a release replayed then hands the lock past
		// the entries that were left, not to one of them.
		for _, s := range slots {
			s.replayLeaves(ctx, now)
		}
		for _, s := range slots {
			s.replayReleases(ctx, now)
		}
	}()
}

// cfgCleanup is the bound of a replay: the longest cleanup timeout of the
// slots' handles.
func (o *Owner) cfgCleanup(slots []*slot) time.Duration {
	var d time.Duration
	for _, s := range slots {
		d = max(d, s.agent.Config.CleanupTimeout)
	}
	return d
}

// replayLeaves sends again the leaves of s's entries of turns that ended
// within the window before now.
func (s *slot) replayLeaves(ctx context.Context, now time.Time) {
	h := s.agent
	if h.Leave == nil {
		return
	}
	p := s.past
	p.mu.Lock()
	entries := p.entries.since(now.Add(-replayWindow))
	p.mu.Unlock()
	for _, e := range entries {
		_ = h.Call(h.Leave).Run(ctx, h.Client, h.Mode(),
			transport.Leave{Owner: h.IDArg(), Entry: e.entry, Publish: h.PublishArg(), Channel: h.ChannelArg()}.Args()...).Err()
	}
}

// replayReleases sends again the releases of s's holds that ended within
// the window before now, every level of a re-entry.
func (s *slot) replayReleases(ctx context.Context, now time.Time) {
	p := s.past
	p.mu.Lock()
	tokens := p.tokens.since(now.Add(-replayWindow))
	p.mu.Unlock()
	for _, t := range tokens {
		for range maxReleases {
			status, err := release(ctx, s.agent, t.token)
			if err != nil || status != transport.StillHeld {
				break
			}
		}
	}
}
