package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// The kinds of lock, as inspect's -kind, ls and the JSON name them.
const (
	kindFair      = "fair"
	kindReentrant = "reentrant"
	kindSemaphore = "semaphore"
	kindRW        = "rw"
	kindElection  = "election"
)

var kinds = []string{kindFair, kindReentrant, kindSemaphore, kindRW, kindElection}

// what is a kind as a sentence names it.
func what(kind string) string {
	switch kind {
	case kindFair:
		return "fair lock"
	case kindReentrant:
		return "reentrant lock"
	case kindSemaphore:
		return "semaphore"
	case kindElection:
		return "election"
	}
	return "read-write lock"
}

// keysOf are the keys a lock of kind keeps while it is in use: any of them
// present means the lock is live.
func keysOf(kind, name string) []string {
	switch kind {
	case kindFair:
		return transport.QueueKeys(transport.FairBase(name))
	case kindReentrant:
		return transport.QueueKeys(transport.ReentrantKey(name))
	case kindElection:
		return transport.QueueKeys(transport.ElectionBase(name))
	case kindSemaphore:
		return append([]string{transport.SemaphoreBase(name)}, transport.QueueKeys(transport.GateBase(transport.SemaphoreBase(name)))...)
	}
	return append([]string{transport.RWBase(name)}, transport.QueueKeys(transport.GateBase(transport.RWBase(name)))...)
}

// errNoSuchLock: no lock of the name (and kind) has keys in Redis.
var errNoSuchLock = errors.New("no such lock")

// kindsOf returns the kinds of lock named name that have keys in Redis
// (usually one; a name used for two kinds has two).
// One round trip: every key has the name's hash tag, so all go to one node.
func kindsOf(ctx context.Context, client redis.UniversalClient, name string) ([]string, error) {
	counts := make([]*redis.IntCmd, len(kinds))
	if _, err := client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range kinds {
			counts[i] = p.Exists(ctx, keysOf(k, name)...)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	var out []string
	for i, k := range kinds {
		if counts[i].Val() > 0 {
			out = append(out, k)
		}
	}
	return out, nil
}

// view is one lock as inspect and ls show it, and as -json writes it.
type view struct {
	Kind string `json:"kind"` // fair, reentrant, semaphore, rw or election
	Name string `json:"name"`
	// Error: ls could not read this lock (a lock of another data layout,
	// say); the other fields are empty.
	Error string `json:"error,omitempty"`
	// Permits and InUse: a semaphore's number of permits and those held.
	Permits int          `json:"permits,omitempty"`
	InUse   int          `json:"in_use,omitempty"`
	Holders []holderView `json:"holders"`
	Queue   []waiterView `json:"queue"`
}

type holderView struct {
	Owner string `json:"owner"`
	Label string `json:"label,omitempty"`
	Host  string `json:"host,omitempty"`
	PID   int    `json:"pid,omitempty"`
	// Count is a mutex's re-entry count; Permits a semaphore hold's
	// permits; Mode a read-write lock's "read" or "write".
	Count   int    `json:"count,omitempty"`
	Permits int    `json:"permits,omitempty"`
	Mode    string `json:"mode,omitempty"`
	TTLMs   int64  `json:"ttl_ms"`
	Token   int64  `json:"token"`
	// Pending: a fair lock handed to a waiter that has not claimed it yet.
	Pending bool `json:"pending,omitempty"`
	// Value is an election's leader's value; its Token is the term.
	Value string `json:"value,omitempty"`
	// SinceMs is when an election's term began, Redis's clock in Unix ms.
	SinceMs int64 `json:"since_ms,omitempty"`
}

type waiterView struct {
	Entry string `json:"entry"`
	Owner string `json:"owner"`
	Label string `json:"label,omitempty"`
	Host  string `json:"host,omitempty"`
	PID   int    `json:"pid,omitempty"`
	// Permits is what a semaphore's waiter asks for; Mode what a
	// read-write lock's asks for, "read" or "write".
	Permits    int    `json:"permits,omitempty"`
	Mode       string `json:"mode,omitempty"`
	DeadlineMs int64  `json:"deadline_ms"`
	Expired    bool   `json:"expired,omitempty"`
	// Value is what an election's candidate campaigns with.
	Value string `json:"value,omitempty"`
}

// load reads the lock name of kind.
func load(ctx context.Context, client redis.UniversalClient, kind, name string) (view, error) {
	v := view{Kind: kind, Name: name, Holders: []holderView{}, Queue: []waiterView{}}
	switch kind {
	case kindFair:
		st, err := fair.Inspect(ctx, client, name)
		if err != nil {
			return v, err
		}
		if h := st.Holder; h != nil {
			v.Holders = append(v.Holders, holderView{Owner: h.Owner, Label: h.Label, Host: h.Host, PID: h.PID,
				Count: h.Count, TTLMs: h.TTL.Milliseconds(), Token: h.Token, Pending: h.Pending})
		}
		v.Queue = waiters(kind, st.Queue)
	case kindElection:
		st, err := fair.InspectElection(ctx, client, name)
		if err != nil {
			return v, err
		}
		if h := st.Holder; h != nil && st.Leader.Term != 0 {
			v.Holders = append(v.Holders, holderView{Owner: h.Owner, Label: h.Label, Host: h.Host, PID: h.PID,
				Count: h.Count, TTLMs: h.TTL.Milliseconds(), Token: st.Leader.Term, Pending: h.Pending,
				Value: st.Leader.Value, SinceMs: st.Leader.Since.UnixMilli()})
		}
		for _, c := range st.Candidates {
			wv := waiters(kind, []fair.Waiter{c.Waiter})[0]
			wv.Value = c.Value
			v.Queue = append(v.Queue, wv)
		}
	case kindReentrant:
		raw, err := lua.Default().State.Run(ctx, client, nil, []string{transport.ReentrantKey(name)}).Result()
		if err != nil {
			return v, fmt.Errorf("inspecting reentrant lock %q: %w", name, err)
		}
		st, err := transport.DecodeState(raw)
		if err != nil {
			return v, err
		}
		if st.Owner != "" {
			o := transport.ParseOrigin(st.Origin)
			v.Holders = append(v.Holders, holderView{Owner: st.Owner, Label: o.Label, Host: o.Host, PID: o.PID,
				Count: st.Count, TTLMs: st.TTL.Milliseconds(), Token: st.Token})
		}
		if v.Queue, err = reentrantWaiters(ctx, client, name); err != nil {
			return v, fmt.Errorf("inspecting reentrant lock %q: %w", name, err)
		}
	default:
		inspect := fair.InspectSemaphore
		if kind == kindRW {
			inspect = fair.InspectRWMutex
		}
		st, err := inspect(ctx, client, name)
		if err != nil {
			return v, err
		}
		v.Permits, v.InUse = st.Permits, st.InUse
		for _, h := range st.Holders {
			hv := holderView{Owner: h.Owner, Label: h.Label, Host: h.Host, PID: h.PID,
				Permits: h.Permits, TTLMs: h.TTL.Milliseconds(), Token: h.Token}
			if kind == kindRW {
				hv.Permits, hv.Mode = 0, mode(h.Permits)
			}
			v.Holders = append(v.Holders, hv)
		}
		v.Queue = waiters(kind, st.Queue)
		if kind == kindRW {
			v.Permits, v.InUse = 0, 0 // readers and writers, not permits
		}
	}
	return v, nil
}

// mode is what a read-write lock's hold or waiter of n permits is.
func mode(n int) string {
	if n == fair.MaxPermits {
		return "write"
	}
	return "read"
}

// reentrantWaiters reads a reentrant lock's waiters in arrival order, the
// order in which releases wake them: the list's ids that still have a
// deadline (the others took the lock or left), with the time left to each
// by Redis's clock. One round trip: the keys share the name's hash tag.
func reentrantWaiters(ctx context.Context, client redis.UniversalClient, name string) ([]waiterView, error) {
	keys := transport.QueueKeys(transport.ReentrantKey(name))
	var (
		now   *redis.TimeCmd
		ids   *redis.StringSliceCmd
		until *redis.ZSliceCmd
	)
	if _, err := client.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		ids = p.LRange(ctx, keys[1], 0, -1)
		until = p.ZRangeWithScores(ctx, keys[2], 0, -1)
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	deadlines := map[string]int64{}
	for _, z := range until.Val() {
		deadlines[fmt.Sprint(z.Member)] = int64(z.Score)
	}
	nowMs := now.Val().UnixMilli()
	out := []waiterView{}
	for _, id := range ids.Val() {
		d, ok := deadlines[id]
		if !ok {
			continue
		}
		delete(deadlines, id) // listed once
		out = append(out, waiterView{Entry: id, Owner: transport.OwnerOfEntry(id), DeadlineMs: d - nowMs, Expired: d <= nowMs})
	}
	return out, nil
}

func waiters(kind string, q []fair.Waiter) []waiterView {
	out := []waiterView{}
	for _, w := range q {
		wv := waiterView{Entry: w.Entry, Owner: w.Owner, Label: w.Label, Host: w.Host, PID: w.PID,
			DeadlineMs: w.Deadline.Milliseconds(), Expired: w.Expired}
		switch kind {
		case kindSemaphore:
			wv.Permits = w.Permits
		case kindRW:
			wv.Mode = mode(w.Permits)
		}
		out = append(out, wv)
	}
	return out
}

// holderSummary is the lock's holders in a few words, for ls.
func (v view) holderSummary() string {
	switch {
	case v.Error != "":
		return "unreadable: " + v.Error
	case len(v.Holders) == 0 && v.Kind == kindElection:
		return "no leader"
	case len(v.Holders) == 0:
		return "free"
	case v.Kind == kindSemaphore:
		return fmt.Sprintf("%d of %d permits", v.InUse, v.Permits)
	case v.Kind == kindRW && v.Holders[0].Mode == "write":
		return "a writer: " + who(v.Holders[0])
	case v.Kind == kindRW:
		return fmt.Sprintf("%d reader(s)", len(v.Holders))
	case v.Kind == kindElection:
		return fmt.Sprintf("leader %s, term %d: %s", who(v.Holders[0]), v.Holders[0].Token, v.Holders[0].Value)
	}
	return who(v.Holders[0])
}

// who names a holder: its label, else its hold id, and where it runs.
func who(h holderView) string {
	s := printable(h.Label)
	if s == "" {
		s = h.Owner
	}
	if h.Host != "" {
		s += fmt.Sprintf(" (%s, pid %d)", printable(h.Host), h.PID)
	}
	return s
}

// ttl is the longest lease left among the holders, 0 when free.
func (v view) ttl() time.Duration {
	var most int64
	for _, h := range v.Holders {
		most = max(most, h.TTLMs)
	}
	return time.Duration(most) * time.Millisecond
}
