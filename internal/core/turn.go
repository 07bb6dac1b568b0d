package core

import (
	"context"
	"errors"
	"time"

	"github.com/fairlock/fairlock/observe"
)

// Turn is one acquisition of a handle, from Begin to Keep; Mutex.Acquire
// runs the three. Begin picks the hold id it acts as (a fresh one, or the
// one of the hold its context re-enters) and binds its wait to the owner's
// Close; the wait is the primitive's (the mutexes': their place's Wait),
// which runs its scripts through Agent; Keep makes the grant the handle's
// hold. Core calls the primitive only through that wait.
type Turn struct {
	m    *Mutex
	s    *slot
	want *hold // the hold a re-entry re-enters; nil for a fresh turn
	a    Attempt
	user context.Context // the caller's ctx, for its errors
	call context.Context // the caller's ctx, in the observer's span if any
	ctx  context.Context // call, also ended by the owner's Close
	done func()

	obs   *Observers // nil: nothing reported
	start time.Time
	rep   Report
	end   func(error) // the span's end, if any
}

// Begin starts an acquisition of a: a ctx that carries this handle's hold
// re-enters it, any other takes a turn of its own. An error (a bad or ended
// ctx, a hold that ended, a closed owner) is final, and reported as Keep
// would report it.
func (m *Mutex) Begin(ctx context.Context, a Attempt) (*Turn, error) {
	if !m.made() {
		return nil, errUnmade
	}
	if err := CheckContext(ctx); err != nil {
		return nil, m.agent.Wrap(ctx, err)
	}
	t := &Turn{m: m, a: a, user: ctx, call: ctx}
	if o := m.agent.Config.Observer; o != nil && o.Observer() != nil {
		t.obs, t.start = o, m.agent.Config.Clock.Now()
		if tr := o.Tracer(); tr != nil {
			t.call, t.end = tr.StartCall(ctx, m.call("acquire", m.agent.Acquire))
		}
		t.a.Report = &t.rep
	}
	t.want = m.carried(t.call)
	if t.want != nil && t.want.IsEnded() {
		return nil, t.report(nil, t.want.EndedErr()) // its context has ended too: say why
	}
	if err := ctx.Err(); err != nil {
		return nil, t.report(nil, err)
	}
	// The wait also ends when the owner closes; the call then says so.
	bound, done, err := m.agent.Owner.enter(t.call, t.want == nil)
	if err != nil {
		return nil, t.report(nil, err)
	}
	t.ctx, t.done = bound, done
	if t.want != nil {
		t.s = t.want.s
	} else {
		t.s = m.take()
	}
	return t, nil
}

// Context is what the turn's wait runs on: the caller's ctx, ended also by
// the owner's Close.
func (t *Turn) Context() context.Context { return t.ctx }

// Attempt is what the turn asks for (with its Report when observed).
func (t *Turn) Attempt() Attempt { return t.a }

// Agent acts for the turn's hold id.
func (t *Turn) Agent() Agent { return t.s.agent }

// State is what a primitive keeps for the turn's hold id between its
// turns (the fair queue's abandoned entries): made by newState at the id's
// first turn. A slot serves one turn at a time.
func State[T any](t *Turn, newState func(Agent) *T) *T {
	if s, ok := t.s.state.(*T); ok {
		return s
	}
	s := newState(t.s.agent)
	t.s.state = s
	return s
}

// Keep ends the turn with what the primitive's wait returned: a grant
// becomes the handle's hold (or counts a re-entry of the one the turn
// re-enters), and the End of that hold is returned; nil, nil when the wait
// elapsed. The acquisition is reported to the handle's observer.
func (m *Mutex) Keep(t *Turn, g *Grant, err error) (*End, error) {
	defer t.done() // after the hold is the owner's: Close releases it
	if err != nil && t.call.Err() == nil && context.Cause(t.Context()) == ErrClosed {
		err = ErrClosed
	}
	var h *hold
	switch {
	case t.want != nil:
		h, err = m.reentered(t, g, err)
	case err != nil || g == nil:
		m.put(t.s)
	default:
		var why error
		if h, why = m.adopt(t.Context(), t.s, g, t.a); why != nil {
			h, err = nil, why // ended: never a success
		}
	}
	err = t.report(h, err)
	if h == nil {
		return nil, err
	}
	return &h.End, err
}

// adopt makes g, granted to slot s, this handle's hold, and returns it
// with nil, or, when the hold cannot be counted on, ended, with why: its
// lease ran out before the acquisition returned (errBornLost), or it was
// made while the owner's presence was down and was taken over before the
// presence came back (errGivenBack: confirm). No acquisition returns
// success with such a hold.
func (m *Mutex) adopt(ctx context.Context, s *slot, g *Grant, a Attempt) (*hold, error) {
	h, prev := newHold(m, s, *g, a.Lease, a.Fixed)
	m.mu.Lock()
	old := m.cur
	m.cur = h
	m.latest.Set(&h.End)
	m.mu.Unlock()
	if old != nil && !old.releasing.Load() {
		// The handle believed in an older hold that Redis no longer has:
		// another hold id of the handle was granted the lock. (One that
		// an Unlock is releasing is ended by that Unlock, as released: its
		// release handed the lock on.)
		old.end(ErrLockLost, "the lock was acquired afresh, so the earlier hold had ended")
	}
	if prev != nil && prev != old && !prev.releasing.Load() {
		// Another handle of the owner believes in a hold of this lock,
		// which grants one at a time: Redis no longer has it. A failover
		// lost it (granted by the old master after the promotion, it never
		// reached the new one, which has just granted this), or an
		// operator forced it out. It ends here, before this acquisition
		// returns, so that no two handles of one owner ever count on the
		// lock at once (docs/deployments.md, "Writes between the promotion
		// and the clients' switch are lost").
		m.agent.Owner.giveUp(prev, "another handle of this owner was granted the lock, so Redis no longer had this hold (a failover lost it, or it was forced out)", time.Time{})
	}
	if h.bornLost() {
		// Its loss timer would only fire at the clock's next tick (a fake
		// clock's next Advance): end it now, so that nobody counts on a
		// hold Redis may have ended, and give back what Redis may still
		// count of it.
		m.agent.Owner.giveUp(h, "the lease ran out before the acquisition returned", time.Time{})
		return h, errBornLost
	}
	if p := m.agent.Owner.presence; p != nil && m.agent.Presence && (!p.covers(m.agent.Keys[0], g.Since) ||
		g.Waited && !p.vouch(ctx, h.Context(), m.agent.Keys[0], g.Since)) {
		// Taken while the owner's presence was down (or before it came
		// back up): a waiter may have ended it. It is the caller's only
		// once the presence is back and Redis still has it. After a wait
		// the presence may have broken unread (its reader ran late: a
		// loaded machine), and an owner that held nothing, and sent no
		// PING, would end the hold as soon as it read the break: a PING
		// answered lately vouches for it first.
		if !m.confirm(ctx, p, h, *g) {
			m.agent.Owner.giveUp(h, "the lock was granted while the owner's presence connection was down, "+
				"and could not be confirmed once it was back", time.Time{})
			if ctx.Err() != nil { // the wait ended first: say why, as any wait does
				if context.Cause(ctx) == ErrClosed {
					return h, ErrClosed
				}
				return h, ctx.Err()
			}
			return h, errGivenBack
		}
	}
	return h, nil
}

// Errors of a grant Keep could not make a hold of (adopt), made by Link:
// both wrap ErrLockLost. Acquire waits past errGivenBack.
var errBornLost, errGivenBack error

// Acquire is a whole acquisition of a: Begin, wait (the primitive's wait
// for the turn's grant), Keep. A grant that had to be given back as it was
// made (errGivenBack) is waited past: the call queues again with a fresh
// turn, while ctx and a's wait last. The End of the hold is returned; nil,
// nil when the wait elapsed.
func (m *Mutex) Acquire(ctx context.Context, a Attempt, wait func(t *Turn) (*Grant, error)) (*End, error) {
	var start time.Time
	if !a.Forever && m.made() {
		start = m.agent.Config.Clock.Now()
	}
	for wait0 := a.Wait; ; {
		t, err := m.Begin(ctx, a)
		if err != nil {
			return nil, err
		}
		g, err := wait(t)
		e, err := m.Keep(t, g, err)
		if !errors.Is(err, errGivenBack) || ctx.Err() != nil {
			return e, err
		}
		if !a.Forever {
			if a.Wait = wait0 - m.agent.Config.Clock.Now().Sub(start); a.Wait <= 0 {
				return nil, err
			}
		}
	}
}

// reentered applies a re-entry's outcome to the hold the turn re-enters.
func (m *Mutex) reentered(t *Turn, g *Grant, err error) (*hold, error) {
	want := t.want
	if err != nil || g == nil {
		return nil, err
	}
	m.mu.Lock()
	ok := m.cur == want && g.Token == want.token
	m.mu.Unlock()
	if ok && want.reenter(*g, t.a.Lease) {
		return want, nil
	}
	// want ended while the call ran, and its slot took another turn that
	// this call counted a re-entry of: give that count back.
	_ = want.s.agent.Bounded(t.Context(), "giving back a re-entry of a hold that had ended", func(ctx context.Context) error {
		_, err := m.release(ctx, want.s, g.Token)
		return err
	})
	return nil, want.EndedErr()
}

// report tells the handle's observer how the acquisition went (h: the
// hold, nil if none), ends its span, and names err.
func (t *Turn) report(h *hold, err error) error {
	if t.obs != nil {
		m := t.m
		now := m.agent.Config.Clock.Now()
		acq := observe.Acquisition{Primitive: m.agent.Primitive, Lock: m.agent.Name, Wait: now.Sub(t.start),
			Outcome: OutcomeOf(t.call, h != nil, h != nil && h == t.want, err),
			Queued:  t.rep.Queued, QueueLength: t.rep.QueueLength, Err: err}
		if acq.Outcome == observe.Acquired && !t.rep.GrantedAt.IsZero() {
			acq.HandedOff, acq.HandOff = true, max(now.Sub(t.rep.GrantedAt), 0)
		}
		t.obs.Observer().ObserveAcquisition(t.call, acq)
		if t.end != nil {
			t.end(err)
		}
	}
	return t.m.agent.Wrap(t.user, err)
}

// Wrap names err with the handle's primitive and lock, as every call's
// error is named.
func (m *Mutex) Wrap(ctx context.Context, err error) error {
	if !m.made() {
		return err
	}
	return m.agent.Wrap(ctx, err)
}

// Config is the handle's configuration, read only.
func (m *Mutex) Config() *Config {
	if !m.made() {
		return nil
	}
	return m.agent.Config
}
