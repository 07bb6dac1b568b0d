package core

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The hub: all waiters of one go-redis client share one pub/sub connection
// (on Cluster, one per shard node, with sharded pub/sub). A channel stays
// subscribed while a local waiter needs it, and for HubLinger after the last
// one left, so a busy lock does not subscribe and unsubscribe at every wait;
// a hub with no channel left closes its connection.
//
// A message on a channel wakes one local waiter per note it carries (notes
// are separated by ';'): the one whose id is the note's first word (the fair
// lock's targeted hand-off and head notice), or, for an empty payload, the
// longest-waiting one (the reentrant lock: one wake-up per client, not the
// herd). When the connection comes back after a failure, messages sent
// meanwhile are lost, so every waiter of every re-confirmed channel is woken
// to try again.

// HubLinger is how long a channel stays subscribed with no waiter.
var HubLinger = 30 * time.Second

var (
	hubsMu sync.Mutex
	hubs   = map[any]*hub{}
)

type hub struct {
	key     any
	ps      *redis.PubSub
	sharded bool
	done    chan struct{} // closed when receive has returned
	closing chan struct{}
	sweep   *time.Timer

	cmdMu   sync.Mutex // orders SUBSCRIBE and UNSUBSCRIBE writes
	mu      sync.Mutex
	chans   map[string]*channel
	pending map[string]int           // subscribe confirmations still to come
	syncs   map[string]chan struct{} // SyncHubs pings awaiting their pong
}

type channel struct {
	ready     chan struct{}
	confirmed bool
	subs      []*Sub
	idleSince time.Time // when the last waiter left; zero while in use
}

// Sub is one waiter's subscription. C delivers wake-ups: a payload, or ""
// for "try again".
type Sub struct {
	C       chan string
	h       *hub
	channel string
	id      string
	ch      *channel
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

// Subscribe registers a waiter with id on the channel name of client,
// subscribing it if needed. Ready is closed once Redis confirmed it.
func Subscribe(ctx context.Context, client redis.UniversalClient, name, id string) (*Sub, error) {
	key, sharded, err := hubKey(ctx, client, name)
	if err != nil {
		return nil, err
	}
	hubsMu.Lock()
	h := hubs[key]
	if h == nil {
		var ps *redis.PubSub
		if sharded {
			ps = key.(*redis.Client).SSubscribe(ctx)
		} else {
			ps = client.Subscribe(ctx)
		}
		h = &hub{key: key, ps: ps, sharded: sharded, done: make(chan struct{}), closing: make(chan struct{}),
			chans: map[string]*channel{}, pending: map[string]int{}, syncs: map[string]chan struct{}{}}
		hubs[key] = h
		go h.receive()
	}
	h.cmdMu.Lock()
	defer h.cmdMu.Unlock()
	hubsMu.Unlock()

	s := &Sub{C: make(chan string, 1), h: h, channel: name, id: id}
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

// SubscribeIfLive registers a waiter on a channel that is already subscribed
// and confirmed, without any network call; otherwise it returns nil. A waiter
// registered before its first attempt needs no second attempt: no message
// can fall between the two.
func SubscribeIfLive(client redis.UniversalClient, name, id string) *Sub {
	var key any = client
	if cc, ok := client.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(context.Background(), name)
		if err != nil {
			return nil
		}
		key = node
	}
	hubsMu.Lock()
	h := hubs[key]
	hubsMu.Unlock()
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.chans[name]
	if ch == nil || !ch.confirmed {
		return nil
	}
	s := &Sub{C: make(chan string, 1), h: h, channel: name, id: id}
	h.attachLocked(ch, s)
	return s
}

func (h *hub) attachLocked(ch *channel, s *Sub) {
	ch.subs = append(ch.subs, s)
	ch.idleSince = time.Time{}
	s.ch = ch
}

// Ready is closed once the subscription is confirmed.
func (s *Sub) Ready() <-chan struct{} { return s.ch.ready }

// Close unregisters the waiter. A wake-up it did not consume is passed on to
// the next waiter when it was meant for anyone. The channel stays subscribed
// for HubLinger.
func (s *Sub) Close() {
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
	case p := <-s.C:
		unread.Add(-1)
		if p == "" {
			h.deliverLocked(ch, "")
		}
	default:
	}
	if len(ch.subs) == 0 {
		ch.idleSince = time.Now()
		if h.sweep == nil {
			h.sweep = time.AfterFunc(HubLinger, func() { h.closeIdle(HubLinger) })
		}
	}
}

// CloseIdleHubs unsubscribes every channel without waiters now, and closes
// hubs left with none. Tests call it before checking for leaked goroutines.
func CloseIdleHubs() {
	hubsMu.Lock()
	all := make([]*hub, 0, len(hubs))
	for _, h := range hubs {
		all = append(all, h)
	}
	hubsMu.Unlock()
	for _, h := range all {
		h.closeIdle(0)
	}
}

// closeIdle unsubscribes channels idle for at least linger; a hub with no
// channel left closes; one with channels still idle sweeps again later.
func (h *hub) closeIdle(linger time.Duration) {
	hubsMu.Lock()
	defer hubsMu.Unlock()
	if hubs[h.key] != h {
		return
	}
	h.cmdMu.Lock()
	h.mu.Lock()
	if h.sweep != nil {
		h.sweep.Stop()
		h.sweep = nil
	}
	var idle []string
	waitMore := false
	for name, ch := range h.chans {
		if len(ch.subs) > 0 {
			continue
		}
		if time.Since(ch.idleSince) >= linger {
			idle = append(idle, name)
			delete(h.chans, name)
		} else {
			waitMore = true
		}
	}
	empty := len(h.chans) == 0
	if waitMore {
		h.sweep = time.AfterFunc(linger, func() { h.closeIdle(HubLinger) })
	}
	h.mu.Unlock()
	if empty {
		delete(hubs, h.key)
		h.cmdMu.Unlock()
		close(h.closing)
		_ = h.ps.Close()
		<-h.done
		return
	}
	if len(idle) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if h.sharded {
			_ = h.ps.SUnsubscribe(ctx, idle...)
		} else {
			_ = h.ps.Unsubscribe(ctx, idle...)
		}
		cancel()
	}
	h.cmdMu.Unlock()
}

// deliverLocked wakes, for each note of payload (notes are separated by
// ';'), the one waiter of ch that the note is for.
func (h *hub) deliverLocked(ch *channel, payload string) {
	for note := range strings.SplitSeq(payload, ";") {
		h.deliverNoteLocked(ch, note)
	}
}

// deliverNoteLocked wakes one waiter of ch for one note: the waiter it names,
// or any waiter for "".
func (h *hub) deliverNoteLocked(ch *channel, payload string) {
	target, _, _ := strings.Cut(payload, " ")
	for _, s := range ch.subs {
		if target != "" && s.id != target {
			continue
		}
		select {
		case s.C <- payload:
			unread.Add(1)
			return
		default:
			if target != "" {
				// A targeted waiter with a wake-up still pending: replace it.
				// A grant matters more than "try again"; of two notes for one
				// entry the later is the newer news (a head notice comes
				// before the grant, never after).
				select {
				case <-s.C:
					unread.Add(-1)
				default:
				}
				s.C <- payload
				unread.Add(1)
				return
			}
		}
	}
}

// receive reads the connection until the hub is closed.
func (h *hub) receive() {
	defer close(h.done)
	ctx := context.Background()
	for {
		msg, err := h.ps.ReceiveTimeout(ctx, 30*time.Second)
		if err != nil {
			if errors.Is(err, redis.ErrClosed) {
				return
			}
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() {
				// Idle: a ping tells a dead connection from a quiet one.
				_ = h.ps.Ping(ctx)
				continue
			}
			// go-redis reconnects and re-subscribes on the next receive.
			select {
			case <-time.After(100 * time.Millisecond):
			case <-h.closing:
				return
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				h.confirmed(m.Channel)
			}
		case *redis.Message:
			h.mu.Lock()
			if ch := h.chans[m.Channel]; ch != nil {
				h.deliverLocked(ch, m.Payload)
			}
			h.mu.Unlock()
		case *redis.Pong:
			h.pong(m.Payload)
		}
	}
}

// confirmed handles a subscribe confirmation: the first makes the channel
// ready; one after a connection failure wakes all its waiters to retry.
func (h *hub) confirmed(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pending[name] > 0 {
		h.pending[name]--
	}
	if h.pending[name] == 0 {
		delete(h.pending, name)
	}
	ch := h.chans[name]
	if ch == nil {
		return
	}
	if !ch.confirmed {
		if h.pending[name] == 0 {
			ch.confirmed = true
			close(ch.ready)
		}
		return
	}
	// A re-subscription after a reconnect: whatever was published meanwhile
	// is lost, so everyone tries again.
	for _, s := range ch.subs {
		select {
		case s.C <- "":
			unread.Add(1)
		default:
		}
	}
}

// SetID changes the id that targeted messages must carry to reach s (a fair
// waiter that re-joined the queue under a new entry).
func (s *Sub) SetID(id string) {
	s.h.mu.Lock()
	s.id = id
	s.h.mu.Unlock()
}

// pong ends the SyncHubs wait for payload, once: whoever takes it out of
// syncs closes it.
func (h *hub) pong(payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.syncs[payload]; c != nil {
		delete(h.syncs, payload)
		close(c)
	}
}

// unread counts wake-ups delivered to a Sub that its waiter has not taken.
var unread atomic.Int64

// Unread returns how many wake-ups, in this process, wait in a Sub for their
// waiter to take them.
func Unread() int { return int(unread.Load()) }

var syncSeq atomic.Int64

// SyncHubs returns once every hub has read all that Redis sent it before the
// call: each hub pings on its pub/sub connection, and Redis answers after the
// messages it queued ahead of the ping. Tests use it with Unread and Asleep to
// know that no message is still on its way to a waiter before they move a
// fake clock. All hubs ping at once; a hub whose connection fails is skipped.
func SyncHubs(ctx context.Context) {
	hubsMu.Lock()
	all := make([]*hub, 0, len(hubs))
	for _, h := range hubs {
		all = append(all, h)
	}
	hubsMu.Unlock()
	type ping struct {
		h       *hub
		payload string
		pong    chan struct{}
	}
	pings := make([]ping, 0, len(all))
	for _, h := range all {
		p := ping{h, "fairlock-sync-" + strconv.FormatInt(syncSeq.Add(1), 10), make(chan struct{})}
		h.mu.Lock()
		h.syncs[p.payload] = p.pong
		h.mu.Unlock()
		pings = append(pings, p)
		if h.ps.Ping(ctx, p.payload) != nil {
			h.pong(p.payload) // nothing will answer
		}
	}
	for _, p := range pings {
		select {
		case <-p.pong:
		case <-p.h.done:
		case <-ctx.Done():
		}
		p.h.pong(p.payload)
	}
}
