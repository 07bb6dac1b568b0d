package core

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The hub: all waiters of one go-redis client share one pub/sub connection
// (on Cluster, one per shard node, with sharded pub/sub). Channels are
// subscribed while at least one local waiter needs them.
//
// A message on a channel wakes one local waiter: the one whose id is the
// first word of the payload (the fair lock's targeted hand-off), or, for an
// empty payload, the longest-waiting one (the reentrant lock: one wake-up per
// client, not the herd). When the connection comes back after a failure,
// messages sent meanwhile are lost, so every waiter of every re-confirmed
// channel is woken to try again.

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

	cmdMu   sync.Mutex // orders SUBSCRIBE and UNSUBSCRIBE writes
	mu      sync.Mutex
	refs    int
	chans   map[string]*channel
	pending map[string]int // subscribe confirmations still to come
}

type channel struct {
	ready     chan struct{}
	confirmed bool
	subs      []*Sub
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

// Subscribe registers a waiter with id on the lock's channel of client.
// Ready is closed once Redis confirmed the subscription.
func Subscribe(ctx context.Context, client redis.UniversalClient, name, id string) (*Sub, error) {
	var key any = client
	var sharded bool
	if cc, ok := client.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, name)
		if err != nil {
			return nil, err
		}
		key, sharded = node, true
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
			chans: map[string]*channel{}, pending: map[string]int{}}
		hubs[key] = h
		go h.receive()
	}
	h.refs++
	hubsMu.Unlock()

	s := &Sub{C: make(chan string, 1), h: h, channel: name, id: id}
	h.cmdMu.Lock()
	defer h.cmdMu.Unlock()
	h.mu.Lock()
	ch := h.chans[name]
	first := ch == nil
	if first {
		ch = &channel{ready: make(chan struct{})}
		h.chans[name] = ch
		h.pending[name]++
	}
	ch.subs = append(ch.subs, s)
	s.ch = ch
	h.mu.Unlock()
	if first {
		var err error
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

// Ready is closed once the subscription is confirmed.
func (s *Sub) Ready() <-chan struct{} { return s.ch.ready }

// Close unregisters the waiter. A wake-up it did not consume is passed on to
// the next waiter when it was meant for anyone.
func (s *Sub) Close() {
	h := s.h
	h.cmdMu.Lock()
	h.mu.Lock()
	ch := s.ch
	for i, o := range ch.subs {
		if o == s {
			ch.subs = append(ch.subs[:i], ch.subs[i+1:]...)
			break
		}
	}
	select {
	case p := <-s.C:
		if p == "" {
			h.deliverLocked(ch, "")
		}
	default:
	}
	last := len(ch.subs) == 0
	if last {
		delete(h.chans, s.channel)
	}
	h.mu.Unlock()
	if last {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if h.sharded {
			_ = h.ps.SUnsubscribe(ctx, s.channel)
		} else {
			_ = h.ps.Unsubscribe(ctx, s.channel)
		}
		cancel()
	}
	h.cmdMu.Unlock()

	hubsMu.Lock()
	h.refs--
	closeIt := h.refs == 0
	if closeIt {
		delete(hubs, h.key)
	}
	hubsMu.Unlock()
	if closeIt {
		close(h.closing)
		_ = h.ps.Close()
		<-h.done
	}
}

// deliverLocked wakes one waiter of ch for payload.
func (h *hub) deliverLocked(ch *channel, payload string) {
	target, _, _ := strings.Cut(payload, " ")
	for _, s := range ch.subs {
		if target != "" && s.id != target {
			continue
		}
		select {
		case s.C <- payload:
			return
		default:
			if target != "" {
				// A targeted waiter with a wake-up still pending: replace it,
				// a grant matters more than "try again".
				select {
				case <-s.C:
				default:
				}
				s.C <- payload
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
			if m.Kind != "subscribe" && m.Kind != "ssubscribe" {
				continue
			}
			h.confirmed(m.Channel)
		case *redis.Message:
			h.mu.Lock()
			if ch := h.chans[m.Channel]; ch != nil {
				h.deliverLocked(ch, m.Payload)
			}
			h.mu.Unlock()
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
