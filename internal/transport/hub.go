package transport

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/internal/clock"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// The hub: all waiters of one owner share one pub/sub connection (on
// Cluster, one per shard node, with sharded pub/sub); the owner's Hubs keep
// them. A channel stays subscribed while a local waiter needs
// it, and for hubLinger after the last one left, so a busy lock does not subscribe and unsubscribe at every wait;
// a hub with no channel left closes its connection.
//
// A message on a channel wakes one local waiter per note it carries (notes
// are separated by ';'): the one whose id is the note's first word (a
// hand-off, a head notice, served permits, a reentrant lock's wake-up).
// Waiters subscribe to their owner's inbox of the lock (Inbox), where
// only notes for this client's waiters arrive. When the connection comes back
// after a failure, messages sent meanwhile are lost, so every waiter of
// every re-confirmed channel is woken to try again. On Cluster, when a
// lock's slot moves to another master, the old master drops the channel (a
// SUNSUBSCRIBE nobody asked for): its waiters follow it to the hub of the
// new master, and are woken to try again once it confirms (hub_move.go).

// hubLinger is how long a channel stays subscribed with no waiter.
const hubLinger = 30 * time.Second

type hub struct {
	set     *Hubs       // whose hub it is: it is in set.hubs under key
	clk     clock.Clock // set's: its idle channels linger by it
	key     any
	ps      *redis.PubSub
	sharded bool
	client  redis.UniversalClient // whose hub it is (sharded: to find a moved channel's new master)
	done    chan struct{}         // closed when receive has returned
	closing chan struct{}
	sweep   clock.Timer

	cmdMu   sync.Mutex  // orders SUBSCRIBE and UNSUBSCRIBE writes
	down    atomic.Bool // the connection failed and nothing was read since
	mu      sync.Mutex
	chans   map[string]*channel
	pending map[string]int           // subscribe confirmations still to come
	leaving map[string]int           // unsubscribes this hub asked for, not yet confirmed
	flushes map[string]chan struct{} // Flush markers not yet read back
}

type channel struct {
	ready     chan struct{}
	confirmed bool
	moved     bool // its waiters came from another hub: wake them when confirmed
	subs      []*Sub
	idleSince time.Time // when the last waiter left; zero while in use
}

// Sub is one waiter's subscription. C delivers wake-ups: a payload, or ""
// for "try again".
type Sub struct {
	C       chan string
	channel string

	// mu guards h and ch, which change when the channel moves to another
	// hub; it is taken before the hub's mu.
	mu sync.Mutex
	h  *hub
	ch *channel
	id string // guarded by h.mu

	probe Probe // the owner's, if any (NewHubs)

	// wakeOnLoss: the waiter is woken ("" in C) when the connection fails
	// (WakeOnLoss); guarded by h.mu.
	wakeOnLoss bool

	// readyTold: the waiter needs no Ready wake, having been told of the
	// confirmation (Sleeper.Next) or having registered, or made
	// an attempt (Settle), with the channel already confirmed. Only the
	// waiter's goroutine reads and writes it.
	readyTold bool

	// idleBefore is when the channel had last been left by its waiters,
	// if it was idle when this waiter registered (SubscribeIfLive); unused:
	// the waiter waited for nothing (Unused). Guarded by h.mu.
	idleBefore time.Time
	unused     bool
}

func hubKey(ctx context.Context, client redis.UniversalClient, name string) (any, bool, error) {
	if cc, ok := client.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, name)
		if err != nil {
			return nil, false, err
		}
		return node, true, nil
	}
	return client, false, nil
}

// Subscribe registers a waiter with id on the channel name, subscribing it
// if needed. Ready is closed once Redis confirmed it. After Close it
// returns ErrClosed.
func (hs *Hubs) Subscribe(ctx context.Context, name, id string) (*Sub, error) {
	key, sharded, err := hubKey(ctx, hs.client, name)
	if err != nil {
		return nil, err
	}
	h := hs.hubAt(key, sharded)
	if h == nil {
		return nil, ErrClosed
	}
	defer h.cmdMu.Unlock()

	s := &Sub{C: make(chan string, 1), h: h, channel: name, id: id, probe: hs.probe}
	h.mu.Lock()
	ch := h.chans[name]
	first := ch == nil
	if first {
		ch = &channel{ready: make(chan struct{})}
		h.chans[name] = ch
		h.pending[name]++
	}
	h.attachLocked(ch, s)
	h.mu.Unlock()
	if first {
		if sharded {
			err = h.ps.SSubscribe(ctx, name)
		} else {
			err = h.ps.Subscribe(ctx, name)
		}
		// On error go-redis keeps the channel and subscribes it again when it
		// reconnects; that confirmation makes the channel ready.
		_ = err
	}
	return s, nil
}

// hubAt returns the hub of key (made if there is none), with its cmdMu
// held: a hub cannot be closed as idle before its caller adds a channel.
// Once Close has closed the hubs, it returns nil.
func (hs *Hubs) hubAt(key any, sharded bool) *hub {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.closed {
		return nil
	}
	client := hs.client
	h := hs.hubs[key]
	if h == nil {
		var ps *redis.PubSub
		if sharded {
			ps = key.(*redis.Client).SSubscribe(context.Background())
		} else {
			ps = client.Subscribe(context.Background())
		}
		h = &hub{set: hs, clk: hs.clk, key: key, ps: ps, sharded: sharded, client: client, done: make(chan struct{}), closing: make(chan struct{}),
			chans: map[string]*channel{}, pending: map[string]int{}, leaving: map[string]int{},
			flushes: map[string]chan struct{}{}}
		hs.hubs[key] = h
		go h.receive()
		if hs.probe != nil {
			hs.probe.Hub(h.flushAny, h.done)
		}
	}
	h.cmdMu.Lock()
	return h
}

// SubscribeIfLive registers a waiter on a channel that is already subscribed
// and confirmed, without any network call; otherwise it returns nil. A waiter
// registered before its first attempt needs no second attempt: no message
// can fall between the two.
func (hs *Hubs) SubscribeIfLive(name, id string) *Sub {
	var key any = hs.client
	if cc, ok := hs.client.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(context.Background(), name)
		if err != nil {
			return nil
		}
		key = node
	}
	hs.mu.Lock()
	h := hs.hubs[key]
	hs.mu.Unlock()
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.chans[name]
	if ch == nil || !ch.confirmed {
		return nil
	}
	// Registered on a confirmed channel before the caller's first attempt:
	// that attempt sees all that was published before, so no Ready wake.
	s := &Sub{C: make(chan string, 1), h: h, channel: name, id: id, probe: hs.probe, readyTold: true,
		idleBefore: ch.idleSince}
	h.attachLocked(ch, s)
	return s
}

// Unused tells Close that the waiter waited for nothing: its first attempt
// took the lock. Close then leaves the channel's idle time as the waiter
// found it, so that a lock contended once and free since, whose every
// Lock registers on its lingering channel (SubscribeIfLive) and leaves at
// once, has the channel closed hubLinger after its last wait, as any
// other; or every Lock would keep paying to register, for as long as the
// lock is used.
func (s *Sub) Unused() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h.mu.Lock()
	s.unused = true
	s.h.mu.Unlock()
}

func (h *hub) attachLocked(ch *channel, s *Sub) {
	ch.subs = append(ch.subs, s)
	ch.idleSince = time.Time{}
	s.ch = ch
}

// Ready is closed once the subscription is confirmed.
func (s *Sub) Ready() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch.ready
}

// Settle is called just before an attempt. If the subscription is confirmed
// already, the attempt sees everything published before the confirmation,
// so the waiter needs no Ready wake (Sleeper.Next) to try again.
func (s *Sub) Settle() {
	if s.readyTold {
		return
	}
	select {
	case <-s.Ready():
		s.readyTold = true
	default:
	}
}

// Take returns a wake-up waiting in C, if there is one, without blocking.
func (s *Sub) Take() (string, bool) {
	select {
	case p := <-s.C:
		probeUnread(s.probe, -1)
		return p, true
	default:
		return "", false
	}
}

// FlushMarker begins the payload of Flush's markers. No waiter's id begins
// so, so no waiter is handed one; tests that count a lock's messages skip
// them.
const FlushMarker = "fairlock-flush-"

// Flush returns once the hub has read every message published on s's
// channel before the call, so that one on its way to s is in C: it
// publishes a marker on the channel with the hub's own client and waits
// until the hub reads it back. A subscriber gets a channel's messages in
// the order they were published (on miniredis too, where a PING's answer
// may overtake a message still being written). It costs one PUBLISH; the
// waiters call it only on the rare path that decides whether news reached
// them by message.
func (s *Sub) Flush(ctx context.Context) error {
	s.mu.Lock()
	h := s.h
	s.mu.Unlock()
	return h.flush(ctx, s.channel)
}

// flushAny flushes one of h's confirmed channels, if it has one (Probe.Hub).
func (h *hub) flushAny(ctx context.Context) error {
	h.mu.Lock()
	channel := ""
	for name, ch := range h.chans {
		if ch.confirmed {
			channel = name
			break
		}
	}
	h.mu.Unlock()
	if channel == "" {
		return nil // nothing subscribed, nothing in flight
	}
	return h.flush(ctx, channel)
}

// flush publishes a marker on channel, one of h's, and returns once h has
// read it back (Sub.Flush).
func (h *hub) flush(ctx context.Context, channel string) error {
	marker := FlushMarker + uuid.NewString() // other hubs of this process may read it too
	read := make(chan struct{})
	h.mu.Lock()
	h.flushes[marker] = read
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.flushes, marker)
		h.mu.Unlock()
	}()
	var err error
	if h.sharded {
		err = h.client.SPublish(ctx, channel, marker).Err()
	} else {
		err = h.client.Publish(ctx, channel, marker).Err()
	}
	if err != nil {
		return err
	}
	select {
	case <-read:
		return nil
	case <-h.done:
		return redis.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close unregisters the waiter, dropping a wake-up it did not consume (a
// note was for it alone). The channel stays subscribed for hubLinger after
// its last waiter leaves (after the last that waited: Unused).
func (s *Sub) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := s.ch
	for i, o := range ch.subs {
		if o == s {
			ch.subs = append(ch.subs[:i], ch.subs[i+1:]...)
			break
		}
	}
	select {
	case <-s.C:
		probeUnread(s.probe, -1)
	default:
	}
	if len(ch.subs) == 0 {
		ch.idleSince = h.clk.Now()
		if s.unused && !s.idleBefore.IsZero() {
			ch.idleSince = s.idleBefore
		}
		if h.sweep == nil {
			h.sweep = h.clk.AfterFunc(hubLinger, func() { h.closeIdle(hubLinger) })
		}
	}
}

// WakeOnLoss asks for a wake ("" in C, as after a reconnect) when the hub's
// connection fails, once per failure: a reader that must know at once that
// it cannot see (an election's observers) looks for itself then. Waiters do
// not ask: their own calls tell them.
func (s *Sub) WakeOnLoss() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h.mu.Lock()
	s.wakeOnLoss = true
	s.h.mu.Unlock()
}

// SetID changes the id that targeted messages must carry to reach s (a fair
// waiter that re-joined the queue under a new entry).
func (s *Sub) SetID(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h.mu.Lock()
	s.id = id
	s.h.mu.Unlock()
}
