package core

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The restart check (docs/architecture.md, "Where the owner sits"). A
// restart or failover that lost the keys closes every connection, while a
// holder would make no call until its next renewal. So while an owner
// holds anything it PINGs each server every RestartCheck on a connection
// of its own (a link; one per Cluster master). A PING answered on a
// connection made since the last answer renews at once each watched hold
// sent before it, which finds its keys gone if they are (not fixed leases
// nor unclaimed hand-offs: their own timers end them). Links linger for
// linkLinger after the last hold. An owner with a presence uses its
// presence connection instead (presence.go). PING is all it sends (no
// INFO, which users without @dangerous may not run); a user that may not
// PING is told once, at Warn.

// DefaultRestartCheck is how often an owner that holds anything PINGs its
// servers.
const DefaultRestartCheck = 500 * time.Millisecond

// linkLinger is how long an owner keeps its links once it holds nothing.
const linkLinger = 30 * time.Second

// restartGone is why a hold ended when a restart's check found it gone.
const restartGone = "Redis restarted or failed over (the owner's connection to it broke and came back) and the lock's keys are gone"

// noPingWarning is what an owner whose user may not PING logs, once.
const noPingWarning = "the restart check cannot run: this Redis user may not run PING, so a holder learns that Redis restarted " +
	"empty (or failed over) only at its next renewal, a third of the lease; grant the user +ping to restore it"

// link is an owner's connection of its own to one server, and how many
// connections it has made: a PING answered after a new one means the last
// one broke.
type link struct {
	c        *redis.Client
	dials    atomic.Int64 // connections made (dialCount)
	answered int64        // dials when a PING last succeeded; only the check reads it
}

// newLink returns a link to the server that opt reaches: a client of its
// own, of one connection, that retries nothing (a broken connection must
// show) and ends each PING at its ctx's deadline.
func newLink(opt *redis.Options) *link {
	o := *opt
	o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns = 1, 0, 1, 1
	o.MaxRetries = -1
	o.ContextTimeoutEnabled = true
	// What the user's client made for itself is not shared.
	o.ClientSideCache, o.ClientSideCacheConfig, o.AutoPipelineOptions, o.Limiter = nil, nil, nil, nil
	o.PushNotificationProcessor = nil
	l := &link{c: redis.NewClient(&o)}
	l.c.AddHook(dialCount{&l.dials})
	return l
}

// dialCount counts a link's connections.
type dialCount struct{ n *atomic.Int64 }

func (d dialCount) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err == nil {
			d.n.Add(1)
		}
		return c, err
	}
}

func (dialCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (dialCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// watchRestartsLocked starts the check, if it is not running; o.mu held.
// An owner that keeps a presence checks on its presence connection
// instead, every SessionPing, the first at once (presence.go): a break of
// it is a restart's sign, and its return renews every hold; it needs no
// link.
func (o *Owner) watchRestartsLocked() {
	o.idleSince = time.Time{}
	if o.restartEvery <= 0 || o.restartTimer != nil || o.closed.Load() {
		return
	}
	first := o.restartEvery
	if o.presence != nil {
		first = 0
	}
	o.restartTimer = o.clock.AfterFunc(first, o.checkRestart)
}

// checkRestart is one round of the check: it PINGs every link, renews at
// once the holds a new connection's answer does not cover, and goes on
// while o holds anything, then while its links linger.
func (o *Owner) checkRestart() {
	o.mu.Lock()
	if o.closed.Load() {
		o.restartTimer = nil
		o.mu.Unlock()
		return
	}
	if o.presence != nil {
		// The presence connection is the link: PING it while o holds
		// anything, and stop when it holds nothing.
		if len(o.holds) == 0 {
			o.restartTimer = nil
			o.mu.Unlock()
			return
		}
		o.restartTimer = o.clock.AfterFunc(o.restartEvery, o.checkRestart)
		o.mu.Unlock()
		o.presence.ping()
		o.presence.held()
		return
	}
	if len(o.holds) == 0 {
		now := o.clock.Now()
		if o.idleSince.IsZero() {
			o.idleSince = now
		}
		if len(o.links) == 0 || now.Sub(o.idleSince) >= linkLinger {
			o.restartTimer = nil
			links := o.links
			o.links = nil
			o.mu.Unlock()
			closeLinks(links)
			return
		}
		o.restartTimer = o.clock.AfterFunc(o.restartEvery, o.checkRestart)
		o.mu.Unlock()
		return
	}
	o.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), o.restartEvery)
	answered := o.pingLinks(ctx)
	cancel()
	if !answered.IsZero() {
		for _, h := range o.heldWhere(func(h *hold) bool { return h.sentAt().Before(answered) }) {
			h.recheck(restartGone)
		}
	}
	o.mu.Lock()
	if o.closed.Load() {
		o.restartTimer = nil
	} else {
		o.restartTimer = o.clock.AfterFunc(o.restartEvery, o.checkRestart)
	}
	o.mu.Unlock()
}

// pingLinks PINGs o's server, or each Cluster master, on its link (made at
// first need), and returns when the latest PING answered on a connection
// made since its link's last answer: zero if none did. The link of a
// server that does not answer is closed: a new one tries next round.
func (o *Owner) pingLinks(ctx context.Context) (answered time.Time) {
	var mu sync.Mutex
	ping := func(ctx context.Context, addr string, opt *redis.Options) {
		l := o.linkTo(addr, opt)
		if l == nil {
			return
		}
		if err := l.c.Ping(ctx).Err(); err != nil {
			if isNoPerm(err) {
				o.warnOnce(noPingWarning, err)
				return
			}
			// A new client next round: go-redis's pool, after a dial
			// failed, dials again only once a second.
			o.dropLinks(func(a string) bool { return a == addr })
			return
		}
		now := o.clock.Now()
		if d := l.dials.Load(); d != l.answered {
			l.answered = d
			mu.Lock()
			if now.After(answered) {
				answered = now
			}
			mu.Unlock()
		}
	}
	switch c := o.client.(type) {
	case *redis.ClusterClient:
		var masters sync.Map
		err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			addr := node.Options().Addr
			masters.Store(addr, true)
			ping(ctx, addr, node.Options())
			return nil
		})
		if err == nil {
			o.dropLinks(func(addr string) bool { _, ok := masters.Load(addr); return !ok })
		}
	case interface{ Options() *redis.Options }: // a *redis.Client, Sentinel's included
		ping(ctx, "", c.Options())
	}
	return answered
}

// linkTo returns o's link to addr, made from opt if there is none; nil once
// o is closed.
func (o *Owner) linkTo(addr string, opt *redis.Options) *link {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed.Load() {
		return nil
	}
	l := o.links[addr]
	if l == nil {
		if o.links == nil {
			o.links = map[string]*link{}
		}
		l = newLink(opt)
		o.links[addr] = l
	}
	return l
}

// dropLinks closes the links whose address gone reports gone (a server
// that did not answer, a Cluster master no longer).
func (o *Owner) dropLinks(gone func(addr string) bool) {
	o.mu.Lock()
	var drop []*link
	for addr, l := range o.links {
		if gone(addr) {
			drop = append(drop, l)
			delete(o.links, addr)
		}
	}
	o.mu.Unlock()
	for _, l := range drop {
		_ = l.c.Close()
	}
}

// stopRestartCheck stops the check and closes the links (Close).
func (o *Owner) stopRestartCheck() {
	o.mu.Lock()
	if o.restartTimer != nil {
		o.restartTimer.Stop()
		o.restartTimer = nil
	}
	links := o.links
	o.links = nil
	o.mu.Unlock()
	closeLinks(links)
}

func closeLinks(links map[string]*link) {
	for _, l := range links {
		_ = l.c.Close()
	}
}

// warnOnce logs msg with err at Warn, on the logger of one of o's holds,
// the first time only.
func (o *Owner) warnOnce(msg string, err error) {
	if !o.warned.CompareAndSwap(false, true) {
		return
	}
	o.mu.Lock()
	var some *hold
	for h := range o.holds {
		some = h
		break
	}
	o.mu.Unlock()
	if some != nil {
		some.agent.logWarn(msg, err)
	}
}

// isNoPerm reports whether err is Redis refusing a command to this user.
func isNoPerm(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "NOPERM")
}
