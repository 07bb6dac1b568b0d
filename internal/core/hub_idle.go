package core

// Idle sweeping: a channel without waiters stays subscribed for hubLinger,
// then is unsubscribed; a hub left with no channel closes its connection.

import (
	"context"
	"time"
)

// CloseIdleHubs unsubscribes every channel without waiters now, and closes
// hubs left with none. Tests call it before checking for leaked goroutines.
func CloseIdleHubs() {
	for _, h := range allHubs() {
		h.closeIdle(0)
	}
}

// allHubs returns every client's hubs.
func allHubs() []*hub {
	var all []*hub
	for _, sh := range allShared() {
		sh.mu.Lock()
		for _, h := range sh.hubs {
			all = append(all, h)
		}
		sh.mu.Unlock()
	}
	return all
}

// closeIdle unsubscribes channels idle for at least linger; a hub with no
// channel left closes; one with channels still idle sweeps again later.
func (h *hub) closeIdle(linger time.Duration) {
	sh := h.shared
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.hubs[h.key] != h {
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
			if h.sharded {
				h.leaving[name]++ // its SUNSUBSCRIBE is not a moved slot
			}
		} else {
			waitMore = true
		}
	}
	empty := len(h.chans) == 0
	if waitMore {
		h.sweep = time.AfterFunc(linger, func() { h.closeIdle(hubLinger) })
	}
	h.mu.Unlock()
	if empty {
		delete(sh.hubs, h.key)
		sh.dropIfEmptyLocked()
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
