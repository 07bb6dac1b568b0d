package fair

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/transport"
)

// Observers (docs/election.md, "Observers: who leads, by message", has
// when and why each read comes). Every write that changes an election's
// leadership publishes it on its leader channel (transport.LeaderChannel). Each
// owner with observers of an election reads that channel on its own hub
// (one subscription and one message per client) and runs one goroutine, a
// watch, that hands each leadership to all its observers. A watch also
// reads the leadership from Redis (election_leader.lua) where a message
// may have been lost or nothing was published: when its subscription is
// confirmed, observeGrace after the expiry of the leader's lease as it
// last knew it, once per lease while nobody leads and within a second
// after a failed read, and when its pub/sub connection fails.

// observeGrace is how long after a lease's expiry a watch reads who leads.
const observeGrace = 50 * time.Millisecond

// watches are an owner's watches, one per election with observers.
type watches struct {
	mu sync.Mutex
	m  map[string]*watch
}

var watchesOf = core.Service[watches]{New: func() *watches {
	return &watches{m: map[string]*watch{}}
}}

type watch struct {
	key   string // the election's hold key
	owner *core.Owner
	e     *Election // the handle whose first Observe started it: its keys, scripts, lease
	stop  context.CancelFunc
	ctx   context.Context

	mu     sync.Mutex
	outs   map[chan Leadership]struct{}
	latest transport.Leadership
	known  bool  // latest was read or told
	blind  error // why the latest read failed, until one succeeds: what the observers were told
}

// Observe returns a channel that receives who leads the election: the
// current leadership at once (the zero Leadership when nobody leads, or
// once it is known), then every change (a new leader, a new term, a value
// proclaimed). A value with Err says that the observer cannot see who
// leads (Redis cannot be reached, or refuses the script), which the zero
// Leadership would not tell from "nobody leads"; it is sent once, when
// seeing fails, and the next value without Err, within a second of Redis
// answering again, is who leads then. A reader slower than the changes may
// miss some, but the last value it receives is always the latest: each
// send replaces a value not yet received. The channel is closed when ctx
// ends or the owner closes: read it with range (a receive from the closed
// channel gives the zero Leadership).
//
// Changes arrive by message: one per observing client however many
// Observe calls it serves, within a round trip of the change. A takeover
// at a lease's end is a change too, published by the call that makes it
// (the new leader's own, or a heartbeat's hand-off): an observer hears of
// it about when that leader's Campaign returns, not necessarily before. A message lost with a connection is made good
// when the subscription is confirmed again; a leader that dies with no
// candidate behind it (a lease that runs out publishes nothing) is seen
// 50 ms and a round trip after its lease ran out.
// A nil ctx, a zero handle or a closed owner gets a closed channel.
func (e *Election) Observe(ctx context.Context) <-chan Leadership {
	out := make(chan Leadership, 1)
	m := e.core()
	if ctx == nil || m == nil || core.CheckOwner(m.Agent().Owner) != nil || ctx.Err() != nil {
		close(out)
		return out
	}
	w := e.watchFor(out)
	context.AfterFunc(ctx, func() { w.leave(out) })
	return out
}

// watchFor adds out to the owner's watch of the election, starting it for
// the first observer.
func (e *Election) watchFor(out chan Leadership) *watch {
	h := e.m.Agent()
	key := h.Keys[0]
	all := watchesOf.Of(h.Owner)
	all.mu.Lock()
	defer all.mu.Unlock()
	w := all.m[key]
	if w == nil {
		w = &watch{key: key, owner: h.Owner, e: e, outs: map[chan Leadership]struct{}{}}
		// It ends with its last observer, or when the owner closes.
		w.ctx, w.stop = context.WithCancel(core.Closing(h.Owner))
		all.m[key] = w
		go w.run()
	}
	w.mu.Lock()
	w.outs[out] = struct{}{}
	if w.blind != nil {
		offer(out, Leadership{Err: w.blind})
	} else if w.known {
		offer(out, leadershipOf(w.latest))
	}
	w.mu.Unlock()
	return w
}

// leave removes out and closes it; the last one stops the watch.
func (w *watch) leave(out chan Leadership) {
	all := watchesOf.Of(w.owner)
	all.mu.Lock()
	defer all.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.outs[out]; !ok {
		return
	}
	delete(w.outs, out)
	close(out)
	if len(w.outs) == 0 {
		w.stop()
		if all.m[w.key] == w {
			delete(all.m, w.key)
		}
	}
}

// offer puts l in out, replacing a value not yet received. Only the watch
// sends on out, under its lock, so there is room after the drain.
func offer(out chan Leadership, l Leadership) {
	select {
	case <-out:
	default:
	}
	out <- l
}

// tell hands l to every observer if it is news: a version at least the
// latest's (a read made after the message of that version, or the message
// itself) replaces it.
func (w *watch) tell(l transport.Leadership) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.blind == nil && w.known && l.Version < w.latest.Version {
		return // older than what a message already told
	}
	changed := !w.known || w.blind != nil || leadershipOf(l) != leadershipOf(w.latest)
	w.latest, w.known, w.blind = l, true, nil
	if changed {
		for out := range w.outs {
			offer(out, leadershipOf(l))
		}
	}
}

// fail tells every observer that the watch cannot see who leads (err), if
// they have not been told since it last saw.
func (w *watch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.blind != nil {
		return
	}
	w.blind = err
	for out := range w.outs {
		offer(out, Leadership{Err: err})
	}
}

// run reads the election's leader channel and Redis until the watch stops,
// then closes the observers that are left (the owner closed).
func (w *watch) run() {
	defer w.closeAll()
	h := w.e.m.Agent()
	clk := h.Config.Clock
	hubs := core.HubsOf(w.owner)
	sleeper := hubs.NewSleeper()
	defer sleeper.Close()
	var sub *transport.Sub
	for sub == nil {
		s, err := hubs.Subscribe(w.ctx, transport.LeaderChannel(h.Channel), transport.LeadershipNote)
		if errors.Is(err, transport.ErrClosed) {
			return
		}
		if err != nil { // a Cluster client that cannot find the slot's master yet
			w.fail(err)
			again := sleeper.After(clk, time.Second, transport.Retry)
			wk := sleeper.Next(w.ctx, nil)
			again.Stop()
			if wk.Reason == transport.Cancelled {
				return
			}
			continue
		}
		sub = s
	}
	defer sub.Close()
	sub.WakeOnLoss()
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	arm := func(at time.Time) {
		if timer != nil {
			timer.Stop()
		}
		timer = sleeper.At(clk, at, transport.Retry)
	}
	for {
		wk := sleeper.Next(w.ctx, sub)
		switch wk.Reason {
		case transport.Cancelled:
			return
		case transport.Message:
			l, err := transport.ParseLeadership(wk.Payload)
			if err != nil {
				continue
			}
			w.tell(l)
			arm(w.fallback(l, clk.Now()))
		default: // confirmed, reconnected, or a fallback timer
			l, err := w.e.read(w.ctx)
			if err != nil {
				if w.ctx.Err() != nil {
					return
				}
				w.fail(err)
				arm(clk.Now().Add(min(time.Second, h.Config.Lease)))
				continue
			}
			w.tell(l)
			arm(w.fallback(l, clk.Now()))
		}
	}
}

// fallback is when to read the leadership again after learning l at now:
// observeGrace after the leader's lease runs out (Redis's clock placed on
// ours by the text's own now, so a message read late errs early, never
// late), or one lease from now while nobody leads.
func (w *watch) fallback(l transport.Leadership, now time.Time) time.Time {
	if l.Term == 0 {
		return now.Add(w.e.m.Config().Lease)
	}
	return now.Add(time.Duration(l.Expiry-l.Now)*time.Millisecond + observeGrace)
}

// closeAll closes the observers left when the watch ends (its owner
// closed; the last observer's leave stops it otherwise).
func (w *watch) closeAll() {
	all := watchesOf.Of(w.owner)
	all.mu.Lock()
	defer all.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	for out := range w.outs {
		close(out)
		delete(w.outs, out)
	}
	if all.m[w.key] == w {
		delete(all.m, w.key)
	}
}
