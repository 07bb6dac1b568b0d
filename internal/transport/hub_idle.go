package transport

// Idle sweeping: a channel without waiters stays subscribed for hubLinger,
// then is unsubscribed; a hub left with no channel closes its connection.

import (
	"context"
	"time"
)

// shut closes the hub, whatever channels it has (Hubs.Close).
func (h *hub) shut() {
	h.cmdMu.Lock()
	h.mu.Lock()
	if h.sweep != nil {
		h.sweep.Stop()
		h.sweep = nil
	}
	h.mu.Unlock()
	h.cmdMu.Unlock()
	close(h.closing)
	_ = h.ps.Close()
	<-h.done
}

// closeIdle unsubscribes channels idle for at least linger; a hub with no
// channel left closes; one with channels still idle sweeps again later.
func (h *hub) closeIdle(linger time.Duration) {
	s := h.set
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hubs[h.key] != h {
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
		if h.clk.Now().Sub(ch.idleSince) >= linger {
			idle = append(idle, name)
			delete(h.chans, name)
			if h.sharded {
				h.leaving[name]++ // its SUNSUBSCRIBE is not a moved slot
			}
		} else {
			waitMore = true
		}
	}
	empty := len(h.chans) == 0
	if waitMore {
		h.sweep = h.clk.AfterFunc(linger, func() { h.closeIdle(hubLinger) })
	}
	h.mu.Unlock()
	if empty {
		delete(s.hubs, h.key)
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
