package fair

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/transport"
)

// The heartbeat: queued waiters keep their place by pushing their deadline
// forward every wait timeout / 3, one script call per beat for all of an
// owner's waiters on a lock. It is every waiter's fallback too: the script
// evicts dead heads, hands a free lock to the live head, and reports grants
// and head notices whose message may have been lost (a rescue, if it was).

// heartbeats are an owner's heartbeats, one per lock with queued waiters
// (keyed by its hold key: an owner runs all its handles on one clock and
// one set of scripts).
type heartbeats struct {
	mu sync.Mutex
	m  map[string]*heartbeat
}

var heartbeatsOf = core.Service[heartbeats]{New: func() *heartbeats {
	return &heartbeats{m: map[string]*heartbeat{}}
}}

// beatBatch bounds the waiters refreshed by one script call.
const beatBatch = 1000

type heartbeat struct {
	key   string // the lock's hold key (a fair lock and a semaphore's gate may share a name)
	owner *core.Owner
	qu    *queue // any member's queue: same keys, channel and scripts

	mu      sync.Mutex
	members map[*member]struct{}
	every   time.Duration
	timer   clock.Timer
}

type member struct {
	mu     sync.Mutex
	entry  string
	wait   time.Duration
	w      *transport.Sleeper
	queued atomic.Int64 // unix nanos of the last request answered "queued"
}

func (m *member) queuedAt(t time.Time) {
	for {
		old := m.queued.Load()
		if t.UnixNano() <= old || m.queued.CompareAndSwap(old, t.UnixNano()) {
			return
		}
	}
}

func (m *member) lastQueued() time.Time { return time.Unix(0, m.queued.Load()) }

func (m *member) rename(entry string) {
	m.mu.Lock()
	m.entry = entry
	m.mu.Unlock()
}

func (m *member) current() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.entry
}

// joinHeartbeat adds a queued waiter to its client's heartbeat on the lock,
// starting the beat with the first one; the beat runs at the pace of the
// shortest wait timeout among its waiters.
func joinHeartbeat(qu *queue, entry string, w *transport.Sleeper) (*heartbeat, *member) {
	cfg := qu.h.Config
	key := qu.h.Keys[0]
	mem := &member{entry: entry, wait: cfg.WaitTimeout, w: w}
	beats := heartbeatsOf.Of(qu.h.Owner)
	beats.mu.Lock()
	defer beats.mu.Unlock()
	hb := beats.m[key]
	if hb == nil {
		hb = &heartbeat{key: key, owner: qu.h.Owner, qu: qu, members: map[*member]struct{}{}}
		beats.m[key] = hb
	}
	hb.mu.Lock()
	defer hb.mu.Unlock()
	hb.members[mem] = struct{}{}
	if every := mem.wait / 3; hb.timer == nil || every < hb.every {
		if hb.timer != nil {
			hb.timer.Stop()
		}
		hb.every = every
		hb.timer = cfg.Clock.AfterFunc(every, hb.beat)
	}
	return hb, mem
}

// leave removes a waiter; the last one stops the beat.
func (hb *heartbeat) leave(mem *member) {
	beats := heartbeatsOf.Of(hb.owner)
	beats.mu.Lock()
	defer beats.mu.Unlock()
	hb.mu.Lock()
	defer hb.mu.Unlock()
	delete(hb.members, mem)
	if len(hb.members) == 0 {
		if hb.timer != nil {
			hb.timer.Stop()
			hb.timer = nil
		}
		if beats.m[hb.key] == hb {
			delete(beats.m, hb.key)
		}
	}
}

// beat refreshes every member's deadline and delivers what it learned.
func (hb *heartbeat) beat() {
	hb.mu.Lock()
	members := make([]*member, 0, len(hb.members))
	for m := range hb.members {
		members = append(members, m)
	}
	every := hb.every
	hb.mu.Unlock()
	for start := 0; start < len(members); start += beatBatch {
		hb.beatBatch(members[start:min(start+beatBatch, len(members))], every)
	}
	hb.mu.Lock()
	defer hb.mu.Unlock()
	if len(hb.members) > 0 && hb.timer != nil {
		hb.timer.Stop() // a join may have re-armed it meanwhile
		hb.timer = hb.qu.h.Config.Clock.AfterFunc(hb.every, hb.beat)
	}
}

func (hb *heartbeat) beatBatch(members []*member, every time.Duration) {
	qu := hb.qu
	cfg := qu.h.Config
	entries := make([]string, len(members))
	waits := make([]int64, len(members))
	for i, m := range members {
		entries[i], waits[i] = m.current(), transport.Ms(m.wait)
	}
	args := transport.Heartbeat(qu.h.PublishArg(), qu.h.ChannelArg(), entries, waits)
	// A beat that outlasts the interval is no use: the next one is due.
	ctx, cancel := context.WithTimeout(transport.Detached(context.Background()), min(cfg.CleanupTimeout, max(every, 10*time.Millisecond))) // nobody waits on it: go-redis bounds it
	defer cancel()
	sent := cfg.Clock.Now()
	v, err := cfg.Scripts.FairHeartbeat.Run(ctx, qu.h.Client, qu.h.Mode(), qu.h.Keys, args...).Result()
	if err != nil {
		qu.h.Info("queue heartbeat failed; waiters are evicted if none succeeds within their wait timeout", "error", err)
		for _, m := range members {
			m.w.Fire(transport.Notice, unreachable{err}) // each decides whether its place lasts
		}
		return
	}
	r, err := transport.DecodeHeartbeat(v, len(members))
	if err != nil {
		return
	}
	for i, m := range members {
		if m.current() != entries[i] {
			continue // it re-joined meanwhile: this news is about its old entry
		}
		switch s := r.Status[i]; {
		case s == transport.BeatQueued:
			m.queuedAt(sent)
		case s == transport.BeatHead:
			m.queuedAt(sent)
			m.w.Fire(transport.Notice, beatHead{expiry: r.Expiry})
		case s == transport.BeatBehindGone:
			m.queuedAt(sent)
			m.w.Fire(transport.Notice, beatLook{expiry: r.Expiry})
		case s < 0:
			m.w.Fire(transport.Notice, evicted{})
		default:
			m.w.Fire(transport.Notice, beatGrant{HandOff: transport.HandOff{Token: s, GrantedAt: r.Granted}, byBeat: r.ByBeat})
		}
	}
}
