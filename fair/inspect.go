package fair

import (
	"context"
	"fmt"
	"time"

	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// State is a snapshot of a fair lock, as Inspect returns it.
type State struct {
	// Holder is the current hold, nil when the lock is free.
	Holder *Holder
	// Queue lists the waiters in the order they will be served. Entries whose
	// deadline passed are kept, marked Expired: the next script call evicts
	// them. Waiters that gave up are not listed.
	Queue []Waiter
}

// Holder describes the current hold.
type Holder struct {
	Owner string        // hold id of the holding handle
	Count int           // re-entries
	TTL   time.Duration // remaining lease
	Token int64         // fencing token
	// Pending is true while a hand-off has not been claimed by the grantee:
	// if it died, the hold expires within one wait timeout.
	Pending bool
	// Entry is the queue entry a pending hand-off was granted to.
	Entry string
	Origin
}

// Waiter is one queue entry.
type Waiter struct {
	Owner string // hold id of the waiting handle
	Entry string // the entry's id: fresh for every join
	// Deadline is how long the waiter may stay silent from now, by Redis's
	// clock; negative once it passed.
	Deadline time.Duration
	Expired  bool
	// Permits is, in a semaphore's queue, the permits the waiter asks for
	// (MaxPermits: a read-write lock's writer); 0 in a fair lock's.
	Permits int
	Origin
}

// Origin is where a handle runs, and its label.
type Origin struct {
	Host  string
	PID   int
	Label string // WithLabel's text
}

func parseOrigin(s string) Origin { return Origin(transport.ParseOrigin(s)) }

// Inspect reads the state of the fair lock name without changing it.
func Inspect(ctx context.Context, client redis.UniversalClient, name string) (State, error) {
	if err := core.CheckContext(ctx); err != nil {
		return State{}, err
	}
	if err := core.CheckClient(client); err != nil {
		return State{}, err
	}
	if err := core.CheckName(name); err != nil {
		return State{}, err
	}
	v, err := lua.Default().FairInspect.Run(ctx, client, nil, transport.QueueKeys(transport.FairBase(name))).Slice()
	if err != nil {
		return State{}, fmt.Errorf("fairlock: inspecting lock %q: %w", name, err)
	}
	return parseInspect(v)
}

func parseInspect(v []any) (State, error) {
	in, err := transport.DecodeInspect(v)
	if err != nil {
		return State{}, err
	}
	var s State
	s.Holder = holderOf(in.Holder)
	for _, w := range queueOf(in) {
		s.Queue = append(s.Queue, w.Waiter)
	}
	return s, nil
}

// holderOf is an inspected hold as Inspect shows it, nil for none.
func holderOf(h *transport.InspectedHolder) *Holder {
	if h == nil {
		return nil
	}
	return &Holder{Owner: h.Owner, Count: h.Count, TTL: h.TTL, Token: h.Token,
		Origin: parseOrigin(h.Origin), Pending: h.Entry != "", Entry: h.Entry}
}

// queued is one live entry of a queue, with the hold id of the permit hold
// it waits for (a semaphore's gate; "" elsewhere).
type queued struct {
	Waiter
	permitOwner string
	value       string // an election candidate's value
}

// queueOf lists the entries of an inspected queue in order, tombstones left
// out.
func queueOf(in transport.Inspected) []queued {
	var out []queued
	for _, e := range in.Elements {
		if e.Deadline < 0 {
			continue // a tombstone: it gave up
		}
		w := queued{Waiter: Waiter{Owner: transport.OwnerOfEntry(e.Entry), Entry: e.Entry,
			Deadline: time.Duration(e.Deadline-in.Now) * time.Millisecond, Expired: e.Deadline <= in.Now}}
		if o, req, ok := transport.ParseElementInfo(e.Info); ok {
			w.Origin, w.permitOwner, w.Permits = Origin(o), req.Owner, req.N
		}
		w.value, _ = transport.ElementValue(e.Info)
		out = append(out, w)
	}
	return out
}

// ElectionState is a snapshot of an election, as InspectElection returns
// it.
type ElectionState struct {
	// Leader is who leads, the zero Leadership when nobody does.
	Leader Leadership
	// Holder is the leader's hold (its hold id, remaining lease, a
	// hand-over not yet claimed), nil when nobody leads.
	Holder *Holder
	// Candidates lists the candidates in the order they will lead, as
	// State.Queue lists a fair lock's waiters.
	Candidates []Candidate
}

// Candidate is one candidate queued in an election.
type Candidate struct {
	Waiter
	// Value is what the candidate campaigns with.
	Value string
}

// InspectElection reads the state of the election name without changing
// it, in one call to Redis.
func InspectElection(ctx context.Context, client redis.UniversalClient, name string) (ElectionState, error) {
	if err := core.CheckContext(ctx); err != nil {
		return ElectionState{}, err
	}
	if err := core.CheckClient(client); err != nil {
		return ElectionState{}, err
	}
	if err := core.CheckName(name); err != nil {
		return ElectionState{}, err
	}
	v, err := lua.Default().ElectionInspect.Run(ctx, client, nil, transport.QueueKeys(transport.ElectionBase(name))).Slice()
	if err != nil {
		return ElectionState{}, fmt.Errorf("fairlock: inspecting election %q: %w", name, err)
	}
	l, in, err := transport.DecodeElectionInspect(v)
	if err != nil {
		return ElectionState{}, err
	}
	s := ElectionState{Leader: leadershipOf(l)}
	s.Holder = holderOf(in.Holder)
	for _, w := range queueOf(in) {
		s.Candidates = append(s.Candidates, Candidate{Waiter: w.Waiter, Value: w.value})
	}
	return s, nil
}
