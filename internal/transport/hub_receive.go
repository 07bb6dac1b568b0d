package transport

// The receive loop: it reads the hub's pub/sub connection and hands each
// message's notes to the waiters they name.

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// deliverLocked wakes, for each note of payload (notes are separated by
// ';'), the one waiter of ch that the note is for.
func (h *hub) deliverLocked(ch *channel, payload string) {
	for note := range strings.SplitSeq(payload, NoteSeparator) {
		h.deliverNoteLocked(ch, note)
	}
}

// deliverNoteLocked wakes one waiter of ch for one note: the waiter it
// names (any waiter for a note that names none).
func (h *hub) deliverNoteLocked(ch *channel, payload string) {
	target := NoteTarget(payload)
	for _, s := range ch.subs {
		if target != "" && s.id != target {
			continue
		}
		select {
		case s.C <- payload:
			probeUnread(h.set.probe, 1)
			return
		default:
			if target != "" {
				// A targeted waiter with a wake-up still pending: replace it.
				// A grant matters more than "try again"; of two notes for one
				// entry the later is the newer news (a head notice comes
				// before the grant, never after).
				select {
				case <-s.C:
					probeUnread(h.set.probe, -1)
				default:
				}
				s.C <- payload
				probeUnread(h.set.probe, 1)
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
			h.lost()
			// go-redis reconnects and re-subscribes on the next receive.
			select {
			case <-time.After(100 * time.Millisecond):
			case <-h.closing:
				return
			}
			continue
		}
		h.down.Store(false)
		switch m := msg.(type) {
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe":
				h.confirmed(m.Channel)
			case "sunsubscribe":
				h.dropped(m.Channel)
			}
		case *redis.Message:
			h.mu.Lock()
			if strings.HasPrefix(m.Payload, FlushMarker) {
				if read := h.flushes[m.Payload]; read != nil {
					close(read)
					delete(h.flushes, m.Payload)
				}
			} else if ch := h.chans[m.Channel]; ch != nil {
				h.deliverLocked(ch, m.Payload)
			}
			h.mu.Unlock()
		}
	}
}

// lost wakes the waiters that asked (Sub.WakeOnLoss) when the connection
// fails, the first time since something was read.
func (h *hub) lost() {
	if !h.down.CompareAndSwap(false, true) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ch := range h.chans {
		for _, s := range ch.subs {
			if !s.wakeOnLoss {
				continue
			}
			select {
			case s.C <- "":
				probeUnread(h.set.probe, 1)
			default:
			}
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
			if ch.moved {
				// Its waiters came from the master the slot left: what
				// was published in between is lost to them.
				for _, s := range ch.subs {
					select {
					case s.C <- "":
						probeUnread(h.set.probe, 1)
					default:
					}
				}
			}
		}
		return
	}
	// A re-subscription after a reconnect: whatever was published meanwhile
	// is lost, so everyone tries again.
	for _, s := range ch.subs {
		select {
		case s.C <- "":
			probeUnread(h.set.probe, 1)
		default:
		}
	}
}
