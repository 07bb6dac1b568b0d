package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/fairlock/fairlock/internal/wire"
	"github.com/redis/go-redis/v9"
)

// Presence (docs/presence.md). An owner made with WithPresence subscribes,
// before its first acquisition, to a channel of its own
// (wire.PresenceChannel), on a connection of its own, and keeps it for its
// life; its client id tells the scripts that it does (wire.NewIDs). Redis
// drops the subscription when the process dies, and a fair lock's waiter
// then ends the hold after PresenceGrace (queue.lua's holder_present).
//
// A blip costs nothing, and the holder is never the last to know. A break
// after which Redis cannot be reached at once (go-redis dials again inside
// the read that failed, and the next read fails too: a restart, a
// partition) ends every hold a waiter may end, as lost, at once: a server
// that restarted empty would grant them as soon as it is back. A break of
// a server that is still there is a blip. While the
// owner holds anything it PINGs that connection every SessionPing; alive
// is when the latest PING that was answered was sent, so Redis had the
// subscription at least until then, and no waiter can have counted its
// absence from before alive. When the connection breaks while the process
// lives, the owner subscribes again at once, and every hold it had is
// renewed (or claimed) on its return: one that Redis still has then was
// never taken over, since from its return every waiter sees the presence
// again. A hold that is not so confirmed by alive + PresenceGrace -
// sessionMargin (its jeopardy) ends then as lost (ErrLockLost), before any
// waiter can take it, and is released in the background (again when the
// presence comes back, if that release failed: releaseLost). A hold whose
// acquisition was sent before the current subscription was confirmed is
// confirmed the same way before it is handed to its caller (covers).
// Acquisitions wait for the subscription (await).
//
// Failovers (docs/presence.md, "Failovers"): a promoted replica has the
// holds and none of the subscriptions. A script counts an absence only
// where the subscription of the owner that called it is (queue.lua's
// absence_counts), and an owner whose subscription is not where its
// commands go subscribes again there (check, follow), which is a break
// that the new subscription's confirmation ends.

// PresenceGrace is how long a holder's presence must have been gone before
// a waiter ends its hold; PresencePoll how often the head of a lock whose
// holder keeps a presence looks. Both mirror queue.lua.
const (
	PresenceGrace = 200 * time.Millisecond
	PresencePoll  = 50 * time.Millisecond
)

// SessionPing is how often an owner that keeps a presence PINGs its
// presence connection while it holds anything: a break finds the latest
// answer at most this long (and a round trip) before it, which leaves the
// owner most of the grace to come back before its holds' jeopardy.
const SessionPing = 50 * time.Millisecond

// sessionMargin is what the jeopardy keeps back from the grace: a waiter
// counts the grace on Redis's clock from its first look, the holder on its
// own from alive, and the holder must have stopped believing first.
const sessionMargin = 20 * time.Millisecond

// presenceRetry is the pause between tries to subscribe again, after the
// first (at once) failed. An acquisition that waits for the presence cuts
// it short (await).
const presenceRetry = 100 * time.Millisecond

// presenceTries is how many fresh tries to subscribe an acquisition waits
// for while the presence is down before it fails with why: as many as
// go-redis makes of one command by default (MaxRetries 3: four), each of
// which dials again. A count, not a time: a process whose connections all
// fail at once (a test's crashed one) fails at once, on any clock. It
// rides out less of an outage than a plain owner's call (docs/presence.md).
const presenceTries = 4

// presenceGone is why a hold ends when the owner's presence breaks.
const presenceGone = "the owner's presence connection to Redis broke and did not come back, or its holds could not be confirmed, " +
	"within the grace (its presence; fairlock.WithoutPresence turns it off), so a waiter may take the lock: every lock, election and semaphore permit " +
	"of the owner that was not confirmed ends"

type presence struct {
	o       *Owner
	channel string

	up   atomic.Bool  // subscribed: acquisitions may go
	ups  atomic.Int64 // how many times it came up (PresenceUps)
	mu   sync.Mutex
	ps   *redis.PubSub  // the current subscription; nil until started
	runs sync.WaitGroup // run's goroutines: one per subscription
	// since is when the current subscription was confirmed (o's clock);
	// ready is closed at the next outcome (up, or a failure) and replaced;
	// err is why it is down, since its last failure (nil while up, and
	// before the first outcome).
	since time.Time
	ready chan struct{}
	err   error
	// alive is when the latest answered PING was sent (o's clock), pings
	// the send times of those in flight by payload, and seq the last
	// payload; jeopardy ends the unconfirmed holds once a break has lasted
	// too long (nil while up).
	alive    time.Time
	pings    map[string]time.Time
	seq      int64
	jeopardy clock.Timer
	// broken: the connection broke since it was last up (the next up
	// confirms the holds).
	broken bool
	// checking: a check runs; checkAt is when the next check of a holding
	// owner is due (held), waitCheckAt of a waiting one (waited).
	checking    bool
	checkAt     time.Time
	waitCheckAt time.Time
	// fails counts the failed tries; kick, while run pauses presenceRetry
	// before its next try (nil otherwise), ends the pause when closed.
	fails int64
	kick  chan struct{}
	// unreleased are the holds ended as lost whose release failed while the
	// presence was down: released again when it comes back (releaseLater).
	unreleased []*hold
}

func newPresence(o *Owner) *presence {
	return &presence{o: o, channel: wire.PresenceChannel(o.ids.Client()), ready: make(chan struct{})}
}

// await returns nil once the owner is subscribed, starting the
// subscription at the first call and waiting for its outcome. While it is
// down after a failure, it has the next try made at once (a pause between
// tries is cut short: a failure seen before this call is never its answer,
// and an acquisition right after Redis came back is not refused for an
// outage that is over), and waits for up to presenceTries fresh tries
// before it returns why the presence is still down. Redis's refusal
// (NOPERM, say) makes the caller give up at once; any other failure is an
// outage that a caller already queued rides out, trying again later.
func (p *presence) await(ctx context.Context) error {
	first := int64(-1) // the failed tries when this call began
	for !p.up.Load() {
		p.mu.Lock()
		if p.ps == nil {
			p.subscribeLocked()
		}
		ready, err, fails := p.ready, p.err, p.fails
		if err != nil && p.kick != nil {
			close(p.kick) // the next try now, for this call
			p.kick = nil
		}
		p.mu.Unlock()
		if first < 0 {
			first = fails
		}
		if err != nil && (isRefusal(err) || fails-first >= presenceTries) {
			return err
		}
		select {
		case <-ready: // an outcome: look again
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// isRefusal reports whether err is an answer of Redis's (NOPERM, an
// unknown command), which trying again would only repeat.
func isRefusal(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// covers reports whether a hold whose acquisition was sent at since is
// covered by the presence: the subscription that is up now was confirmed
// before then, so no waiter can have found it gone since the hold began.
func (p *presence) covers(since time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.up.Load() && !p.since.After(since)
}

// awaitUp waits, unlike await, through failures, until the presence is up
// (true), or ctx or stop ends (false).
func (p *presence) awaitUp(ctx, stop context.Context) bool {
	for !p.up.Load() {
		p.mu.Lock()
		ready := p.ready
		p.mu.Unlock()
		if p.up.Load() {
			break
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return false
		case <-stop.Done():
			return false
		}
	}
	return true
}

// run subscribes, then reads the subscription until it is closed: a
// confirmation brings the presence up, an error takes it down (ending every
// hold), and the next read subscribes again (go-redis re-subscribes on a
// new connection). It subscribes here, not in await: a server that does not
// answer must hold up nobody but this goroutine. It returns once ps is no
// longer the presence's subscription (the owner closed, or follow replaced
// it).
func (p *presence) run(ps *redis.PubSub) {
	defer p.runs.Done()
	failed := false // the last read failed too: pause before the next
	if err := ps.Subscribe(context.Background(), p.channel); err != nil && !p.o.closed.Load() && p.current(ps) {
		p.broke(err) // the channel is kept: the next read subscribes again
		failed = true
	}
	for {
		msg, err := ps.Receive(context.Background())
		if p.o.closed.Load() || !p.current(ps) {
			return
		}
		if err != nil && p.pingRefused(err) {
			continue
		}
		if err != nil {
			p.broke(err)
			if failed {
				// go-redis dialled again inside the read that failed
				// first, and this read failed too: Redis is not there
				// (a restart, a partition), not a blip of a live server.
				// A server that restarts empty could grant the holds
				// to waiters as soon as it is back: they end now.
				p.endUnconfirmed()
				if !p.pause() {
					return
				}
			}
			failed = true
			continue
		}
		failed = false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				p.cameUp()
			}
		case *redis.Pong:
			p.mu.Lock()
			if sent, ok := p.pings[m.Payload]; ok {
				delete(p.pings, m.Payload)
				if sent.After(p.alive) {
					p.alive = sent
				}
			}
			p.mu.Unlock()
		}
	}
}

// subscribeLocked makes a new subscription the presence's, and starts its
// run (which subscribes, off the caller's goroutine); p.mu held. go-redis
// dials it where the client's commands go now.
func (p *presence) subscribeLocked() {
	p.ps = p.o.client.Subscribe(context.Background()) // no channel yet: no call
	p.runs.Add(1)
	go p.run(p.ps)
}

// current reports whether ps is the presence's subscription.
func (p *presence) current(ps *redis.PubSub) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ps == ps
}

// pingRefused reports whether err is Redis refusing a PING of the
// presence's (a user without +ping): an answer all the same, on a
// connection that is up with its subscription, so it moves alive on as a
// PONG would. Answers come in the order their PINGs went, so it answers the
// oldest PING outstanding.
func (p *presence) pingRefused(err error) bool {
	if !isNoPerm(err) || !strings.Contains(strings.ToLower(err.Error()), "'ping'") {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	oldest, first := "", int64(-1)
	for payload := range p.pings {
		if n, _ := strconv.ParseInt(payload, 10, 64); first < 0 || n < first {
			oldest, first = payload, n
		}
	}
	if sent, ok := p.pings[oldest]; ok {
		delete(p.pings, oldest)
		if sent.After(p.alive) {
			p.alive = sent
		}
	}
	return true
}

// cameUp brings the presence up on a confirmed subscription. After a break,
// it PINGs at once (alive moves on) and renews or claims every hold the
// owner had: each one Redis still has is covered from then on, and one it
// lost (a restart) ends as lost. A confirmation while up means that
// go-redis subscribed again on a new connection without a read of the old
// one failing (a PING's write found it broken): a break all the same,
// whose jeopardy is armed here. ups counts the confirmation last, once the
// holds' renewals are scheduled.
func (p *presence) cameUp() {
	p.mu.Lock()
	now := p.o.clock.Now()
	was := p.up.Load()
	back := p.broken || was
	if was {
		p.armJeopardyLocked()
	} else {
		p.up.Store(true)
		close(p.ready)
		p.ready = make(chan struct{})
	}
	p.since = now
	p.err = nil
	p.broken = false
	pending := p.unreleased
	p.unreleased = nil
	p.mu.Unlock()
	for _, h := range pending {
		p.o.releaseLost(h, true)
	}
	if back {
		p.ping()
		for _, h := range p.o.heldWhere(func(h *hold) bool { return h.sentAt().Before(now) }) {
			h.confirmAfterBreak(restartGone)
		}
		// Subscribed again after a break, go-redis dialled where the
		// commands go now: after a failover whose old master hangs
		// (SIGSTOP, a partition), that is the new master, while the
		// waiters' hub stays on the hung one until its own read times out
		// (30 s). It moves too (a blip's cost: one new connection).
		p.o.followHubs()
	}
	p.ups.Add(1)
}

// ping sends a PING on the presence connection, if it is up; its answer
// moves alive on. It does not wait for the answer (run reads it).
func (p *presence) ping() {
	p.mu.Lock()
	ps := p.ps
	if ps == nil || !p.up.Load() {
		p.mu.Unlock()
		return
	}
	p.seq++
	payload := strconv.FormatInt(p.seq, 10)
	if p.pings == nil {
		p.pings = map[string]time.Time{}
	}
	p.pings[payload] = p.o.clock.Now()
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), SessionPing)
	defer cancel()
	_ = ps.Ping(ctx, payload) // a failure shows in run's read
}

// broke takes the presence down after err, and arms the jeopardy: the
// holds not confirmed by alive + PresenceGrace - sessionMargin end then
// (at once if that has passed), before any waiter can have seen the
// presence gone for the grace.
func (p *presence) broke(err error) {
	p.mu.Lock()
	p.brokeLocked(err)
	p.mu.Unlock()
}

// brokeLocked is broke with p.mu held.
func (p *presence) brokeLocked(err error) {
	was := p.up.Load()
	p.up.Store(false)
	p.err = fmt.Errorf("fairlock: presence: the owner's subscription to %s failed: %w", p.channel, err)
	p.fails++
	close(p.ready) // the calls that wait see it
	p.ready = make(chan struct{})
	p.pings = nil // answers to them will never come
	if was {
		p.broken = true
		p.armJeopardyLocked()
	}
}

// armJeopardyLocked arms the jeopardy of a break: the holds not confirmed
// by then end; p.mu held.
func (p *presence) armJeopardyLocked() {
	if p.jeopardy != nil {
		p.jeopardy.Stop()
	}
	p.jeopardy = clock.AtFunc(p.o.clock, p.alive.Add(PresenceGrace-sessionMargin), p.endUnconfirmed)
}

// endUnconfirmed ends, as lost, every hold of the owner that a waiter may
// end once its presence is gone (Place.Presence) and that the presence up
// now does not cover: the break lasted too long, or the hold's renewal
// since has not been answered.
func (p *presence) endUnconfirmed() {
	for _, h := range p.unconfirmed() {
		p.o.giveUp(h, presenceGone)
	}
}

// unconfirmed returns the holds of the owner that a waiter may end once
// its presence is gone (Place.Presence) and that the presence up now does
// not cover.
func (p *presence) unconfirmed() []*hold {
	holds := p.o.heldWhere(func(h *hold) bool { return h.agent.Presence })
	n := 0
	for _, h := range holds {
		if !p.covers(h.sentAt()) {
			holds[n] = h
			n++
		}
	}
	return holds[:n]
}

// pause waits presenceRetry on o's clock, or until an acquisition that
// waits for the presence cuts it short (await); false if the owner closed
// meanwhile.
func (p *presence) pause() bool {
	kick := make(chan struct{})
	p.mu.Lock()
	p.kick = kick
	// A caller that began to wait for this try's outcome sees the pause
	// now, and has the next try made at once: on a fake clock the pause
	// would end only when the test advances it.
	close(p.ready)
	p.ready = make(chan struct{})
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.kick = nil
		p.mu.Unlock()
	}()
	t := make(chan struct{})
	timer := p.o.clock.AfterFunc(presenceRetry, func() { close(t) })
	select {
	case <-t:
	case <-kick:
		timer.Stop()
	case <-p.o.closing.Done():
		timer.Stop()
		return false
	}
	return !p.o.closed.Load()
}

// stop closes the subscription and waits for run to return.
func (p *presence) stop() {
	p.mu.Lock()
	ps := p.ps
	if p.jeopardy != nil {
		p.jeopardy.Stop()
	}
	p.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
	}
	p.runs.Wait()
}

// errElsewhere is why the presence went down when the server that runs the
// owner's commands did not have its subscription (check).
var errElsewhere = errors.New("the server that runs the owner's commands does not have its subscription (a failover moved them)")

// SessionCheck is how often an owner that holds anything checks where its
// subscription is (held): a holder whose client learns of a failover
// follows within it, well within the grace that a waiter, which follows at
// its next try, then counts. waitCheck is how often, at most, an owner
// whose waiters try while it holds nothing checks (waited).
const (
	SessionCheck = 2 * SessionPing
	waitCheck    = 4 * SessionPing
)

// held runs check every SessionCheck while the owner holds anything (from
// the restart check's rounds, every SessionPing, beside the PING), from
// SessionCheck after the round that began a run of holds on: a hold
// shorter than that costs no call.
func (p *presence) held() {
	now := p.o.clock.Now()
	p.mu.Lock()
	if p.checkAt.IsZero() || now.Sub(p.checkAt) > SessionCheck+SessionPing {
		p.checkAt = now.Add(SessionCheck) // the first round of a run of holds
	}
	due := !now.Before(p.checkAt) && !p.checking
	if due {
		p.checking = true
		p.checkAt = now.Add(SessionCheck)
	}
	p.mu.Unlock()
	if due {
		p.check()
	}
}

// waited runs check in the background after an attempt of one of the
// owner's waiters that did not take the lock, at most every waitCheck: a
// waiter counts nobody gone where its own subscription is not (queue.lua's
// absence_counts), so after a failover it must follow too, or a holder that
// dies there would keep its lock until the waiter's subscription moves.
// Only waiters that try ask: the head of a lock held by a holder that keeps
// a presence, every poll; the others when told, or at their heartbeat.
func (p *presence) waited() {
	o := p.o
	now := o.clock.Now()
	p.mu.Lock()
	due := p.up.Load() && !p.checking && !now.Before(p.waitCheckAt)
	if due {
		p.checking = true
		p.waitCheckAt = now.Add(waitCheck)
	}
	p.mu.Unlock()
	if due {
		p.checkInBackground()
	}
}

// checkSoon runs check in the background at once, unless one runs: Redis
// answered that a hold the owner counted on is gone (Owner.suspect), as
// the new master answers after a failover.
func (p *presence) checkSoon() {
	p.mu.Lock()
	due := p.up.Load() && !p.checking
	if due {
		p.checking = true
	}
	p.mu.Unlock()
	if due {
		p.checkInBackground()
	}
}

// checkInBackground runs check, which the caller began (checking), in the
// background; Close waits for it.
func (p *presence) checkInBackground() {
	o := p.o
	o.hubs.ProbeBackground(1)
	if !o.cleanups.add(&o.closed) { // Close waits for it
		o.hubs.ProbeBackground(-1)
		p.mu.Lock()
		p.checking = false
		p.mu.Unlock()
		return
	}
	go func() {
		defer o.hubs.ProbeBackground(-1)
		defer o.cleanups.done()
		p.check()
	}()
}

// Waited tells h's owner that one of its waiters tried and did not take
// the lock (presence.waited); nothing without a presence.
func (h Agent) Waited() {
	if h.Owner.presence != nil {
		h.Owner.presence.waited()
	}
}

// check asks the server that runs the owner's commands whether the owner's
// subscription is there (session.lua): while the owner holds anything
// (held) or its waiters try (waited). It ends a round that held or waited
// began (checking). After a failover (Sentinel's, or an
// address that moved to a promoted replica) the owner's commands reach the
// new master as soon as its client learns of it, while its subscription
// stays on the old one until that server closes it, which Sentinel does
// only when it reconfigures the old master as a replica (10.6 s after
// SENTINEL FAILOVER, measured): the new master's waiters would count the
// owner gone meanwhile. Answered 0 (the subscription is elsewhere), or
// refused with READONLY (the commands reach a replica), the owner follows:
// it subscribes again (follow). Any other failure is the PING's to find.
func (p *presence) check() {
	p.mu.Lock()
	up, since := p.up.Load(), p.since
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.checking = false
		p.mu.Unlock()
	}()
	if !up {
		return
	}
	ctx, cancel := context.WithTimeout(transport.Detached(context.Background()), SessionPing)
	defer cancel()
	n, err := p.o.scripts.Session.Run(ctx, p.o.client, &p.o.mode, []string{p.channel}).Int64()
	switch {
	case err == nil && n > 0:
		return
	case err == nil:
		err = errElsewhere
	case !isReadOnly(err):
		return
	}
	p.follow(since, err)
}

// isReadOnly reports whether err is a replica's refusal of a write.
func isReadOnly(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "READONLY")
}

// follow moves the owner's subscription to the server that runs its
// commands: the one confirmed at since is replaced by a new one, which
// go-redis dials where the client's commands go now (Sentinel's master).
// Until it is confirmed the presence is down, as after a break (why): its
// jeopardy is armed, and its return renews every hold, on that server; the
// waiters' hub moves then too (cameUp), and the owner's recent exits are
// sent again (replay.go). A subscription that broke or came up again since
// the check began is left alone: its own outcome stands.
func (p *presence) follow(since time.Time, why error) {
	p.mu.Lock()
	if p.o.closed.Load() || !p.up.Load() || !p.since.Equal(since) {
		p.mu.Unlock()
		return
	}
	old := p.ps
	p.brokeLocked(why)
	p.subscribeLocked()
	p.mu.Unlock()
	_ = old.Close()
	// The waiters' inbox subscriptions were left on the same server: they
	// move when the new subscription comes up (cameUp, as after any
	// break). Its releases and leaves of the last moments may have reached
	// only the old master.
	p.o.replay()
}

// PresenceAlive returns o's alive (zero without WithPresence): a test that
// breaks its connections waits for a PING to be answered first.
func PresenceAlive(o *Owner) time.Time {
	if o.presence == nil {
		return time.Time{}
	}
	o.presence.mu.Lock()
	defer o.presence.mu.Unlock()
	return o.presence.alive
}

// PresenceConfirmed reports whether o's presence is up and covers every
// hold of o that a waiter may end (true without WithPresence): a test that
// broke its connections waits for it before it lets the jeopardy come.
func PresenceConfirmed(o *Owner) bool {
	if o.presence == nil {
		return true
	}
	return len(o.presence.unconfirmed()) == 0 && o.presence.up.Load()
}

// presenceRefused rejects the deployments presence cannot serve yet:
// Cluster, where a script sees only the subscriptions of its own node.
// Sentinel and addresses that move to a promoted replica are served: a
// script counts an absence only where its caller's own subscription is
// (queue.lua's absence_counts), and the presence subscription follows the master
// (check).
func presenceRefused(client redis.UniversalClient) error {
	if _, ok := client.(*redis.ClusterClient); ok {
		return Invalid("WithPresence does not work on a *redis.ClusterClient (Cluster, or Sentinel through NewFailoverClusterClient): " +
			"a script sees only the subscriptions of its own node (docs/presence.md)")
	}
	return nil
}

// PresenceUps returns how many times o's presence was confirmed (0 without
// WithPresence, or before its first acquisition): a test that breaks its
// connections waits for the count to grow, to know the owner noticed.
func PresenceUps(o *Owner) int64 {
	if o.presence == nil {
		return 0
	}
	return o.presence.ups.Load()
}

// giveUp ends h as lost (why) and, if that ended it, releases it in Redis
// in the background (releaseLost).
func (o *Owner) giveUp(h *hold, why string) {
	o.hubs.ProbeBackground(1)
	o.cleanups.add(nil)
	ended := h.end(ErrLockLost, why)
	if ended {
		o.releaseLost(h, true)
	}
	o.cleanups.done()
	o.hubs.ProbeBackground(-1)
}

// releaseLost releases h, a hold that ended as lost, in Redis, in the
// background (counted as Bounded's background calls are). A release that
// fails while Redis cannot be reached leaves the hold in Redis, where no
// waiter ends it once the owner's presence is back (a break shorter than
// the grace: the hold ended at once, the presence came back before any
// waiter could count it gone), and every waiter would wait for the lease;
// so, with again and a presence, it is released once more when the
// presence comes back (releaseLater), or at once if it is back already.
func (o *Owner) releaseLost(h *hold, again bool) {
	o.hubs.ProbeBackground(1)
	o.cleanups.add(nil)
	go func() {
		defer func() {
			o.cleanups.done()
			o.hubs.ProbeBackground(-1)
		}()
		if err := h.releaseAll(); err != nil && !Refused(err) && again && o.presence != nil {
			o.presence.releaseLater(h)
		}
	}()
}

// releaseLater releases h again when the presence comes back (cameUp), or
// once more at once if it is up: a hold whose release failed.
func (p *presence) releaseLater(h *hold) {
	p.mu.Lock()
	if !p.up.Load() {
		p.unreleased = append(p.unreleased, h)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.o.releaseLost(h, false)
}

// BootKey is where a server records when it first served an acquisition
// (hold.lua's settling): for a while after, it grants nothing, and a try
// that meets that pause waits it out (Settle). Tests that start a server
// and mean to skip the pause set it to "0".
const BootKey = "fairlock:boot"

// Settle waits d on clk, the pause of a server that lost its data (at most
// the presence grace): a try that met it tries once more after, rather
// than report a free lock as taken. It returns ctx's cause if ctx ends
// first.
func Settle(ctx context.Context, clk clock.Clock, d time.Duration) error {
	done := make(chan struct{})
	t := clk.AfterFunc(min(max(d, 0), PresenceGrace), func() { close(done) })
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		t.Stop()
		return context.Cause(ctx)
	}
}

// watchHandOff looks at the queue once more, PresencePoll after a release
// that handed the lock to (or woke) a waiter whose owner keeps a presence
// (Watch). A waiter killed as the release ran looked alive to it (Redis had
// not read its socket's close yet); if the head behind it died too, no
// script would run until a live waiter's heartbeat. This look finds them
// gone, records it, and tells the first live waiter behind to look at the
// grace's end (fair_heartbeat.lua with no entries, sem_watch.lua), or, on
// the reentrant lock, wakes it, and, once a woken waiter holds, tells the
// waiter behind to poll it (reentrant_watch.lua). It runs in the
// background, which the owner's Close waits for: a program that unlocks,
// closes its owner and exits is the commonest releaser (a newcomer's
// worker lost the watch so in 10 of 24 runs when Close cancelled it), and
// a look made at Close itself came too soon (the fault test: the live
// waiter waited for its heartbeat in most runs, 866 ms median). So Close
// waits for it, at most a poll by the wall clock: the owner's clock may be
// a test's that nobody advances any more.
func (h Agent) watchHandOff() {
	if h.Watch == nil {
		return
	}
	closing := h.Owner.closing
	h.background(context.Background(), func(ctx context.Context) {
		due := make(chan struct{})
		t := h.Config.Clock.AfterFunc(PresencePoll, func() { close(due) })
		defer t.Stop()
		select {
		case <-due:
		case <-closing.Done():
			wall := time.NewTimer(PresencePoll)
			defer wall.Stop()
			select {
			case <-due:
			case <-wall.C:
			case <-ctx.Done():
				return
			}
		case <-ctx.Done():
			return
		}
		_ = h.Watch.Run(ctx, h.Client, h.Mode(), h.Keys, wire.Watch(h.Publish, h.Channel, h.Owner.ids.Client())...).Err()
	})
}
