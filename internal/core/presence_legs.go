package core

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// The presence's legs. A script counts a subscription only where it runs:
// on Cluster, PUBSUB NUMSUB answers for its own node. So the presence is
// one subscription (a leg, presence.go) per server that serves locks: the
// only one on a single server or Sentinel's master, one per master on
// Cluster. Each hold is served by the leg of its lock's slot: that leg's
// break arms the hold's jeopardy, its return confirms the hold, and an
// acquisition there waits for it. On Cluster the masters are looked up
// (CLUSTER SHARDS) at the first acquisition, then every lookEvery while the
// owner holds or waits, and at once when a leg's master goes away; a leg
// whose master is no longer one follows the master of its slots (check,
// relocate), as on Sentinel.

// lookEvery is how often, at most, an owner that holds or waits on Cluster
// looks the masters up: a master that joined the cluster since serves the
// owner's locks from then on. A slot moved to such a master within this
// time of a hold's lock taking it is the window docs/presence.md states.
const lookEvery = time.Second

// errNoMaster is why an acquisition on Cluster cannot wait for its leg:
// no master serves the lock's slot (the cluster is failing over).
var errNoMaster = errors.New("no Cluster master serves the lock's slot (CLUSTER SHARDS)")

// presence is the owner's session: its legs, and what they share.
type presence struct {
	o       *Owner
	channel string
	probe   PresenceProbe        // the rig's, if it is one
	cluster *redis.ClusterClient // Cluster: a leg per master

	mu       sync.Mutex
	legs     []*leg    // on a single-node client, one, set at newPresence and never changed
	started  bool      // an acquisition awaited: new legs subscribe at once
	stopped  bool      // stop ran: no leg is added
	lookedAt time.Time // the last look at the masters (o's clock)
	looking  bool
}

// PresenceProbe is a Rig.Probe that hears of its owner's presence too
// (internal/redistest's): a test that breaks connections learns from it
// that the owner noticed.
type PresenceProbe interface {
	// PresenceUp: a leg of o's presence was confirmed (up, or back up),
	// once its holds' renewals were scheduled.
	PresenceUp(o *Owner)
	// PresenceAnswered: a leg's PING sent at sent (o's clock) was answered.
	PresenceAnswered(o *Owner, sent time.Time)
}

func newPresence(o *Owner, probe transport.Probe) *presence {
	p := &presence{o: o, channel: transport.PresenceChannel(o.ids.Client())}
	p.probe, _ = probe.(PresenceProbe)
	if cc, ok := o.client.(*redis.ClusterClient); ok {
		p.cluster = cc
	} else {
		p.legs = []*leg{newLeg(p, o.client)}
	}
	return p
}

// all returns the legs (a copy).
func (p *presence) all() []*leg {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.legs)
}

// serving returns the leg that serves key's lock, or nil (Cluster, before
// the masters were looked up, or while none serves its slot).
func (p *presence) serving(key string) *leg {
	if p.cluster == nil {
		return p.legs[0] // set once, at newPresence
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	slot := transport.Slot(key)
	for _, l := range p.legs {
		if servesSlot(l.slots, slot) {
			return l
		}
	}
	return nil
}

// legFor is serving, looking the masters up (within ctx) when no leg
// serves key yet.
func (p *presence) legFor(ctx context.Context, key string) (*leg, error) {
	if l := p.serving(key); l != nil {
		return l, nil
	}
	if err := p.lookUp(ctx); err != nil {
		return nil, err
	}
	if l := p.serving(key); l != nil {
		return l, nil
	}
	return nil, errNoMaster
}

// serves reports whether l serves key's lock.
func (l *leg) serves(key string) bool {
	if l.route == "" {
		return true
	}
	l.p.mu.Lock()
	defer l.p.mu.Unlock()
	return servesSlot(l.slots, transport.Slot(key))
}

func servesSlot(ranges [][2]int64, slot int64) bool {
	for _, r := range ranges {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// await returns nil once the leg that serves key's lock is up (leg.await).
func (p *presence) await(ctx context.Context, key string) error {
	if p.cluster == nil {
		return p.legs[0].await(ctx)
	}
	p.mu.Lock()
	p.started = true
	p.mu.Unlock()
	l, err := p.legFor(ctx, key)
	if err != nil {
		return err
	}
	return l.await(ctx)
}

// awaitUp is leg.awaitUp for the leg that serves key's lock.
func (p *presence) awaitUp(ctx, stop context.Context, key string) bool {
	l, err := p.legFor(ctx, key)
	return err == nil && l.awaitUp(ctx, stop)
}

// vouch is leg.vouch for the leg that serves key's lock.
func (p *presence) vouch(ctx, stop context.Context, key string, since time.Time) bool {
	l := p.serving(key)
	return l != nil && l.vouch(ctx, stop, since)
}

// covers is leg.covers for the leg that serves key's lock.
func (p *presence) covers(key string, since time.Time) bool {
	l := p.serving(key)
	return l != nil && l.covers(since)
}

// busy returns the legs that serve at least one of the owner's holds:
// on Cluster, only they need PINGs and checks while the owner holds
// anything.
func (p *presence) busy() []*leg {
	legs := p.all()
	if p.cluster == nil {
		return legs
	}
	holds := p.o.heldWhere(func(*hold) bool { return true })
	n := 0
	for _, l := range legs {
		for _, h := range holds {
			if l.serves(h.agent.Keys[0]) {
				legs[n] = l
				n++
				break
			}
		}
	}
	return legs[:n]
}

// ping PINGs every leg that serves a hold of the owner's.
func (p *presence) ping() {
	for _, l := range p.busy() {
		l.ping()
	}
}

// held runs the held of every leg that serves a hold of the owner's, and
// on Cluster looks the masters up every lookEvery.
func (p *presence) held() {
	p.lookSoon()
	for _, l := range p.busy() {
		l.held()
	}
}

// waited runs the waited of the leg that serves key's lock, which one of
// the owner's waiters tried, and on Cluster looks the masters up every
// lookEvery.
func (p *presence) waited(key string) {
	p.lookSoon()
	if l := p.serving(key); l != nil {
		l.waited()
	}
}

// checkSoon runs every leg's checkSoon.
func (p *presence) checkSoon() {
	for _, l := range p.all() {
		l.checkSoon()
	}
}

// stop stops every leg; a look at the masters that ends after it makes
// none (stopped).
func (p *presence) stop() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	for _, l := range p.all() {
		l.stop()
	}
}

// up reports whether every leg is up (and, on Cluster, there is one).
func (p *presence) up() bool {
	legs := p.all()
	for _, l := range legs {
		if !l.up.Load() {
			return false
		}
	}
	return len(legs) > 0
}

// unconfirmed returns the holds that a waiter may end once the owner's
// presence is gone and that the leg serving each does not cover.
func (p *presence) unconfirmed() []*hold {
	holds := p.o.heldWhere(func(h *hold) bool { return h.agent.Presence })
	n := 0
	for _, h := range holds {
		if !p.covers(h.agent.Keys[0], h.sentAt()) {
			holds[n] = h
			n++
		}
	}
	return holds[:n]
}

// releaseLater is leg.releaseLater on the leg that serves h's lock; with
// none, h is released at once.
func (p *presence) releaseLater(h *hold) {
	if l := p.serving(h.agent.Keys[0]); l != nil {
		l.releaseLater(h)
		return
	}
	p.o.releaseLost(h, false)
}

// sessionKeys are session.lua's keys for l's check: its channel on a
// single server; on Cluster its route, which the client sends to the
// master that serves it now.
func (l *leg) sessionKeys() []string {
	if l.route != "" {
		return []string{l.route}
	}
	return []string{l.channel}
}

// master returns where l should subscribe now: the master of its route's
// slot as the Cluster client knows it (l's node if it cannot tell), or,
// on a single-node client, that client (which dials Sentinel's master).
func (l *leg) master(ctx context.Context) redis.UniversalClient {
	if l.route != "" {
		if node, err := l.p.cluster.MasterForKey(ctx, l.route); err == nil {
			return node
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.node
}

// moveLocked makes node the one l subscribes on; l.mu held. Its address
// is written under p.mu too: lookUp reads it under that lock alone.
func (l *leg) moveLocked(node redis.UniversalClient) {
	l.node = node
	if c, ok := node.(*redis.Client); ok && l.route != "" {
		l.p.mu.Lock()
		l.addr = c.Options().Addr
		l.p.mu.Unlock()
	}
}

// relocate moves a Cluster leg whose subscription failed twice in a row
// (its master is gone: a failover, a node taken out) to the master that
// serves its slots now, if the client knows another: ps, the failing
// subscription, is closed, and a new run goes on there. It reports whether
// it moved. The client is told to look the cluster up again, for the next
// try's sake.
func (l *leg) relocate(ps *redis.PubSub) bool {
	if l.route == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), SessionPing)
	defer cancel()
	l.p.cluster.ReloadState(ctx)
	node, err := l.p.cluster.MasterForKey(ctx, l.route)
	l.mu.Lock()
	if err != nil || node.Options().Addr == l.addr || l.ps != ps || l.o.closed.Load() {
		l.mu.Unlock()
		return false
	}
	l.moveLocked(node)
	l.subscribeLocked()
	l.mu.Unlock()
	_ = ps.Close()
	return true
}

// lookSoon looks the Cluster's masters up in the background, if the last
// look is lookEvery old and none runs.
func (p *presence) lookSoon() {
	if p.cluster == nil {
		return
	}
	o := p.o
	now := o.clock.Now()
	p.mu.Lock()
	due := !p.looking && now.Sub(p.lookedAt) >= lookEvery
	if due {
		p.looking = true
	}
	p.mu.Unlock()
	if !due {
		return
	}
	if !o.cleanups.add(&o.closed) { // Close waits for it
		p.mu.Lock()
		p.looking = false
		p.mu.Unlock()
		return
	}
	o.hubs.ProbeBackground(1)
	go func() {
		defer o.hubs.ProbeBackground(-1)
		defer o.cleanups.done()
		defer func() {
			p.mu.Lock()
			p.looking = false
			p.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), lookEvery)
		defer cancel()
		_ = p.lookUp(ctx) // a failure: the next round looks again
	}()
}

// lookUp reads which masters serve which slots (CLUSTER SHARDS) and fits
// the legs to them: a master without a leg gets one, which subscribes at
// once if any acquisition has, unless it serves slots of a leg whose own
// master is no longer one: that leg moves there itself (a check, asked
// for here, or relocate), its break's jeopardy armed and its return
// confirming the holds it serves, as on Sentinel. A second leg on one
// master is dropped.
func (p *presence) lookUp(ctx context.Context) error {
	ranges, err := p.slotRanges(ctx)
	if err != nil {
		return err
	}
	// Each range's master by the address the client knows it by (the
	// master it sends a key of the range to), and its node.
	masters := map[string][][2]int64{}
	nodes := map[string]*redis.Client{}
	routes := map[string]string{}
	var order []string
	for _, r := range ranges {
		route := transport.SessionKey(r[0], r[1])
		node, err := p.cluster.MasterForKey(ctx, route)
		if err != nil {
			return err
		}
		a := node.Options().Addr
		if _, ok := masters[a]; !ok {
			order = append(order, a)
			nodes[a], routes[a] = node, route
		}
		masters[a] = append(masters[a], r)
	}
	p.mu.Lock()
	have := map[string]bool{}
	var moving [][2]int64 // the slots of legs whose address is no master's
	var stray []*leg      // those legs
	for _, l := range p.legs {
		have[l.addr] = true
		if _, ok := masters[l.addr]; !ok {
			moving = append(moving, l.slots...)
			stray = append(stray, l)
		}
	}
	p.mu.Unlock()
	// The new legs, subscribing already if an acquisition has been made
	// (one made later subscribes in its await): they are not the
	// presence's until merged below.
	p.mu.Lock()
	started := p.started
	p.mu.Unlock()
	var made []*leg
	for _, a := range order {
		if have[a] || overlaps(masters[a], moving) {
			continue
		}
		l := newLeg(p, nodes[a])
		l.addr, l.route, l.slots = a, routes[a], masters[a]
		if started {
			l.mu.Lock()
			l.subscribeLocked()
			l.mu.Unlock()
		}
		made = append(made, l)
	}
	p.mu.Lock()
	if p.stopped { // the owner closed meanwhile
		p.mu.Unlock()
		for _, l := range made {
			l.stop()
		}
		return nil
	}
	var keep, drop []*leg
	seen := map[string]bool{}
	for _, l := range p.legs {
		if seen[l.addr] {
			drop = append(drop, l)
			continue
		}
		if r, ok := masters[l.addr]; ok {
			l.slots = r
		}
		seen[l.addr] = true
		keep = append(keep, l)
	}
	for _, l := range made {
		if seen[l.addr] { // another look made it first
			drop = append(drop, l)
			continue
		}
		seen[l.addr] = true
		keep = append(keep, l)
	}
	p.legs = keep
	p.lookedAt = p.o.clock.Now()
	p.mu.Unlock()
	for _, l := range drop {
		l.stop()
	}
	for _, l := range stray {
		l.checkSoon() // it moves now, not at its owner's next hold or wait there
	}
	return nil
}

// slotRanges returns the cluster's ranges of served slots, from CLUSTER
// SHARDS, or from CLUSTER SLOTS where that is refused (an ACL, a managed
// service that leaves it out): go-redis needs the latter anyway.
func (p *presence) slotRanges(ctx context.Context) ([][2]int64, error) {
	shards, err := p.cluster.ClusterShards(ctx).Result()
	if isRefusal(err) {
		//nolint:staticcheck // CLUSTER SLOTS is deprecated, but answers where CLUSTER SHARDS is refused.
		slots, err := p.cluster.ClusterSlots(ctx).Result()
		if err != nil {
			return nil, err
		}
		var out [][2]int64
		for _, s := range slots {
			out = append(out, [2]int64{int64(s.Start), int64(s.End)})
		}
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	var out [][2]int64
	for _, sh := range shards {
		for _, r := range sh.Slots {
			out = append(out, [2]int64{r.Start, r.End})
		}
	}
	return out, nil
}

// overlaps reports whether two sets of slot ranges share a slot.
func overlaps(a, b [][2]int64) bool {
	for _, x := range a {
		for _, y := range b {
			if x[0] <= y[1] && y[0] <= x[1] {
				return true
			}
		}
	}
	return false
}

// PresenceConfirmed reports whether o's presence is up and covers every
// hold of o that a waiter may end (true without WithPresence): a test that
// broke its connections waits for it before it lets the jeopardy come.
func PresenceConfirmed(o *Owner) bool {
	if o.presence == nil {
		return true
	}
	return len(o.presence.unconfirmed()) == 0 && o.presence.up()
}
