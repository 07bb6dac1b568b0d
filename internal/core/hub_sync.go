package core

// The test barrier: SyncHubs and Unread tell a test that no message is on
// its way to a waiter.

import (
	"context"
	"strconv"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// SyncMarker begins the payload of SyncHubs' markers; no waiter's id does.
// Tests that watch a lock's channel skip such messages.
const SyncMarker = "fairlock-sync-"

// synced ends the SyncHubs wait for payload, once: whoever takes it out of
// syncs closes it.
func (h *hub) synced(payload string) {
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

// SyncHubs returns once every hub has read all that was published to it
// before the call. Each hub publishes a marker on one of its channels, with
// its own client, and waits until it reads it back: a subscriber gets a
// channel's messages in the order they were published, on Redis and on
// miniredis alike (a PING would not do: miniredis may answer it before a
// message it is still writing). Tests use it with Unread and Asleep to know
// that no message is on its way to a waiter before they move a fake clock.
// All hubs publish at once; a hub that cannot publish (its client closed or
// cut off, say) is skipped.
func SyncHubs(ctx context.Context) {
	hubsMu.Lock()
	all := make([]*hub, 0, len(hubs))
	for _, h := range hubs {
		all = append(all, h)
	}
	hubsMu.Unlock()
	type marker struct {
		h       *hub
		payload string
		read    chan struct{}
	}
	markers := make([]marker, 0, len(all))
	for _, h := range all {
		m := marker{h, SyncMarker + strconv.FormatInt(syncSeq.Add(1), 10), make(chan struct{})}
		h.mu.Lock()
		channel := ""
		for name, ch := range h.chans {
			if ch.confirmed {
				channel = name
				break
			}
		}
		if channel != "" {
			h.syncs[m.payload] = m.read
		}
		h.mu.Unlock()
		if channel == "" {
			continue // nothing subscribed, nothing in flight
		}
		markers = append(markers, m)
		// A hub's key is the client it serves, or on Cluster the shard's node.
		client := h.key.(redis.UniversalClient)
		publish := client.Publish
		if h.sharded {
			publish = client.SPublish
		}
		if err := publish(ctx, channel, m.payload).Err(); err != nil {
			h.synced(m.payload) // nothing will come back
		}
	}
	for _, m := range markers {
		select {
		case <-m.read:
		case <-m.h.done:
		case <-ctx.Done():
		}
		m.h.synced(m.payload)
	}
}
