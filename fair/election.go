package fair

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/fairlock/fairlock/observe"
)

// Errors of an election. Compare with errors.Is.
var (
	// ErrNoLeader is returned by Leader when nobody leads the election.
	ErrNoLeader = errors.New("fairlock: the election has no leader")
	// ErrResigned is the cause of a leadership's context that Resign ended.
	// It is the same value as fairlock.ErrReleased: a term is a hold of the
	// election's fair lock.
	ErrResigned = fairlock.ErrReleased
)

// MaxValueLen bounds a candidate's value, in bytes.
const MaxValueLen = 4096

// Election is one handle on a leader election: candidates queue on a fair
// lock in the order they campaign, and the one that holds it leads. Its
// methods are safe for concurrent use.
//
//	lead, err := e.Campaign(ctx, "host-a:8080") // waits its turn
//	if err != nil {
//		return err // ctx ended first
//	}
//	defer e.Resign(lead)     // hands over at once
//	runScheduler(lead)       // lead ends when leadership does
//
// A leadership is a term: a hold of the election's lock, with its guarantees
// (the package's doc): one leader at a time, a leader stops believing it
// leads before Redis lets another lead, candidates lead in campaign order,
// and none starves. Its Term, the hold's fencing token, grows from term to
// term: fence the work a leader does with it, as a paused leader cannot
// know it was paused (docs/election.md shows how).
type Election struct {
	m *core.Mutex
}

// Leadership is who leads an election: the zero Leadership means nobody.
type Leadership struct {
	// Value is what the leader campaigned with, or proclaimed since.
	Value string
	// Term is the term's fencing token: it grows from one term to the next,
	// and is 0 when nobody leads.
	Term int64
	// Since is when the term began, by Redis's clock.
	Since time.Time
	// Origin is where the leader runs, and its handle's label.
	Origin Origin
	// Err is set, by Observe alone, when the observer cannot see who leads
	// (Redis cannot be reached, or refuses its script): the other fields
	// are then zero and say nothing. The next value without Err is who
	// leads again.
	Err error
}

// NewElection returns a handle on the election name, made on owner. It
// takes the fair lock's options: fairlock.WithLease is how long a leader that
// crashed keeps its leadership (the watchdog renews it every lease/3 while
// the process lives), fairlock.WithWaitTimeout how long a silent candidate keeps its
// place, WithLabel what Leadership.Origin and Inspect show. It talks to
// Redis only when used. Bad arguments get an error wrapping
// fairlock.ErrInvalidArgument: a nil owner, an empty name, a name with { or } or
// longer than fairlock.MaxNameLen, or an invalid option; a closed owner
// gets fairlock.ErrClosed.
func NewElection(owner *fairlock.Owner, name string, opts ...Option) (*Election, error) {
	cfg, err := core.ApplyFair(opts)
	if err != nil {
		return nil, err
	}
	m, err := core.NewMutex(core.OwnerOf(owner), name, cfg, electionPlace)
	if err != nil {
		return nil, err
	}
	return &Election{m: m}, nil
}

// electionPlace is where an election lives: a fair lock's keys under
// fairlock:e:, whose hold also names the leader's value.
func electionPlace(name string, scripts *lua.Scripts) core.Place {
	p := placeAt(transport.ElectionBase(name), scripts)
	p.What, p.Primitive = "election", observe.Election
	p.Exclusive = true // one term at a time
	return p
}

// Campaign joins the election's queue of candidates with value and waits
// until it leads; it returns the leadership's context. As every hold's
// context does (fairlock's package doc), lead has ctx's values and deadline
// and ends when the leadership ends or ctx ends, whichever is first:
// context.Cause(lead) is ErrResigned after Resign, fairlock.ErrLockLost when the
// leadership was lost (a renewal failed, Redis lost the keys), fairlock.ErrClosed
// when the owner closed, or ctx's own cause. ctx bounds the wait; its end
// after Campaign returned ends lead, so the leader's code stops, but not the
// term, which lasts until Resign (or loss, or the owner's Close): resign
// once the leader's work has stopped (defer e.Resign(lead)), and no other
// candidate leads while this one still acts.
//
// When ctx ends before it leads, Campaign leaves the queue and returns an
// error wrapping ctx's error. With a ctx that carries a leadership of this
// handle that still lasts (lead, or a context derived from it), it returns
// at once, with no call to Redis and value unchanged (Proclaim changes
// it); with one that carries a leadership that ended, it returns why it
// ended (fairlock.ErrLockLost, fairlock.ErrClosed, fairlock.ErrNotHeld); any other ctx is a new
// candidacy, which queues behind the others.
// value is at most MaxValueLen bytes; a nil ctx or a longer value gets an
// error wrapping fairlock.ErrInvalidArgument.
func (e *Election) Campaign(ctx context.Context, value string) (context.Context, error) {
	m := e.core()
	if len(value) > MaxValueLen {
		return nil, m.Wrap(ctx, core.Invalid("a candidate's value is at most %d bytes, got %d", MaxValueLen, len(value)))
	}
	if end := m.Carried(ctx); end != nil && !end.IsEnded() {
		return core.Bind(ctx, end), nil
	}
	end, err := m.Acquire(ctx, core.LockAttempt(m.Config()), func(t *core.Turn) (*core.Grant, error) {
		q := core.State(t, newQueue)
		q.value = transport.EscapeValue(value)
		return q.Acquire(t.Context(), t.Attempt())
	})
	if err != nil {
		return nil, err
	}
	return core.Bind(ctx, end), nil
}

// Proclaim changes the leader's value to value, for every observer, without
// a new term. lead is the leadership's context, from Campaign; bound the
// call with context.WithTimeout(lead, d). It returns an error wrapping
// fairlock.ErrNotHeld when lead carries no leadership of this handle, fairlock.ErrLockLost
// (ending the leadership as lost) when Redis says the term is over, and an
// error wrapping fairlock.ErrInvalidArgument for a value longer than MaxValueLen.
func (e *Election) Proclaim(lead context.Context, value string) error {
	m := e.core()
	if len(value) > MaxValueLen {
		return m.Wrap(lead, core.Invalid("a candidate's value is at most %d bytes, got %d", MaxValueLen, len(value)))
	}
	if err := e.carries(lead); err != nil {
		return err
	}
	escaped := transport.EscapeValue(value)
	return m.OnHold(lead, func(ctx context.Context, h core.Agent, token int64) (bool, error) {
		n, err := h.Config.Scripts.ElectionProclaim.Run(ctx, h.Client, h.Mode(), h.Keys, transport.Proclaim{
			Owner: h.IDArg(), Token: token, Value: escaped, Publish: h.PublishArg(), Channel: h.ChannelArg(),
		}.Args()...).Int()
		if err != nil {
			return false, core.Step("proclaiming", err)
		}
		return n == 1, nil
	})
}

// Resign ends the leadership lead carries and hands it to the next live
// candidate at once, in the same call to Redis; lead ends with cause
// ErrResigned before Resign returns. As Unlock does, it keeps lead's
// deadline, and when lead has already ended (as under defer) it still
// resigns within a short grace, going on in the background after that.
// It returns an error wrapping fairlock.ErrNotHeld when lead carries no leadership
// of this handle or it had already ended, and fairlock.ErrLockLost when it was lost.
func (e *Election) Resign(lead context.Context) error {
	if err := e.carries(lead); err != nil {
		return err
	}
	return e.core().Unlock(lead)
}

// carries rejects a context that carries no leadership of this handle.
func (e *Election) carries(lead context.Context) error {
	m := e.core()
	if m.Config() == nil {
		return core.Unmade()
	}
	if err := core.CheckContext(lead); err != nil {
		return m.Wrap(lead, err)
	}
	if m.Carried(lead) == nil {
		return m.Wrap(lead, fmt.Errorf("%w: the context carries no leadership of this election (pass the one Campaign returned)", fairlock.ErrNotHeld))
	}
	return nil
}

// Term returns the term of the leadership lead carries (from Campaign),
// whether or not it lasts still: the fencing token to pass with the work
// the leader does, which a store refuses once it has seen a higher one. It
// returns 0 when lead carries no leadership of this handle.
func (e *Election) Term(lead context.Context) int64 { return e.core().TokenOf(lead) }

// Leader returns who leads the election now, from Redis; ErrNoLeader when
// nobody does.
func (e *Election) Leader(ctx context.Context) (Leadership, error) {
	l, err := e.read(ctx)
	if err != nil {
		return Leadership{}, err
	}
	if l.Term == 0 {
		return Leadership{}, e.core().Wrap(ctx, ErrNoLeader)
	}
	return leadershipOf(l), nil
}

// read is the election's leadership as Redis has it now.
func (e *Election) read(ctx context.Context) (transport.Leadership, error) {
	m := e.core()
	if m.Config() == nil {
		return transport.Leadership{}, core.Unmade()
	}
	v, err := m.Read(ctx, "reading the leader", m.Config().Scripts.ElectionLeader)
	if err != nil {
		return transport.Leadership{}, m.Wrap(ctx, err)
	}
	text, ok := v.(string)
	if !ok {
		return transport.Leadership{}, m.Wrap(ctx, fmt.Errorf("fairlock: unexpected leadership reply %v", v))
	}
	l, err := transport.ParseLeadership(text)
	return l, m.Wrap(ctx, err)
}

func leadershipOf(l transport.Leadership) Leadership {
	if l.Term == 0 {
		return Leadership{}
	}
	return Leadership{Value: l.Value, Term: l.Term, Since: time.UnixMilli(l.Since), Origin: Origin(l.Origin)}
}

// Name returns the election's name, as given to NewElection.
func (e *Election) Name() string { return e.core().Name() }

// core is the handle's core, nil for a zero or nil Election: its methods
// then return errors wrapping fairlock.ErrInvalidArgument.
func (e *Election) core() *core.Mutex {
	if e == nil {
		return nil
	}
	return e.m
}
