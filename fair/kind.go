package fair

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fairlock/fairlock/internal/core"
)

// kind is the fair lock's scripts and its queue wait.
type kind struct {
	m       *core.Mutex
	keys    []string
	channel string
	publish string
	label   string // "<host>\t<pid>\t<label>", as Inspect shows it

	mu        sync.Mutex
	abandoned []string // entries this handle could not take out of the queue
}

func keysOf(name string) []string {
	base := "fairlock:f:{" + name + "}"
	return []string{base, base + ":queue", base + ":deadlines"}
}

var hostname = func() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}()

func newKind(m *core.Mutex) (core.Kind, core.Layout) {
	k := &kind{
		m:       m,
		keys:    keysOf(m.Name),
		channel: "fairlock:f:{" + m.Name + "}:wake",
		publish: core.PublishCommand(m.Client),
		label:   hostname + "\t" + strconv.Itoa(os.Getpid()) + "\t" + m.Config().Label,
	}
	scripts := m.Config().Scripts
	return k, core.Layout{Keys: k.keys, Channel: k.channel, Publish: k.publish,
		Release: scripts.FairRelease, ForceUnlock: scripts.FairForceUnlock}
}

// reply is fair_acquire.lua's answer.
type reply struct {
	held      bool
	count     int
	token     int64
	handoff   bool       // held by a hand-off to this entry, not yet claimed
	grantedAt int64      // handoff: the grant's Redis time, ms
	evicted   bool       // the entry lost its place
	holdEnds  int64      // waiting: when the current hold expires, Redis ms
	head      bool       // waiting: the entry is first in the queue
	clock     redisClock // waiting: where Redis's clock stood
}

// redisClock places Redis times (ms) on this client's clock, from a reply
// that carried Redis's clock: the script ran between the request's send and
// the reply's read, so each bound errs by at most one round trip, on the side
// its use can afford.
type redisClock struct {
	atSend time.Duration // Redis's clock minus this client's at the send
	atRead time.Duration // and at the read
}

// notLater places ms no later than it is on this client's clock: the start
// of a lease.
func (c redisClock) notLater(ms int64) time.Time { return time.UnixMilli(ms).Add(-c.atSend) }

// notEarlier places ms no earlier than it is: when to look whether a hold
// has expired.
func (c redisClock) notEarlier(ms int64) time.Time { return time.UnixMilli(ms).Add(-c.atRead) }

func (k *kind) attempt(ctx context.Context, a core.Attempt, entry, mode string) (reply, error) {
	cfg := k.m.Config()
	sent := cfg.Clock.Now()
	req, stale := k.m.RequestID(), k.m.StaleToken()
	v, err := cfg.Scripts.FairAcquire.Run(ctx, k.m.Client, k.keys,
		k.m.Owner(), entry, req, core.Ms(a.Lease), core.Ms(cfg.WaitTimeout),
		mode, k.label, k.publish, k.channel, stale).Result()
	if err != nil {
		k.m.Undo(ctx, req) // it may have run: never hold the lock unknowingly
		if mode != "try" {
			k.leave(ctx, entry) // nor stay queued
		}
		return reply{}, err
	}
	k.m.StaleHandled(stale)
	read := cfg.Clock.Now()
	r, err := core.Ints(v)
	if err != nil {
		return reply{}, err
	}
	switch {
	case r[0] == 1 && r[3] == 1:
		return reply{held: true, count: int(r[1]), token: r[2], handoff: true, grantedAt: r[4]}, nil
	case r[0] == 1:
		return reply{held: true, count: int(r[1]), token: r[2]}, nil
	case r[0] == -1:
		return reply{evicted: true}, nil
	default:
		redisNow := time.UnixMilli(r[3])
		return reply{holdEnds: r[3] + r[1], head: r[2] == 1,
			clock: redisClock{atSend: redisNow.Sub(sent), atRead: redisNow.Sub(read)}}, nil
	}
}

// Acquire is one Lock or TryLock. It tries once; TryLock with no wait stops
// there (it never queues). Otherwise the first try queued the caller: it
// subscribes, tries again once subscribed (a hand-off sent before that is not
// missed), then sleeps until its hand-off message arrives. The client's
// heartbeat keeps its place and is its fallback. The head also wakes when the
// current hold's lease would run out: it learns how long that is from its
// own attempt's reply when it joins as head, or from the head notice sent to
// it when it becomes head later (a lease that runs out sends no message).
func (k *kind) Acquire(ctx context.Context, a core.Attempt) (*core.Grant, error) {
	cfg := k.m.Config()
	clk := cfg.Clock
	k.leaveAbandoned(ctx)
	entry := k.newEntry()
	mode := "join"
	if a.Wait == 0 && !a.Forever {
		mode = "try"
	}
	// On a busy lock the channel is already subscribed: listen for this
	// entry's hand-off before the first try, and no second try is needed.
	var sub *core.Sub
	if mode == "join" {
		sub = core.SubscribeIfLive(k.m.Client, k.channel, entry)
	}
	if sub != nil {
		defer sub.Close()
	}
	sent := clk.Now()
	r, err := k.attempt(ctx, a, entry, mode)
	if err != nil || r.held || mode == "try" {
		return k.grant(r, a, sent, sent, time.Time{}), err // a fresh entry is never handed the lock
	}

	// Queued. From here on every way out that is not a hold leaves the queue.
	w := core.NewWaiter()
	defer w.Close()
	if !a.Forever {
		t := w.After(clk, a.Wait, core.Timeout)
		defer t.Stop()
	}
	listening := sub != nil
	if sub == nil {
		sub, err = core.Subscribe(ctx, k.m.Client, k.channel, entry)
		if err != nil {
			k.leave(ctx, entry)
			return nil, err
		}
		defer sub.Close()
	}
	hb, mem := joinHeartbeat(k, entry, w)
	defer hb.leave(mem)
	// The last request answered "queued" was processed before any hand-off
	// to this entry: a granted lease counts from no earlier than its send.
	mem.queuedAt(sent)

	// The fallback timer: the head wakes 1 ms after the current hold would
	// expire (Redis ms), in case its lease runs out (no message says so).
	// The expiry is placed on this client's clock (rc: from the latest
	// reply) no earlier than it is, and the timer set at that time, not after
	// a duration: a notice handled late still wakes the head on time.
	rc := r.clock
	var fallback interface{ Stop() bool }
	stopFallback := func() {
		if fallback != nil {
			fallback.Stop()
			fallback = nil
		}
	}
	defer stopFallback()
	wakeAtEnd := func(expiry int64) {
		stopFallback()
		fallback = w.At(clk, rc.notEarlier(expiry).Add(time.Millisecond), core.Retry)
	}
	if listening && r.head {
		wakeAtEnd(r.holdEnds)
	}
	// handedOff is the hold a hand-off (its message, the heartbeat's notice
	// of a lost one, or an attempt's reply) granted this entry at Redis time
	// grantedAt; nil if it came too late to use and could not be claimed, and
	// the next try tells where the entry stands.
	handedOff := func(r reply) *core.Grant {
		return k.usable(ctx, k.grant(r, a, time.Time{}, mem.lastQueued(), rc.notLater(r.grantedAt)), a.Lease)
	}
	try, next := false, "queued" // next: the mode of the next attempt
	if !listening {
		select {
		case <-sub.Ready():
			try = true
		default:
		}
	}
	for {
		if try {
			try = false
			sent := clk.Now()
			r, err := k.attempt(ctx, a, entry, next)
			next = "queued"
			switch {
			case err != nil:
				return nil, err
			case r.held && r.handoff:
				if g := handedOff(r); g != nil {
					return g, nil
				}
				try = true
				continue
			case r.held:
				return k.grant(r, a, sent, sent, time.Time{}), nil
			case r.evicted:
				entry, next, try = k.rejoin(sub, mem, entry), "join", true
				continue
			}
			mem.queuedAt(sent)
			rc = r.clock
			if r.head {
				wakeAtEnd(r.holdEnds)
			} else {
				stopFallback()
			}
		}
		wk := w.Next(ctx, sub)
		switch wk.Reason {
		case core.Ready, core.Retry:
			try = true
		case core.Message:
			target, note, _ := strings.Cut(wk.Payload, " ")
			if target != entry {
				break
			}
			if ms, ok := strings.CutPrefix(note, "head "); ok {
				// This entry became the head while the lock is held: wake
				// when that hold would expire (Redis time, placed on this
				// client's clock).
				expiry, _ := strconv.ParseInt(ms, 10, 64)
				wakeAtEnd(expiry)
				break
			}
			if g := handedOff(parseGrant(note)); g != nil {
				return g, nil
			}
			try = true
		case core.Notice:
			switch {
			case strings.HasPrefix(wk.Payload, "granted "):
				if g := handedOff(parseGrant(strings.TrimPrefix(wk.Payload, "granted "))); g != nil {
					return g, nil
				}
				try = true
			case wk.Payload == "evicted":
				entry, next, try = k.rejoin(sub, mem, entry), "join", true
			}
		case core.Timeout:
			k.leave(ctx, entry)
			return nil, nil
		case core.Cancelled:
			k.leave(ctx, entry)
			return nil, ctx.Err()
		}
	}
}

// parseGrant reads "<token> <grant time>" of a hand-off message or notice.
func parseGrant(note string) reply {
	token, at, _ := strings.Cut(note, " ")
	tok, _ := strconv.ParseInt(token, 10, 64)
	ms, _ := strconv.ParseInt(at, 10, 64)
	return reply{held: true, count: 1, token: tok, handoff: true, grantedAt: ms}
}

// grant turns a reply into a Grant. A fresh acquisition counts its lease from
// sent. A hand-off counts from its grant time, grantedAt, placed no later
// than it is on this client's clock, and never before the last request
// answered "queued" (the grant came after it). Until it is claimed, Redis
// keeps the grant until min(grant time + lease, the entry's deadline), and
// that deadline is at least queued + wait timeout: the server set it after
// that request was sent. So the first lease runs until the earlier of both.
func (k *kind) grant(r reply, a core.Attempt, sent, queued, grantedAt time.Time) *core.Grant {
	if !r.held {
		return nil
	}
	if !r.handoff {
		return &core.Grant{Count: r.count, Token: r.token, Since: sent}
	}
	cfg := k.m.Config()
	since := queued
	if grantedAt.After(since) {
		since = grantedAt
	}
	token, lease, fixed := r.token, a.Lease, a.Fixed
	return &core.Grant{
		Count: r.count, Token: r.token, Since: since,
		First: min(lease, queued.Add(cfg.WaitTimeout).Sub(since)),
		Claim: func(ctx context.Context) (time.Time, bool, error) {
			from := cfg.Clock.Now()
			if fixed {
				from = since // a fixed lease counts from the grant
			}
			ok, err := k.m.Renew(ctx, token, lease, fixed)
			return from, ok, err
		},
	}
}

// usable vets a hand-off before Lock returns it. Normally the grant arrives
// at once and most of its first lease is left. If it came so late (this
// client was cut off from Redis while its entry was still live, say) that
// less than the drift margin of a full first lease (min(lease, wait
// timeout)) is left as this client counts it, Lock would return a hold
// about to be lost: it is claimed now instead, and
// returned as a full hold. If the claim fails, nil: the caller keeps
// waiting, and its next attempt finds out where it stands (a grant still in
// force is reported again; one that ran out is handed on).
func (k *kind) usable(ctx context.Context, g *core.Grant, lease time.Duration) *core.Grant {
	if g == nil || g.Claim == nil {
		return g
	}
	cfg := k.m.Config()
	margin := cfg.Margin(min(lease, cfg.WaitTimeout)) // the longest first lease a grant can have
	if left := g.Since.Add(g.First - margin).Sub(cfg.Clock.Now()); left >= margin {
		return g
	}
	since, ok, err := g.Claim(ctx)
	if err != nil || !ok {
		return nil
	}
	return &core.Grant{Count: g.Count, Token: g.Token, Since: since}
}

// rejoin gives the caller a new entry, for the next attempt to join at the
// tail: its old entry was evicted after it fell silent for longer than its
// wait timeout.
func (k *kind) rejoin(sub *core.Sub, mem *member, old string) string {
	entry := k.newEntry()
	k.m.LogInfo("waiter was evicted from the queue after a stall longer than its wait timeout; re-joining at the tail",
		"entry", old, "new_entry", entry)
	sub.SetID(entry)
	mem.rename(entry)
	return entry
}

// leave takes the entry out of the queue, even when ctx has ended. If Redis
// cannot be reached, the entry stops being refreshed and is evicted within
// one wait timeout.
func (k *kind) leave(ctx context.Context, entry string) {
	ctx, cancel := k.m.CleanupContext(ctx)
	defer cancel()
	if err := k.leaveOnce(ctx, entry); err != nil {
		k.m.LogInfo("leaving the queue failed; the entry will be evicted when its deadline passes", "entry", entry, "error", err)
		// Until then the lock could be handed to it, and this handle would
		// take that grant for its own: the next Lock removes it first.
		k.mu.Lock()
		k.abandoned = append(k.abandoned, entry)
		k.mu.Unlock()
	}
}

func (k *kind) leaveOnce(ctx context.Context, entry string) error {
	return k.m.Config().Scripts.FairLeave.Run(ctx, k.m.Client, k.keys, k.m.Owner(), entry, k.publish, k.channel).Err()
}

// leaveAbandoned removes the entries earlier calls could not remove, giving
// back any grant made to them, before this handle joins again.
func (k *kind) leaveAbandoned(ctx context.Context) {
	k.mu.Lock()
	entries := k.abandoned
	k.abandoned = nil
	k.mu.Unlock()
	if len(entries) == 0 {
		return
	}
	ctx, cancel := k.m.CleanupContext(ctx)
	defer cancel()
	var left []string
	for _, e := range entries {
		if err := k.leaveOnce(ctx, e); err != nil {
			left = append(left, e)
		}
	}
	k.mu.Lock()
	k.abandoned = append(k.abandoned, left...)
	k.mu.Unlock()
}

func (k *kind) newEntry() string { return k.m.Owner() + "/" + core.NextID() }
