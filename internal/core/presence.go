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
	"github.com/redis/go-redis/v9"
)

// Presence: the rule, its bounds and its figures are in docs/presence.md,
// and how it sits in the owner in docs/architecture.md ("Where the owner
// sits"). Here: a leg is one subscription to the owner's presence channel
// (presence_legs.go keeps the set, one per Cluster master). While the owner
// holds anything the leg PINGs every SessionPing; alive is when the latest
// answered PING was sent. After a break the leg subscribes again and
// renews every hold it serves (confirmAfterBreak); a hold not confirmed by
// alive + PresenceGrace - sessionMargin (its jeopardy) ends as lost before
// any waiter can take it. A leg whose subscription is not where its
// commands go subscribes again there (check, follow): a failover.

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

// leg is one subscription of the presence (presence_legs.go): the only one
// on a single server, one per master on Cluster. Everything above is what
// a leg does; the holds it confirms or ends are those whose lock it serves
// (serves).
type leg struct {
	p       *presence
	o       *Owner
	channel string
	// node is where it subscribes: the owner's client, or a Cluster
	// master's. On Cluster, addr is that master's address, route a key
	// that never exists in one of its slots (the session check runs
	// there), and slots the slot ranges it served when last looked up.
	// node is guarded by mu; addr is written under mu and p.mu, slots
	// under p.mu.
	node  redis.UniversalClient
	addr  string
	route string
	slots [][2]int64

	up   atomic.Bool // subscribed: acquisitions may go
	mu   sync.Mutex
	ps   *redis.PubSub  // the current subscription; nil until started
	runs sync.WaitGroup // run's goroutines: one per subscription
	// stopped: stop ran (a look-up dropped the leg): run returns at its
	// next read, and nothing subscribes again.
	stopped bool
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
	answered chan struct{} // closed when alive moves on
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

func newLeg(p *presence, node redis.UniversalClient) *leg {
	return &leg{p: p, o: p.o, channel: p.channel, node: node, ready: make(chan struct{}), answered: make(chan struct{})}
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
func (l *leg) await(ctx context.Context) error {
	first := int64(-1) // the failed tries when this call began
	for !l.up.Load() {
		l.mu.Lock()
		if l.ps == nil {
			l.subscribeLocked()
		}
		ready, err, fails := l.ready, l.err, l.fails
		if err != nil && l.kick != nil {
			close(l.kick) // the next try now, for this call
			l.kick = nil
		}
		l.mu.Unlock()
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
func (l *leg) covers(since time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up.Load() && !l.since.After(since)
}

// vouch reports whether a PING sent within SessionPing of now (as a
// holding owner sends them) was answered on the subscription that was up
// before since: a break read later then arms its jeopardy most of the
// grace ahead, time to subscribe again and confirm the holds, as for any
// holder's blip. An owner that held nothing sent none: vouch sends one,
// and waits for its answer, at most the grace (and while ctx and stop
// last). False if the presence broke or came up anew meanwhile.
func (l *leg) vouch(ctx, stop context.Context, since time.Time) bool {
	recent := l.o.clock.Now().Add(-SessionPing)
	expired := make(chan struct{})
	timer := l.o.clock.AfterFunc(PresenceGrace, func() { close(expired) })
	defer timer.Stop()
	for sent := false; ; sent = true {
		l.mu.Lock()
		if !l.up.Load() || l.since.After(since) {
			l.mu.Unlock()
			return false
		}
		if !l.alive.Before(recent) {
			l.mu.Unlock()
			return true
		}
		answered, ready := l.answered, l.ready
		l.mu.Unlock()
		if !sent {
			l.ping()
		}
		select {
		case <-answered:
		case <-ready:
		case <-expired:
			return false
		case <-ctx.Done():
			return false
		case <-stop.Done():
			return false
		}
	}
}

// awaitUp waits, unlike await, through failures, until the presence is up
// (true), or ctx or stop ends (false).
func (l *leg) awaitUp(ctx, stop context.Context) bool {
	for !l.up.Load() {
		l.mu.Lock()
		ready := l.ready
		l.mu.Unlock()
		if l.up.Load() {
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
func (l *leg) run(ps *redis.PubSub) {
	defer l.runs.Done()
	failed := false // the last read failed too: pause before the next
	if err := ps.Subscribe(context.Background(), l.channel); err != nil && !l.o.closed.Load() && l.current(ps) {
		l.broke(err) // the channel is kept: the next read subscribes again
		failed = true
	}
	for {
		msg, err := ps.Receive(context.Background())
		if l.o.closed.Load() || !l.current(ps) {
			return
		}
		if err != nil && l.pingRefused(err) {
			continue
		}
		if err != nil {
			l.broke(err)
			if failed {
				// go-redis dialled again inside the read that failed
				// first, and this read failed too: Redis is not there
				// (a restart, a partition), not a blip of a live server.
				// A server that restarts empty could grant the holds
				// to waiters as soon as it is back: they end now.
				l.endUnconfirmed(time.Time{})
				if !l.pause() || l.relocate(ps) {
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
				l.cameUp()
			}
		case *redis.Pong:
			l.mu.Lock()
			if sent, ok := l.pings[m.Payload]; ok {
				delete(l.pings, m.Payload)
				l.answeredLocked(sent)
			}
			l.mu.Unlock()
		}
	}
}

// subscribeLocked makes a new subscription the presence's, and starts its
// run (which subscribes, off the caller's goroutine); p.mu held. go-redis
// dials it where the client's commands go now.
func (l *leg) subscribeLocked() {
	if l.stopped {
		return
	}
	l.ps = l.node.Subscribe(context.Background()) // no channel yet: no call
	l.runs.Add(1)
	go l.run(l.ps)
}

// current reports whether ps is the presence's subscription.
func (l *leg) current(ps *redis.PubSub) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ps == ps && !l.stopped
}

// pingRefused reports whether err is Redis refusing a PING of the
// presence's (a user without +ping): an answer all the same, on a
// connection that is up with its subscription, so it moves alive on as a
// PONG would. Answers come in the order their PINGs went, so it answers the
// oldest PING outstanding.
func (l *leg) pingRefused(err error) bool {
	if !isNoPerm(err) || !strings.Contains(strings.ToLower(err.Error()), "'ping'") {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	oldest, first := "", int64(-1)
	for payload := range l.pings {
		if n, _ := strconv.ParseInt(payload, 10, 64); first < 0 || n < first {
			oldest, first = payload, n
		}
	}
	if sent, ok := l.pings[oldest]; ok {
		delete(l.pings, oldest)
		l.answeredLocked(sent)
	}
	return true
}

// answeredLocked moves alive on to sent, when a PING answered was sent;
// l.mu held.
func (l *leg) answeredLocked(sent time.Time) {
	if sent.After(l.alive) {
		l.alive = sent
		close(l.answered) // vouch sees it
		l.answered = make(chan struct{})
	}
	if l.p.probe != nil {
		l.p.probe.PresenceAnswered(l.o, sent)
	}
}

// cameUp brings the presence up on a confirmed subscription. After a break,
// it PINGs at once (alive moves on) and renews or claims every hold the
// owner had: each one Redis still has is covered from then on, and one it
// lost (a restart) ends as lost. A confirmation while up means that
// go-redis subscribed again on a new connection without a read of the old
// one failing (a PING's write found it broken): a break all the same,
// whose jeopardy is armed here. The probe hears of the confirmation last,
// once the holds' renewals are scheduled.
func (l *leg) cameUp() {
	l.mu.Lock()
	now := l.o.clock.Now()
	was := l.up.Load()
	back := l.broken || was
	if was {
		l.armJeopardyLocked()
	} else {
		l.up.Store(true)
		close(l.ready)
		l.ready = make(chan struct{})
	}
	l.since = now
	l.err = nil
	l.broken = false
	pending := l.unreleased
	l.unreleased = nil
	l.mu.Unlock()
	for _, h := range pending {
		l.o.releaseLost(h, true)
	}
	if back {
		l.ping()
		for _, h := range l.o.heldWhere(func(h *hold) bool { return h.sentAt().Before(now) && l.serves(h.agent.Keys[0]) }) {
			h.confirmAfterBreak(restartGone)
		}
		// Subscribed again after a break, go-redis dialled where the
		// commands go now: after a failover whose old master hangs
		// (SIGSTOP, a partition), that is the new master, while the
		// waiters' hub stays on the hung one until its own read times out
		// (30 s). It moves too (a blip's cost: one new connection).
		l.o.followHubs()
	}
	if l.p.probe != nil {
		l.p.probe.PresenceUp(l.o)
	}
}

// ping sends a PING on the presence connection, if it is up; its answer
// moves alive on. It does not wait for the answer (run reads it).
func (l *leg) ping() {
	l.mu.Lock()
	ps := l.ps
	if ps == nil || !l.up.Load() {
		l.mu.Unlock()
		return
	}
	l.seq++
	payload := strconv.FormatInt(l.seq, 10)
	if l.pings == nil {
		l.pings = map[string]time.Time{}
	}
	l.pings[payload] = l.o.clock.Now()
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), SessionPing)
	defer cancel()
	_ = ps.Ping(ctx, payload) // a failure shows in run's read
}

// broke takes the presence down after err, and arms the jeopardy: the
// holds not confirmed by alive + PresenceGrace - sessionMargin end then
// (at once if that has passed), before any waiter can have seen the
// presence gone for the grace.
func (l *leg) broke(err error) {
	l.mu.Lock()
	l.brokeLocked(err)
	l.mu.Unlock()
}

// brokeLocked is broke with p.mu held.
func (l *leg) brokeLocked(err error) {
	was := l.up.Load()
	l.up.Store(false)
	l.err = fmt.Errorf("fairlock: presence: the owner's subscription to %s failed: %w", l.channel, err)
	l.fails++
	close(l.ready) // the calls that wait see it
	l.ready = make(chan struct{})
	l.pings = nil // answers to them will never come
	if was {
		l.broken = true
		l.armJeopardyLocked()
	}
}

// armJeopardyLocked arms the jeopardy of a break: the holds not confirmed
// by then end; p.mu held.
func (l *leg) armJeopardyLocked() {
	if l.jeopardy != nil {
		l.jeopardy.Stop()
	}
	due := l.alive.Add(PresenceGrace - sessionMargin)
	// How late it ran counts from when it was armed, if due had passed:
	// an owner that held nothing sent no PING, and its alive is old.
	meant := due
	if now := l.o.clock.Now(); now.After(meant) {
		meant = now
	}
	l.jeopardy = clock.AtFunc(l.o.clock, due, func() { l.endUnconfirmed(meant) })
}

// endUnconfirmed ends, as lost, every hold of the owner that a waiter may
// end once its presence is gone (Place.Presence) and that the presence up
// now does not cover: the break lasted too long, or the hold's renewal
// since has not been answered. due is when the jeopardy that ended them
// was meant to (zero if none did).
func (l *leg) endUnconfirmed(due time.Time) {
	for _, h := range l.unconfirmed() {
		l.o.giveUp(h, presenceGone, due)
	}
}

// unconfirmed returns the holds of the owner that a waiter may end once
// its presence is gone (Place.Presence) and that the presence up now does
// not cover.
func (l *leg) unconfirmed() []*hold {
	holds := l.o.heldWhere(func(h *hold) bool { return h.agent.Presence && l.serves(h.agent.Keys[0]) })
	n := 0
	for _, h := range holds {
		if !l.covers(h.sentAt()) {
			holds[n] = h
			n++
		}
	}
	return holds[:n]
}

// pause waits presenceRetry on o's clock, or until an acquisition that
// waits for the presence cuts it short (await); false if the owner closed
// meanwhile.
func (l *leg) pause() bool {
	kick := make(chan struct{})
	l.mu.Lock()
	l.kick = kick
	// A caller that began to wait for this try's outcome sees the pause
	// now, and has the next try made at once: on a fake clock the pause
	// would end only when the test advances it.
	close(l.ready)
	l.ready = make(chan struct{})
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.kick = nil
		l.mu.Unlock()
	}()
	t := make(chan struct{})
	timer := l.o.clock.AfterFunc(presenceRetry, func() { close(t) })
	select {
	case <-t:
	case <-kick:
		timer.Stop()
	case <-l.o.closing.Done():
		timer.Stop()
		return false
	}
	return !l.o.closed.Load()
}

// stop closes the subscription and waits for run to return. Closing it is
// not enough by itself: a run whose read failed keeps reading (go-redis
// subscribes again) for as long as ps is the leg's, so it is marked
// stopped first (a look-up that dropped a leg whose run was between two
// failed reads waited for it forever, and so did the acquisition that
// made the look-up, past its deadline).
func (l *leg) stop() {
	l.mu.Lock()
	l.stopped = true
	ps := l.ps
	if l.jeopardy != nil {
		l.jeopardy.Stop()
	}
	l.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
	}
	l.runs.Wait()
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
func (l *leg) held() {
	now := l.o.clock.Now()
	l.mu.Lock()
	if l.checkAt.IsZero() || now.Sub(l.checkAt) > SessionCheck+SessionPing {
		l.checkAt = now.Add(SessionCheck) // the first round of a run of holds
	}
	due := !now.Before(l.checkAt) && !l.checking
	if due {
		l.checking = true
		l.checkAt = now.Add(SessionCheck)
	}
	l.mu.Unlock()
	if due {
		l.check()
	}
}

// waited runs check in the background after an attempt of one of the
// owner's waiters that did not take the lock, at most every waitCheck: a
// waiter counts nobody gone where its own subscription is not (queue.lua's
// absence_counts), so after a failover it must follow too, or a holder that
// dies there would keep its lock until the waiter's subscription moves.
// Only waiters that try ask: the head of a lock held by a holder that keeps
// a presence, every poll; the others when told, or at their heartbeat.
func (l *leg) waited() {
	o := l.o
	now := o.clock.Now()
	l.mu.Lock()
	due := l.up.Load() && !l.checking && !now.Before(l.waitCheckAt)
	if due {
		l.checking = true
		l.waitCheckAt = now.Add(waitCheck)
	}
	l.mu.Unlock()
	if due {
		l.checkInBackground()
	}
}

// checkSoon runs check in the background at once, unless one runs: Redis
// answered that a hold the owner counted on is gone (Owner.suspect), as
// the new master answers after a failover.
func (l *leg) checkSoon() {
	l.mu.Lock()
	due := l.up.Load() && !l.checking
	if due {
		l.checking = true
	}
	l.mu.Unlock()
	if due {
		l.checkInBackground()
	}
}

// checkInBackground runs check, which the caller began (checking), in the
// background; Close waits for it.
func (l *leg) checkInBackground() {
	o := l.o
	o.hubs.ProbeBackground(1)
	if !o.cleanups.add(&o.closed) { // Close waits for it
		o.hubs.ProbeBackground(-1)
		l.mu.Lock()
		l.checking = false
		l.mu.Unlock()
		return
	}
	go func() {
		defer o.hubs.ProbeBackground(-1)
		defer o.cleanups.done()
		l.check()
	}()
}

// Waited tells ag's owner that one of its waiters tried and did not take
// the lock (presence.waited); nothing without a presence.
func (ag Agent) Waited() {
	if ag.Owner.presence != nil {
		ag.Owner.presence.waited(ag.Keys[0])
	}
}

// check asks the server that runs the owner's commands whether the owner's
// subscription is there (session.lua), while the owner holds anything
// (held) or its waiters try (waited); it ends the round they began
// (checking). After a failover the commands reach the new master at once,
// while the subscription stays on the old one until that server closes it
// (10.6 s after SENTINEL FAILOVER, measured), so the new master's waiters
// would count the owner gone. Answered 0, or refused with READONLY, the
// owner follows: it subscribes again (follow). Any other failure is the
// PING's to find.
func (l *leg) check() {
	l.mu.Lock()
	up, since := l.up.Load(), l.since
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.checking = false
		l.mu.Unlock()
	}()
	if !up {
		return
	}
	ctx, cancel := context.WithTimeout(transport.Detached(context.Background()), SessionPing)
	defer cancel()
	n, err := l.o.scripts.Session.Run(ctx, l.o.client, &l.o.mode, l.sessionKeys(), l.channel).Int64()
	switch {
	case err == nil && n > 0:
		return
	case err == nil:
		err = errElsewhere
	case !isReadOnly(err):
		if l.route != "" && !isRefusal(err) {
			// No answer in time: on Cluster, a master that hangs while
			// its replica takes over. The client's map of the cluster
			// is reloaded, so that the next check asks the master that
			// serves the slots now (go-redis reloads it by itself only
			// on a redirection, or after ten seconds).
			l.p.cluster.ReloadState(ctx)
		}
		return
	}
	l.follow(since, err, l.master(ctx))
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
func (l *leg) follow(since time.Time, why error, node redis.UniversalClient) {
	l.mu.Lock()
	if l.o.closed.Load() || l.stopped || !l.up.Load() || !l.since.Equal(since) {
		l.mu.Unlock()
		return
	}
	old := l.ps
	l.brokeLocked(why)
	l.moveLocked(node)
	l.subscribeLocked()
	l.mu.Unlock()
	_ = old.Close()
	// The waiters' inbox subscriptions were left on the same server: they
	// move when the new subscription comes up (cameUp, as after any
	// break). Its releases and leaves of the last moments may have reached
	// only the old master.
	l.o.replay()
}

// giveUp ends h as lost (why; by a timer due at due, if not zero) and, if
// that ended it, releases it in Redis in the background (releaseLost).
func (o *Owner) giveUp(h *hold, why string, due time.Time) {
	o.hubs.ProbeBackground(1)
	o.cleanups.add(nil)
	ended := h.lose(why, due)
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
func (l *leg) releaseLater(h *hold) {
	l.mu.Lock()
	if !l.up.Load() {
		l.unreleased = append(l.unreleased, h)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.o.releaseLost(h, false)
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
// (Watch; docs/presence.md, "A release watches its hand-off"). A waiter
// killed as the release ran looked alive to it; this look finds it gone
// and tells the first live waiter behind to look at the grace's end
// (fair_heartbeat.lua with no entries, sem_watch.lua), or, on the
// reentrant lock, wakes it (reentrant_watch.lua). Close waits for it, at
// most a poll by the wall clock (the owner's clock may be a test's that
// nobody advances any more): a program that unlocks, closes its owner and
// exits is the commonest releaser (cancelled by Close, a newcomer's worker
// lost the watch in 10 of 24 runs).
func (ag Agent) watchHandOff() {
	if ag.Watch == nil {
		return
	}
	closing := ag.Owner.closing
	ag.background(context.Background(), func(ctx context.Context) {
		due := make(chan struct{})
		t := ag.Config.Clock.AfterFunc(PresencePoll, func() { close(due) })
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
		_ = ag.Watch.Run(ctx, ag.Client, ag.Mode(), ag.Keys, transport.Watch(ag.Publish, ag.Channel, ag.Owner.ids.Client())...).Err()
	})
}
