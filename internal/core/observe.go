package core

import (
	"context"
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/fairlock/fairlock/internal/transport"
	"github.com/fairlock/fairlock/observe"
	"github.com/redis/go-redis/v9"
)

// Report is what a primitive's wait tells of one acquisition, for its observer: given
// in Attempt.Report when the handle has one.
type Report struct {
	Queued      bool
	QueueLength int       // when it joined
	GrantedAt   time.Time // a hand-off's grant, on this client's clock; zero otherwise
}

// queued records, for a join (joined), that the waiter queued behind n-1
// others; the first join of the acquisition counts.
func (r *Report) queued(n int, joined bool) {
	if r == nil {
		return
	}
	if joined && !r.Queued {
		r.Queued, r.QueueLength = true, n
	}
}

// QueueNews reports a waiter's news: kind, with the queue's length n, into
// the attempt's Report too.
func (ag Agent) QueueNews(a Attempt, kind observe.QueueEventKind, n int) {
	a.Report.queued(n, kind == observe.Joined)
	if o := ag.Config.Observer; o != nil && o.Queue() != nil {
		o.Queue().ObserveQueue(observe.QueueEvent{Primitive: ag.Primitive, Lock: ag.Name, Kind: kind, Length: n})
	}
}

// HandedOff records the grant time of a hand-off the acquisition took.
func (a Attempt) HandedOff(at time.Time) {
	if a.Report != nil {
		a.Report.GrantedAt = at
	}
}

// OutcomeOf is the outcome of an acquisition on ctx that returned held and
// err: a re-entry if reentered; TimedOut when it holds nothing and err is
// nil (the wait elapsed) or ctx's deadline passed; Cancelled when ctx was
// cancelled; Failed otherwise.
func OutcomeOf(ctx context.Context, held, reentered bool, err error) observe.Outcome {
	switch {
	case held && reentered:
		return observe.Reentered
	case held:
		return observe.Acquired
	case err == nil:
		return observe.TimedOut
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		if errors.Is(err, context.DeadlineExceeded) {
			return observe.TimedOut
		}
		return observe.Cancelled
	}
	return observe.Failed
}

// call is the observe.Call of one operation of the handle.
func (m *Mutex) call(op string, script *transport.Script) observe.Call {
	c := observe.Call{Primitive: m.agent.Primitive, Lock: m.agent.Name, Operation: op,
		ServerAddress: m.server, ServerPort: m.port}
	if script != nil {
		c.Script = script.Function()
	}
	return c
}

// reportEnd tells the observer of the end of hold h: cause and why as
// hold.finish was given them; reuse false for a release whose outcome is unknown.
func (h *hold) reportEnd(cause error, why string, reuse bool) {
	o := h.cfg.Observer
	if o == nil || o.Observer() == nil {
		return
	}
	ev := observe.Hold{Primitive: h.agent.Primitive, Lock: h.agent.Name,
		Held: max(h.cfg.Clock.Now().Sub(h.s.acquired), 0), End: observe.Released}
	switch {
	case cause == ErrLockLost && h.fixed && why == leaseRanOut:
		ev.End = observe.LeaseRanOut
	case cause == ErrLockLost:
		ev.End, ev.Cause = observe.Lost, why
	case !reuse:
		ev.End = observe.ReleaseUnknown
	}
	o.Observer().ObserveHoldEnd(ev)
}

// renewalFailed reports a failed renewal (or claim) of h.
func (h *hold) renewalFailed(err error) {
	if o := h.cfg.Observer; o != nil && o.Renewal() != nil {
		o.Renewal().ObserveRenewalFailure(observe.RenewalFailure{Primitive: h.agent.Primitive, Lock: h.agent.Name, Err: err})
	}
}

// serverOf is the address and port of client's server, for spans: "" and
// 0 for a Cluster or Sentinel client, whose servers vary.
func serverOf(client redis.UniversalClient) (string, int) {
	c, ok := client.(*redis.Client)
	if !ok {
		return "", 0
	}
	opt := c.Options()
	if opt.Network == "unix" {
		return opt.Addr, 0
	}
	host, port, err := net.SplitHostPort(opt.Addr)
	if err != nil {
		return "", 0 // a Sentinel client's, say
	}
	p, _ := strconv.Atoi(port)
	return host, p
}
