package redistest

// The test barrier: a probe (transport.Probe) that counts sleeping waiters and
// unread wake-ups, and SyncHubs, which tells a test that every message
// published so far has reached its waiter. It hears of each owner's
// presence too (core.PresenceProbe): PresenceUps and PresenceAlive. Only tests import this package,
// so only tests carry the instrumentation.

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/transport"
)

// SyncMarker begins the payload of every marker a hub reads back: SyncHubs'
// and the library's own (transport.Sub.Flush, on the rare path that decides
// whether a waiter was rescued). No waiter's id begins so, so no waiter
// takes one. Tests that watch a lock's channel skip them.
const SyncMarker = transport.FlushMarker

type probe struct {
	asleep, unread, background, following atomic.Int64

	mu   sync.Mutex
	hubs []hubFlush // the hubs of the tests' owners, until they stop

	presences sync.Map // *core.Owner → *presenceSeen
}

var _ core.PresenceProbe = (*probe)(nil)

// presenceSeen is what the probe heard of one owner's presence.
type presenceSeen struct {
	ups   atomic.Int64 // legs confirmed
	alive atomic.Int64 // the latest sending of an answered PING (Unix ns)
}

type hubFlush struct {
	flush func(ctx context.Context) error
	done  <-chan struct{}
}

func (p *probe) Asleep(delta int)     { p.asleep.Add(int64(delta)) }
func (p *probe) Unread(delta int)     { p.unread.Add(int64(delta)) }
func (p *probe) Background(delta int) { p.background.Add(int64(delta)) }
func (p *probe) Following(delta int)  { p.following.Add(int64(delta)) }

func (p *probe) seen(o *core.Owner) *presenceSeen {
	v, _ := p.presences.LoadOrStore(o, &presenceSeen{})
	return v.(*presenceSeen)
}

func (p *probe) PresenceUp(o *core.Owner) { p.seen(o).ups.Add(1) }

func (p *probe) PresenceAnswered(o *core.Owner, sent time.Time) {
	s := p.seen(o)
	for n := sent.UnixNano(); ; {
		old := s.alive.Load()
		if n <= old || s.alive.CompareAndSwap(old, n) {
			return
		}
	}
}

// PresenceUps returns how many times the presence of owner (made by
// PresentOwner) was confirmed, a leg up or back up: a test that breaks
// its connections waits for it to grow, to know the owner noticed and
// subscribed again.
func PresenceUps(owner *fairlock.Owner) int64 {
	return theProbe.seen(core.OwnerOf(owner)).ups.Load()
}

// PresenceAlive returns when owner's latest answered presence PING was
// sent (owner's clock; zero before the first): a test that breaks its
// connections waits for a PING to be answered first. The tests that read
// it run on one server, whose presence has one leg.
func PresenceAlive(owner *fairlock.Owner) time.Time {
	n := theProbe.seen(core.OwnerOf(owner)).alive.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func (p *probe) Hub(flush func(ctx context.Context) error, done <-chan struct{}) {
	p.mu.Lock()
	p.hubs = append(p.hubs, hubFlush{flush, done})
	p.mu.Unlock()
}

// liveHubs returns the hubs still reading, and forgets the others.
func (p *probe) liveHubs() []hubFlush {
	p.mu.Lock()
	defer p.mu.Unlock()
	live := p.hubs[:0]
	for _, h := range p.hubs {
		select {
		case <-h.done:
		default:
			live = append(live, h)
		}
	}
	clear(p.hubs[len(live):])
	p.hubs = live
	return slices.Clone(live)
}

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

// Following returns how many owners, in this process, are following the
// master after a sign of a failover (a replay of their exits, a move of
// their hub): background work whose scripts may hand a lock on unasked. A
// specification's step waits for none before it checks.
func Following() int { return int(theProbe.following.Load()) }

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
	var wg sync.WaitGroup
	for _, h := range theProbe.liveHubs() {
		wg.Go(func() { _ = h.flush(ctx) })
	}
	wg.Wait()
}
