package core

// The test barrier: SyncHubs and Unread tell a test that no message is on
// its way to a waiter.

import (
	"context"
	"strconv"
	"sync/atomic"
)

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
