package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/internal/transport"
	"github.com/fairlock/fairlock/observe"
	"github.com/redis/go-redis/v9"
)

// Place is where a kind keeps a lock and which of its scripts end and renew
// a hold; the shared scripts (renew.lua, state.lua) work on every place
// that keeps one hold per key.
type Place struct {
	What      string            // the primitive, as errors name it: "fair lock"
	Keys      []string          // the hold first
	Channel   string            // where hand-offs and releases are published
	Primitive observe.Primitive // the primitive, as an observer names it: observe.Fair
	Acquire   *transport.Script // the script an acquisition runs first (for spans)
	Release   *transport.Script
	// Leave takes a queue entry out (fair_leave.lua's arguments: a replay
	// after a failover sends the slot's recent leaves again); nil for a
	// kind with no queue.
	Leave       *transport.Script
	ForceUnlock *transport.Script
	// Renew renews a hold, with renew.lua's arguments; nil: renew.lua.
	Renew *transport.Script
	// Wait waits out a turn of a Lock or TryLock of the place's handles
	// (Mutex.Acquire): in the fair queue, as the reentrant lock's waiter.
	// What it keeps per hold id lives in the turn's slot (State). Nil
	// for a kind whose turns do not wait through it.
	Wait func(t *Turn) (*Grant, error)
	// Presence: the place's scripts end a hold whose owner's presence is
	// gone (fairlock.WithPresence; the fair queue's). Such holds are taken
	// only while the owner's presence is up, and end when it breaks.
	Presence bool
	// Exclusive: the lock grants one hold at a time (the fair and the
	// reentrant lock, an election's term; not the semaphore's permits).
	// A grant then proves that Redis has no other hold of the lock, so
	// the owner ends any other it still counts on (Owner.track).
	Exclusive bool
	// Watch looks at the queue once, PresencePoll after a release that
	// handed the lock to (or, for the reentrant lock, woke) a waiter that
	// keeps a presence (transport.ReleasedWatch), with fair_heartbeat.lua's
	// arguments and no entries; nil: no look.
	Watch *transport.Script
	// Bound are the scripts bound to Keys; nil: each handle binds its own.
	// A kind that makes a handle per hold (the semaphore) shares one among
	// them: only handles on the very same Keys may share it.
	Bound *BoundCalls
}

// BoundCalls binds scripts to one set of keys (transport.Call), once per script.
type BoundCalls struct{ m sync.Map } // *transport.Script -> *transport.Call

// NewBoundCalls returns an empty BoundCalls.
func NewBoundCalls() *BoundCalls { return &BoundCalls{} }

func (c *BoundCalls) of(s *transport.Script, keys []string) *transport.Call {
	if v, ok := c.m.Load(s); ok {
		return v.(*transport.Call)
	}
	v, _ := c.m.LoadOrStore(s, s.On(keys))
	return v.(*transport.Call)
}

// Agent acts for one hold id of a handle (a Mutex's slot, which a Turn
// acts as): where the lock lives, the handle's configuration and hold id,
// and the requests a primitive may make on the handle's behalf. A
// primitive calls its Agent; core calls a primitive only through what the
// primitive's place gave it (Wait).
type Agent struct {
	Client  redis.UniversalClient
	Owner   *Owner // the handle's owner: what its handles share
	Name    string
	ID      string  // the hold id its holds and queue entries carry (their owner field)
	Config  *Config // read only
	Publish string  // PUBLISH, or SPUBLISH on Cluster
	Place

	// stale is the token of this hold id's latest hold that ended: lost
	// (the client stopped counting on it, its lease run out as the client
	// counts it, a safety margin before Redis's), so Redis may still have
	// it for a moment; or released, which a failover may have undone (the
	// release reached the old master, or the promoted replica had not got
	// it). The next acquiring request ends it there first, so it is
	// neither taken for a re-entry nor left to run out. 0: none.
	stale *atomic.Int64
	// holding: the hold id has a hold that has not ended; without one, a
	// request is a fresh acquisition's (NewRequest).
	holding *atomic.Bool
	// abandoned: the slot's latest acquiring call abandoned at its ctx's
	// end, still running in the background until its Done closes.
	abandoned *atomic.Pointer[transport.Abandoned]
	// slot is the handle's slot it acts for; nil for a hold id of no slot
	// (a semaphore's permit hold).
	slot *slot

	args *args
}

// NewEntry returns a fresh queue entry id of the handle's hold id.
func (ag Agent) NewEntry() string {
	e := ag.Owner.ids.Entry(ag.ID)
	if ag.slot != nil {
		ag.slot.entryMade(e) // replay.go
	}
	return e
}

// Mode is what the handle's owner learnt of how its server runs scripts.
func (ag Agent) Mode() *transport.Mode { return ScriptMode(ag.Owner) }

// args are a handle's fixed script arguments, boxed once (a value passed as
// an any is otherwise allocated at every call), and its script calls bound
// to its keys (transport.Call): the hot path allocates for what changes only.
type args struct {
	owner, publish, channel any
	lease, wait             any // Config.Lease and WaitTimeout, in ms
	leaseMs, waitMs         int64
	calls                   *BoundCalls
	finish                  *finisher // its clean-ups, made again in the background
}

func newArgs(ag Agent) *args {
	a := &args{owner: ag.ID, publish: ag.Publish, channel: ag.Channel,
		leaseMs: transport.Ms(ag.Config.Lease), waitMs: transport.Ms(ag.Config.WaitTimeout), calls: ag.Bound}
	a.lease, a.wait = a.leaseMs, a.waitMs
	if a.calls == nil {
		a.calls = NewBoundCalls()
	}
	a.finish = &finisher{ag: ag}
	a.finish.ag.args = a
	return a
}

// IDArg, PublishArg and ChannelArg are ID, Publish and Channel as script
// arguments, boxed once.
func (ag Agent) IDArg() any      { return ag.args.owner }
func (ag Agent) PublishArg() any { return ag.args.publish }
func (ag Agent) ChannelArg() any { return ag.args.channel }

// MsArg is d in whole milliseconds (Ms) as a script argument; the
// handle's lease and wait timeout are boxed once.
func (ag Agent) MsArg(d time.Duration) any {
	switch ms := transport.Ms(d); ms {
	case ag.args.leaseMs:
		return ag.args.lease
	case ag.args.waitMs:
		return ag.args.wait
	default:
		return ms
	}
}

// Call is s bound to the handle's keys (transport.Call).
func (ag Agent) Call(s *transport.Script) *transport.Call { return ag.args.calls.of(s, ag.Keys) }

// NewRequest returns a fresh acquiring script call of this handle: its
// id, which makes a retry of it harmless, and which of its hold id's holds
// in Redis are stale, to be ended first: those whose token is no greater
// than stale, or, with stale transport.AnyStale, every one but a hand-off
// to the call's own queue entry. One made
// while its hold id holds nothing (a fresh acquisition, not a re-entry)
// calls every hold of its hold id in Redis stale: a hold id serves one
// acquisition at a time, and a re-entry's request is made while its hold
// lasts, so such a hold is one that ended on the client and that Redis
// has (again: a failover lost its release), or a hand-off to an earlier
// entry of the hold id that a promoted replica made after the client left
// it. Counted as a re-entry, it would never be released.
func (ag Agent) NewRequest() (id string, stale int64) {
	if ag.holding != nil && !ag.holding.Load() {
		return ag.requestID(), transport.AnyStale
	}
	return ag.requestID(), ag.stale.Load()
}

// Answered records how the request req (NewRequest's id) ended: err nil
// when its reply was read. When the reply was lost (often ctx ended while
// the script ran), the script may have run and granted the lock without
// the caller knowing it: that grant is undone, even when ctx has ended
// (Bounded). Without this the lock would stay held, and a fair lock's
// queue stalled, until the lease ran out. An error Redis answered with
// (NOPERM, an unknown command, LOADING, ...) was read: the script granted
// nothing, and nothing is undone.
func (ag Agent) Answered(ctx context.Context, req string, err error) {
	if err == nil {
		// The stale token stays: after a failover another server may have
		// that hold again (it never gets a later one's token).
		return
	}
	if Refused(err) {
		return
	}
	var a *transport.Abandoned
	if errors.As(err, &a) && ag.abandoned != nil {
		// Still running: this hold id's clean-ups (this undo, leaving
		// the queue, a release) wait for it (Bounded), or they could reach
		// Redis before what they undo.
		ag.abandoned.Store(a)
	}
	if err := ag.Undo(ctx, req); err != nil && !errors.Is(err, ErrPending) {
		ag.logWarn("undoing an acquisition whose answer was lost failed; the lease will run out", err)
	}
}

// Refused reports whether err is an error Redis answered with (NOPERM, an
// unknown command, LOADING, ...): the script did not run, or ran and
// changed nothing, so there is nothing to undo or leave.
func Refused(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}

// Undo releases this handle's grant that the acquiring request undo was
// answered with, whatever its token (transport.Release.Undo), even when ctx has
// ended (Bounded).
func (ag Agent) Undo(ctx context.Context, undo string) error {
	args := ag.releaseArgs(0, undo).Args()
	return ag.Bounded(ctx, "undoing an acquisition", func(ctx context.Context) error {
		return ag.Release.Run(ctx, ag.Client, ag.Mode(), ag.Keys, args...).Err()
	})
}

// afterAbandoned waits, bounded by ctx, until this hold id's latest
// acquiring call abandoned at its ctx's end has returned (transport.Abandoned).
func (ag Agent) afterAbandoned(ctx context.Context) {
	if ag.abandoned != nil {
		if a := ag.abandoned.Load(); a != nil {
			transport.AfterAbandoned(ctx, a)
		}
	}
}

// abandonedPending reports whether this hold id's latest abandoned
// acquiring call has not returned yet: a clean-up must wait for it, which
// only a ctx that ends can bound.
func (ag Agent) abandonedPending() bool {
	if ag.abandoned == nil {
		return false
	}
	a := ag.abandoned.Load()
	if a == nil {
		return false
	}
	select {
	case <-a.Done:
		return false
	default:
		return true
	}
}

func (ag Agent) requestID() string { return ag.Owner.ids.Request(ag.ID) }

// releaseArgs is a release of this handle's hold with token, or, with undo,
// of the grant that undo names.
func (ag Agent) releaseArgs(token int64, undo string) transport.Release {
	return transport.Release{Owner: ag.args.owner, Request: ag.requestID(), Token: token,
		Publish: ag.args.publish, Channel: ag.args.channel, Undo: undo}
}

// Present returns once the owner's presence is up, on a place whose scripts
// honour it (at once elsewhere, and without WithPresence): an acquisition
// calls it before it notes its send time, so that its hold is covered
// (presence.go). While the presence is down it returns why (wrapping
// Redis's refusal, NOPERM say, if it was refused).
func (ag Agent) Present(ctx context.Context) error {
	if p := ag.Owner.presence; p != nil && ag.Presence {
		return p.await(ctx, ag.Keys[0])
	}
	return nil
}

// RunAcquire runs an acquiring script; with WithReplicas, followed on its
// connection by WAIT (transport.Script.RunWait). acked is the replicas that
// acknowledged, -1 without WithReplicas.
func (ag Agent) RunAcquire(ctx context.Context, s *transport.Script, args ...any) (v any, acked int64, err error) {
	if ag.Config.Replicas == 0 {
		v, err = ag.Call(s).Run(ctx, ag.Client, ag.Mode(), args...).Result()
		return v, -1, err
	}
	cmd, acked, err := s.RunWait(ctx, ag.Client, ag.Mode(), ag.Keys, ag.Config.Replicas, ag.Config.ReplicaTimeout, args...)
	if cmd == nil || cmd.Err() != nil {
		return nil, 0, err
	}
	if err != nil {
		acked = 0 // the script ran, but WAIT failed: nothing is known to be acknowledged
	}
	v, err = cmd.Result()
	return v, acked, err
}

// Replicated judges a grant that req's reply reported, with acked replicas
// acknowledging it (RunAcquire): with too few, the grant is undone (as a
// lost reply's is) and the error wraps ErrNotReplicated.
func (ag Agent) Replicated(ctx context.Context, req string, acked int64) error {
	if acked < 0 || acked >= int64(ag.Config.Replicas) {
		return nil
	}
	err := fmt.Errorf("%w: %d of %d within %v; the acquisition was undone", ErrNotReplicated, acked, ag.Config.Replicas, ag.Config.ReplicaTimeout)
	ag.Answered(ctx, req, err)
	return err
}

// ClaimReplicated claims a direct hand-off at once, as Claim does, and waits
// for WithReplicas' replicas to acknowledge the hold: the grant was written
// by another client's call, and the claim's WAIT covers it too (replication
// is one ordered stream). With too few, the hold is released (handed on)
// and the error wraps ErrNotReplicated.
func (ag Agent) ClaimReplicated(ctx context.Context, g Grant, lease time.Duration, fixed bool) (time.Time, error) {
	since := ag.claimSince(g, fixed)
	script, args := ag.renewCall(g.Token, lease, fixed)
	cmd, acked, err := script.RunWait(ctx, ag.Client, ag.Mode(), ag.Keys, ag.Config.Replicas, ag.Config.ReplicaTimeout, args...)
	if cmd == nil || cmd.Err() != nil {
		return since, err
	}
	ok, perr := transport.DecodeRenew(cmd.Val())
	if perr != nil {
		return since, perr
	}
	if !ok {
		return since, ErrLockLost
	}
	if err == nil && acked >= int64(ag.Config.Replicas) {
		return since, nil
	}
	if err == nil {
		err = fmt.Errorf("%w: %d of %d within %v; the hand-off was passed on", ErrNotReplicated, acked, ag.Config.Replicas, ag.Config.ReplicaTimeout)
	}
	rel := ag.releaseArgs(g.Token, "").Args()
	if rerr := ag.Bounded(ctx, "giving back a hand-off that was not replicated", func(ctx context.Context) error {
		return ag.Release.Run(ctx, ag.Client, ag.Mode(), ag.Keys, rel...).Err()
	}); rerr != nil && !errors.Is(rerr, ErrPending) {
		ag.logWarn("giving back a hand-off that was not replicated failed; its lease will run out", rerr)
	}
	return since, err
}

// Claim makes a direct hand-off (g.Handoff) a full hold now: it renews the
// hold to the full lease, counted from the grant for a fixed lease and from
// now otherwise. It returns the time the new lease counts from, or ok=false
// if the hold is gone.
func (ag Agent) Claim(ctx context.Context, g Grant, lease time.Duration, fixed bool) (since time.Time, ok bool, err error) {
	since = ag.claimSince(g, fixed)
	ok, err = ag.renew(ctx, g.Token, lease, fixed)
	return since, ok, err
}

// claimSince is when a claimed hand-off's new lease counts from: its grant
// for a fixed lease, now otherwise.
func (ag Agent) claimSince(g Grant, fixed bool) time.Time {
	if fixed {
		return g.Since
	}
	return ag.Config.Clock.Now()
}

// renewCall is the script and arguments that extend this handle's hold with
// token by lease (from the hand-off's grant when fromGrant).
func (ag Agent) renewCall(token int64, lease time.Duration, fromGrant bool) (*transport.Script, []any) {
	from := transport.FromNow
	if fromGrant {
		from = transport.FromGrant
	}
	script := ag.Renew
	if script == nil {
		script = ag.Config.Scripts.Renew
	}
	return script, transport.Renew{Owner: ag.args.owner, Token: token, Lease: transport.Ms(lease), From: from}.Args()
}

// renew extends this handle's hold with token by lease (from the hand-off's
// grant when fromGrant); false if the hold is gone.
func (ag Agent) renew(ctx context.Context, token int64, lease time.Duration, fromGrant bool) (bool, error) {
	script, args := ag.renewCall(token, lease, fromGrant)
	v, err := script.Run(ctx, ag.Client, ag.Mode(), ag.Keys, args...).Result()
	if err != nil {
		return false, err
	}
	return transport.DecodeRenew(v)
}

// Wrap names the lock in err (Named), ctx's own error too: errors.Is still
// matches it.
func (ag Agent) Wrap(ctx context.Context, err error) error {
	what := ag.What
	if what == "" {
		what = "lock"
	}
	return Named(ctx, what, ag.Name, err)
}

// Info logs an event worth a user's attention.
func (ag Agent) Info(msg string, args ...any) {
	if l := ag.Config.Logger; l != nil {
		l.Info("fairlock: "+msg, append([]any{slog.String("lock", ag.Name), slog.String("owner", ag.ID)}, args...)...)
	}
}

func (ag Agent) logWarn(msg string, err error) {
	if l := ag.Config.Logger; l != nil {
		l.Warn("fairlock: "+msg, slog.String("lock", ag.Name), slog.String("owner", ag.ID), slog.Any("error", err))
	}
}

// logLost logs a hold ended as lost (why); one a timer ended after it was
// due (due, zero if no timer) says how late.
func (ag Agent) logLost(why string, token int64, due time.Time) {
	if l := ag.Config.Logger; l != nil {
		args := []any{slog.String("lock", ag.Name), slog.String("owner", ag.ID), slog.Int64("token", token)}
		if late := ag.Config.Clock.Now().Sub(due); !due.IsZero() && late > 0 {
			args = append(args, slog.Duration("late", late))
		}
		l.Error("fairlock: lock lost: "+why, args...)
	}
}
