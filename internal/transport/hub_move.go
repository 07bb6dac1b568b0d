package transport

// A moved slot: when a lock's slot moves to another master of a Redis
// Cluster, the old master drops the lock's shard channel, telling its
// subscribers with a SUNSUBSCRIBE they did not ask for. The waiters on it
// would hear nothing more (their next wake-up would be their fallback: a
// timer, the fair lock's heartbeat). So they follow the channel to the hub
// of the master that now owns the slot, and are woken to try again once
// that master confirms the subscription.

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// dropped handles a SUNSUBSCRIBE of name. One the hub asked for (closeIdle)
// is nothing; otherwise the slot moved.
func (h *hub) dropped(name string) {
	h.mu.Lock()
	if h.leaving[name] > 0 {
		if h.leaving[name]--; h.leaving[name] == 0 {
			delete(h.leaving, name)
		}
		h.mu.Unlock()
		return
	}
	subs, ok := h.detachLocked(name)
	h.mu.Unlock()
	if ok {
		// Not on the receive goroutine: moving subscribes on another hub,
		// and this hub must go on reading meanwhile.
		go h.move(name, subs)
	}
}

// detachLocked takes the channel name off h, returning its waiters, for
// move; false if h has no such channel. h.mu held.
func (h *hub) detachLocked(name string) ([]*Sub, bool) {
	ch := h.chans[name]
	if ch == nil {
		return nil, false
	}
	delete(h.chans, name)
	delete(h.pending, name)
	subs := append([]*Sub(nil), ch.subs...)
	if len(h.chans) == 0 && h.sweep == nil {
		// Nothing left here: the sweep closes the connection.
		h.sweep = h.clk.AfterFunc(hubLinger, func() { h.closeIdle(hubLinger) })
	}
	return subs, true
}

// move re-homes the waiters of a dropped channel on the hub of the master
// that owns it now. A waiter whose Close came first is left alone; if the
// new master cannot be found (the cluster cannot be reached, or still names
// the old one after a while), the waiters are woken, and their fallback
// covers them.
func (h *hub) move(name string, subs []*Sub) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var key any
	for {
		if cc, ok := h.client.(interface{ ReloadState(context.Context) }); ok {
			cc.ReloadState(ctx) // the slot map changed (go-redis reloads in the background)
		}
		k, _, err := hubKey(ctx, h.client, name)
		if err == nil && k != h.key {
			key = k
			break
		}
		select {
		case <-ctx.Done():
			wake(subs)
			return
		case <-time.After(25 * time.Millisecond):
		}
	}
	to := h.set.hubAt(key, true)
	if to == nil { // the owner closed: its waiters have gone
		wake(subs)
		return
	}
	defer to.cmdMu.Unlock()
	var stay []*Sub // already confirmed there: woken at once
	first := false
	for _, s := range subs {
		ch, made, confirmed := to.adopt(h, name, s)
		first = first || made
		if ch != nil && confirmed {
			stay = append(stay, s)
		}
	}
	if first {
		_ = to.ps.SSubscribe(ctx, name) // on error go-redis subscribes it again when it reconnects
	}
	wake(stay)
}

// adopt moves s, a waiter of from on channel name, to h, making the
// channel there if h has none (made: the caller subscribes it). A channel
// not yet confirmed wakes its waiters when it is (moved). It returns nil
// if s had left from already (its Close came first), and whether the
// channel was confirmed already (s is to be woken at once).
func (h *hub) adopt(from *hub, name string, s *Sub) (ch *channel, made, confirmed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h != from {
		return nil, false, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ch = h.chans[name]
	if ch == nil {
		ch = &channel{ready: make(chan struct{})}
		h.chans[name] = ch
		h.pending[name]++
		made = true
	}
	s.h = h
	h.attachLocked(ch, s)
	if !ch.confirmed {
		ch.moved = true
	}
	return ch, made, ch.confirmed
}

// wake tells each of subs to try again.
func wake(subs []*Sub) {
	for _, s := range subs {
		select {
		case s.C <- "":
			probeUnread(s.probe, 1)
		default:
		}
	}
}

// Follow moves the waiters of a single-node client's hub to a new
// connection, which the client opens where its commands go now. An owner
// calls it when it finds that its subscriptions were left on a server that
// no longer runs its commands (a Sentinel failover, an address that moved to
// a promoted replica): a hand-off published on the new master would reach
// nobody, and each waiter would learn of its turn from its timers. The
// waiters are woken to try again once the new connection confirms their
// channels; the old connection is closed then. On Cluster, a master that
// lost its slots tells its hubs (dropped), but one that hangs while its
// replica takes over tells nobody: there, Follow moves every channel whose
// slot the client now places on another master to that master's hub, as
// a dropped one moves (followSlots).
func (hs *Hubs) Follow() {
	if cc, ok := hs.client.(*redis.ClusterClient); ok {
		hs.followSlots(cc)
		return
	}
	hs.mu.Lock()
	old := hs.hubs[hs.client]
	if old == nil || hs.closed {
		hs.mu.Unlock()
		return
	}
	delete(hs.hubs, hs.client) // the next waiter subscribes on the new one
	hs.mu.Unlock()

	old.cmdMu.Lock()
	old.mu.Lock()
	moving := old.chans
	old.chans, old.pending = map[string]*channel{}, map[string]int{}
	old.mu.Unlock()
	old.cmdMu.Unlock()

	to := hs.hubAt(hs.client, false)
	if to == nil { // the owner closed: its waiters have gone
		old.shut()
		return
	}
	var names []string
	var ready []<-chan struct{} // the moved channels' confirmations
	var stay []*Sub             // on a channel the new hub had confirmed already: woken at once
	for name, och := range moving {
		for _, s := range och.subs {
			ch, made, confirmed := to.adopt(old, name, s)
			if made {
				names = append(names, name)
				ready = append(ready, ch.ready)
			}
			if ch != nil && confirmed {
				stay = append(stay, s)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), followWait)
	defer cancel()
	if len(names) > 0 {
		_ = to.ps.Subscribe(ctx, names...) // on error go-redis subscribes them again when it reconnects
	}
	to.cmdMu.Unlock()
	wake(stay)
	// The old connection goes once the new one has confirmed (its waiters
	// are woken then: hub_receive.go's confirmed), or after followWait.
	for _, r := range ready {
		select {
		case <-r:
		case <-ctx.Done():
		}
	}
	to.settled(names) // and their wake-ups sent
	old.shut()
}

// settled reports whether every channel of names is confirmed on h. It
// takes h's lock, under which a confirmation's wake-ups are sent: once a
// channel's ready is closed, they have been once this returns.
func (h *hub) settled(names []string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, name := range names {
		if ch := h.chans[name]; ch != nil && !ch.confirmed {
			return false
		}
	}
	return true
}

// followWait bounds how long Follow keeps the old connection while the new
// one is not confirmed.
const followWait = 5 * time.Second

// followSlots is Follow on Cluster: each channel of a hub whose slot the
// client places on another master now moves there (move), and its waiters
// are woken once that master confirms it. The old hub closes once idle.
func (hs *Hubs) followSlots(cc *redis.ClusterClient) {
	hs.mu.Lock()
	hubs := make([]*hub, 0, len(hs.hubs))
	for _, h := range hs.hubs {
		hubs = append(hubs, h)
	}
	hs.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), followWait)
	defer cancel()
	var moves sync.WaitGroup
	for _, h := range hubs {
		h.mu.Lock()
		names := make([]string, 0, len(h.chans))
		for name := range h.chans {
			names = append(names, name)
		}
		h.mu.Unlock()
		for _, name := range names {
			node, err := cc.MasterForKey(ctx, name)
			if err != nil || any(node) == h.key {
				continue
			}
			h.mu.Lock()
			subs, ok := h.detachLocked(name)
			h.mu.Unlock()
			if ok {
				moves.Go(func() { h.move(name, subs) })
			}
		}
	}
	moves.Wait()
}
