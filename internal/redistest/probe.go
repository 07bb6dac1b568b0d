package redistest

// The test barrier: a probe (inbox.Probe) that counts sleeping waiters and
// unread wake-ups, and SyncHubs, which tells a test that every message
// published so far has reached its waiter. Only tests import this package,
// so only tests carry the instrumentation.

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/inbox"
)

// SyncMarker begins the payload of every marker a hub reads back: SyncHubs'
// and the library's own (inbox.Sub.Flush, on the rare path that decides
// whether a waiter was rescued). No waiter's id begins so, so no waiter
// takes one. Tests that watch a lock's channel skip them.
const SyncMarker = inbox.FlushMarker

type probe struct {
	asleep, unread, background atomic.Int64

	mu      sync.Mutex
	markers map[string]chan struct{} // SyncHubs markers not yet read back
}

func (p *probe) Asleep(delta int) { p.asleep.Add(int64(delta)) }
func (p *probe) Unread(delta int) { p.unread.Add(int64(delta)) }

func (p *probe) Background(delta int) { p.background.Add(int64(delta)) }

func (p *probe) Read(_, payload string) {
	if !strings.HasPrefix(payload, SyncMarker) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.markers[payload]; c != nil {
		delete(p.markers, payload)
		close(c)
	}
}

// theProbe is installed before any test runs: it must see every waiter go
// to sleep to count those asleep.
var theProbe = func() *probe {
	p := &probe{markers: map[string]chan struct{}{}}
	inbox.SetProbe(p)
	return p
}()

// Asleep returns how many waiters, in this process, are asleep until a
// timer or a message wakes them.
func Asleep() int { return int(theProbe.asleep.Load()) }

// Unread returns how many wake-ups, in this process, wait in a
// subscription for their waiter to take them.
func Unread() int { return int(theProbe.unread.Load()) }

// Background returns how many calls (core.Bounded: releases, leaving the
// queue, undoing a grant) run that their caller may have stopped waiting
// for.
func Background() int { return int(theProbe.background.Load()) }

var syncSeq atomic.Int64

// SyncHubs returns once every hub has read all that was published to it
// before the call. Each hub gets a marker on one of its channels, published
// with its own client, and SyncHubs waits until the hub reads it back: a
// subscriber gets a channel's messages in the order they were published, on
// Redis and on miniredis alike (a PING would not do: miniredis may answer
// it before a message it is still writing). Tests use it with Unread and
// Asleep to know that no message is on its way to a waiter before they move
// a fake clock. All hubs publish at once; a hub that cannot publish (its
// client closed or cut off, say) is skipped.
func SyncHubs(ctx context.Context) {
	type marker struct {
		payload string
		read    chan struct{}
		done    <-chan struct{}
	}
	var markers []marker
	var hubs []inbox.Listening
	for _, o := range allOwners() {
		hubs = append(hubs, inbox.ListeningHubs(core.Inbox(o))...)
	}
	for _, l := range hubs {
		m := marker{SyncMarker + "sync-" + strconv.FormatInt(syncSeq.Add(1), 10), make(chan struct{}), l.Done}
		theProbe.mu.Lock()
		theProbe.markers[m.payload] = m.read
		theProbe.mu.Unlock()
		markers = append(markers, m)
		if err := l.Publish(ctx, m.payload); err != nil {
			theProbe.Read(l.Channel, m.payload) // nothing will come back
		}
	}
	for _, m := range markers {
		select {
		case <-m.read:
		case <-m.done:
		case <-ctx.Done():
		}
		theProbe.Read("", m.payload) // forget it, if it is still awaited
	}
}
