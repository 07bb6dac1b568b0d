package redistest

// The test barrier: a probe (inbox.Probe) that counts sleeping waiters and
// unread wake-ups, and SyncHubs, which tells a test that every message
// published so far has reached its waiter. Only tests import this package,
// so only tests carry the instrumentation.

import (
	"context"
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
}

func (p *probe) Asleep(delta int)     { p.asleep.Add(int64(delta)) }
func (p *probe) Unread(delta int)     { p.unread.Add(int64(delta)) }
func (p *probe) Background(delta int) { p.background.Add(int64(delta)) }

// theProbe is installed on every owner this package makes (Owner,
// NewOwner), before it is used: it must see every waiter go to sleep to
// count those asleep. A test-only variable: the library has none.
var theProbe = &probe{}

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

// SyncHubs returns once every hub of the tests' owners has read all that
// was published to it before the call. Each hub gets a marker on one of its
// channels, published with its own client, and SyncHubs waits until the hub
// reads it back (the library's own Flush): a subscriber gets a channel's
// messages in the order they were published, on Redis and on miniredis
// alike (a PING would not do: miniredis may answer it before a message it
// is still writing). Tests use it with Unread and Asleep to know that no
// message is on its way to a waiter before they move a fake clock. All
// hubs flush at once; one that cannot (its client closed or cut off, say)
// is skipped.
func SyncHubs(ctx context.Context) {
	var hubs []inbox.Listening
	for _, o := range allOwners() {
		hubs = append(hubs, inbox.ListeningHubs(core.Inbox(core.OwnerOf(o)))...)
	}
	var wg sync.WaitGroup
	for _, l := range hubs {
		wg.Go(func() { _ = l.Flush(ctx) })
	}
	wg.Wait()
}
