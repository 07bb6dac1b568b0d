package multi

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/fairlock/fairlock/observe"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/redis/go-redis/v9"
)

// RedLock is one lock name on N independent Redis masters: it is held while
// a majority of them hold it for this handle (docs/redlock.md says what that
// does and does not buy). Each master runs a reentrant lock of that name.
// One watchdog renews them all: every lease/3 it extends every member still
// held, all at once, so the members' leases stay in step.
//
// An attempt asks every master at once, each bounded by the attempt timeout.
// It holds the lock if a majority granted it and time is left of the lease:
// its validity is the lease minus the time the attempt took minus the
// clock-drift allowance (fairlock.WithDriftFactor). Otherwise it gives back what it
// got and, for Lock, tries again after a random delay. The hold is lost, and
// Lost closes, as soon as fewer than a majority of its members still hold it
// (a master restarted empty, a renewal that found the key gone, a lease that
// ran out). RedLock is not fair: there is no queue across masters.
//
// Its methods are safe for concurrent use, and goroutines sharing it
// exclude each other, as a Mutex handle's do. A call re-enters the hold,
// counted in the handle, only when its ctx carries it (LockContext, Do,
// HoldContext, or a context derived from one).
type RedLock struct {
	name    string
	members []*reentrant.Mutex
	quorum  int
	cfg     core.Config

	acq sync.Mutex // one attempt at a time

	mu     sync.Mutex
	hold   *redHold
	depth  int
	latest core.Latest // the most recent hold, for Lost and HoldContext
}

// redHold is one hold of a majority: it ends by Unlock, or as lost once
// fewer than a quorum of its members hold it. Its End's lock guards gone.
type redHold struct {
	core.End
	held     []*reentrant.Mutex // the members that granted it
	validity time.Duration
	lease    time.Duration // each member's lease
	renewed  bool          // kept alive by the watchdog (Lock, TryLock with lease 0)
	clk      clock.Clock
	cleanup  time.Duration // bound of one round of renewals
	quorum   int
	stops    []func() bool // the watchers of the members' holds

	gone int // members lost
}

// NewRedLock returns a handle on the lock name on each of owners, whose
// clients must be independent masters (not replicas of one another, not one
// cluster): 3 or 5 is usual; N tolerates the loss of (N-1)/2. It takes
// the reentrant lock's options (fairlock.WithLease, ...). Bad arguments get
// an error wrapping fairlock.ErrInvalidArgument: no owners, a nil owner,
// two owners on one client, or a bad name or option; a closed owner gets
// fairlock.ErrClosed.
func NewRedLock(owners []*fairlock.Owner, name string, opts ...reentrant.Option) (*RedLock, error) {
	if len(owners) == 0 {
		return nil, core.Invalid("RedLock needs at least one owner")
	}
	cfg, err := core.ApplyReentrant(opts)
	if err != nil {
		return nil, err
	}
	r := &RedLock{name: name, quorum: len(owners)/2 + 1, cfg: cfg}
	seen := map[redis.UniversalClient]bool{}
	for i, o := range owners {
		if err := core.CheckOwner(core.OwnerOf(o)); err != nil {
			return nil, fmt.Errorf("owner %d: %w", i, err)
		}
		c := o.Client()
		if seen[c] {
			return nil, core.Invalid("owner %d's client is given twice: each master once", i)
		}
		seen[c] = true
		// The RedLock reports as one lock (fairlock.WithObserver); its members do
		// not report on their own.
		m, err := reentrant.New(o, name, append(slices.Clip(opts), core.WithoutObserver())...)
		if err != nil {
			return nil, err
		}
		r.members = append(r.members, m)
	}
	core.Equip(core.OwnerOf(owners[0]), &r.cfg) // its own timers run on the first owner's clock
	return r, nil
}

// Quorum returns how many masters must hold the lock: a majority.
func (r *RedLock) Quorum() int {
	if !r.made() {
		return 0
	}
	return r.quorum
}

// retryDelay bounds the random pause between two attempts of Lock.
const retryDelay = 50 * time.Millisecond

// Lock tries until the lock is held or ctx ends, and keeps the members'
// leases alive with the watchdog until Unlock. Given a ctx that carries
// the hold, it counts a re-entry.
func (r *RedLock) Lock(ctx context.Context) error {
	if !r.made() {
		return core.Unmade()
	}
	_, err := r.acquire(ctx, -1, 0)
	return err
}

// LockContext is Lock, and returns the context to do the work in: ctx's
// values and deadline, cancelled also when the hold ends, and carrying the
// hold, so that Lock given it re-enters and Unlock given it releases
// exactly this hold. As for every primitive, ctx's end ends that context,
// never the hold: Unlock it.
func (r *RedLock) LockContext(ctx context.Context) (context.Context, error) {
	if !r.made() {
		return nil, core.Unmade()
	}
	if _, err := r.acquire(ctx, -1, 0); err != nil {
		return nil, err
	}
	r.mu.Lock()
	h := r.hold
	r.mu.Unlock()
	if h == nil {
		return nil, fairlock.ErrLockLost // lost, and unlocked by another goroutine, already
	}
	return context.WithValue(core.Bind(ctx, &h.End), redKey{r}, h), nil
}

// Do runs fn holding the lock, as fair.Mutex.Do does: fn's context is
// cancelled when the hold is lost or ctx ends, and the hold is released
// when fn returns, on a context of its own bounded by the cleanup timeout.
func (r *RedLock) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	if !r.made() {
		return core.Unmade()
	}
	if err := core.CheckFunc(fn); err != nil {
		return err
	}
	hctx, err := r.LockContext(ctx)
	if err != nil {
		return err
	}
	return core.Held(hctx, r.Unlock, r.cfg.CleanupTimeout, fn)
}

// redKey marks a context that carries a hold of the RedLock r.
type redKey struct{ r *RedLock }

// TryLock tries for up to wait (0: one attempt). With lease 0 the watchdog
// keeps the lease alive; a positive lease holds it for that long, and
// Validity says how much of it the caller can count on. It returns false,
// nil when no attempt won a majority in time.
func (r *RedLock) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if !r.made() {
		return false, core.Unmade()
	}
	if _, err := core.TryAttempt(&r.cfg, wait, lease); err != nil {
		return false, err
	}
	return r.acquire(ctx, wait, lease)
}

func (r *RedLock) acquire(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if err := core.CheckContext(ctx); err != nil {
		return false, err
	}
	o := r.cfg.Observer.Observer()
	if o == nil {
		return r.acquireOnce(ctx, wait, lease)
	}
	clk := r.cfg.Clock
	start := clk.Now()
	var end func(error)
	if t := r.cfg.Observer.Tracer(); t != nil {
		ctx, end = t.StartCall(ctx, observe.Call{Primitive: observe.RedLock, Lock: r.name, Operation: "acquire",
			Script: r.cfg.Scripts.ReentrantAcquire.Function()})
	}
	want, _ := ctx.Value(redKey{r}).(*redHold)
	ok, err := r.acquireOnce(ctx, wait, lease)
	now := clk.Now()
	o.ObserveAcquisition(ctx, observe.Acquisition{Primitive: observe.RedLock, Lock: r.name, Wait: now.Sub(start),
		Outcome: core.OutcomeOf(ctx, ok, want != nil, err), Err: err})
	if end != nil {
		end(err)
	}
	return ok, err
}

// observeEnd reports the end of the hold h to o.
func (r *RedLock) observeEnd(h *redHold, o observe.Observer) {
	clk := r.cfg.Clock
	since := clk.Now()
	h.OnEnd(func() bool {
		ev := observe.Hold{Primitive: observe.RedLock, Lock: r.name, Held: clk.Now().Sub(since), End: observe.Released}
		if h.Cause() == fairlock.ErrLockLost {
			ev.End, ev.Cause = observe.Lost, "fewer than a quorum of the masters still held it"
		}
		o.ObserveHoldEnd(ev)
		return true
	})
}

func (r *RedLock) acquireOnce(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if want, _ := ctx.Value(redKey{r}).(*redHold); want != nil {
		return r.reenter(want)
	}
	r.acq.Lock()
	defer r.acq.Unlock()
	clk := r.cfg.Clock
	end := clk.Now().Add(wait)
	for {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		h, err := r.attempt(ctx, lease)
		if err != nil {
			return false, err
		}
		if h != nil {
			r.mu.Lock()
			r.hold, r.depth = h, 1
			r.latest.Set(&h.End)
			r.mu.Unlock()
			if o := r.cfg.Observer.Observer(); o != nil {
				r.observeEnd(h, o)
			}
			h.watch()
			return true, nil
		}
		if wait >= 0 && !clk.Now().Before(end) {
			return false, nil
		}
		pause := retryDelay/2 + rand.N(retryDelay/2)
		if wait >= 0 {
			pause = min(pause, end.Sub(clk.Now()))
		}
		// The pause runs on the handle's clock, like the wait it is part of.
		woke := make(chan struct{})
		t := clk.AfterFunc(max(pause, 0), func() { close(woke) })
		select {
		case <-woke:
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		}
	}
}

// reenter counts a re-entry of want, the hold the call's ctx carries.
func (r *RedLock) reenter(want *redHold) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case want.IsLost():
		return false, fairlock.ErrLockLost
	case r.hold != want:
		return false, fairlock.ErrNotHeld
	}
	r.depth++
	return true, nil
}

// attempt asks every member once, at the same time. It returns the hold if
// a majority granted it with validity left, and nil otherwise (after giving
// back the members that granted it).
func (r *RedLock) attempt(ctx context.Context, lease time.Duration) (*redHold, error) {
	clk := r.cfg.Clock
	full := lease
	if full == 0 {
		full = r.cfg.Lease
	}
	start := clk.Now()
	// A master that does not answer must not hold up the others for long.
	actx, cancel := context.WithTimeout(ctx, max(full/10, 10*time.Millisecond))
	defer cancel()
	granted := make([]bool, len(r.members))
	var wg sync.WaitGroup
	for i, m := range r.members {
		// Every member is taken with a fixed lease: the hold's one watchdog,
		// not one per member, renews them.
		wg.Go(func() {
			ok, _ := m.TryLock(actx, 0, full)
			granted[i] = ok
		})
	}
	wg.Wait()
	var held []*reentrant.Mutex
	for i, ok := range granted {
		if ok {
			held = append(held, r.members[i])
		}
	}
	validity := full - clk.Now().Sub(start) - r.cfg.Margin(full)
	if len(held) >= r.quorum && validity > 0 {
		return &redHold{held: held, validity: validity, lease: full, renewed: lease == 0, clk: clk,
			cleanup: r.cfg.CleanupTimeout, quorum: r.quorum}, nil
	}
	unlockAll(ctx, held)
	return nil, ctx.Err()
}

// unlockAll releases members at once; a member's Unlock runs even when ctx
// has ended (bounded by its cleanup timeout).
func unlockAll(ctx context.Context, members []*reentrant.Mutex) []error {
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.Unlock(ctx)
		}()
	}
	wg.Wait()
	return errs
}

// watch ends the hold as lost once fewer than a quorum of its members hold
// it (one AfterFunc per member, stopped by Unlock), and starts the watchdog
// of a renewed hold.
func (h *redHold) watch() {
	for _, m := range h.held {
		mctx := m.HoldContext()
		h.stops = append(h.stops, context.AfterFunc(mctx, func() {
			if errors.Is(context.Cause(mctx), fairlock.ErrLockLost) {
				h.memberLost()
			}
		}))
	}
	if h.renewed {
		// The members' leases count from the attempt's start, so the
		// first round comes a third of the validity left after it, not of
		// a lease: a slow attempt must not lose the hold it reported.
		h.LockState()
		h.RenewLocked(h.clk, min(h.lease, h.validity)/core.RenewEvery, h.watchdog)
		h.UnlockState()
	}
}

// watchdog is one round of renewals: every member still held is extended
// to a full lease, all at once. A member that Redis no longer has ends as
// lost (and is counted by watch). If any renewal failed for another reason
// (a master unreachable), the next round comes sooner; a member whose
// renewals keep failing is lost when its lease runs out.
func (h *redHold) watchdog() {
	ctx, cancel := context.WithTimeout(transport.Detached(context.Background()), h.cleanup)
	defer cancel()
	failed := make([]bool, len(h.held))
	var wg sync.WaitGroup
	for i, m := range h.held {
		if isLost(m) {
			continue
		}
		wg.Go(func() {
			err := m.Extend(ctx, h.lease)
			failed[i] = err != nil && !errors.Is(err, fairlock.ErrLockLost) && !errors.Is(err, fairlock.ErrNotHeld)
		})
	}
	wg.Wait()
	next := h.lease / core.RenewEvery
	for _, f := range failed {
		if f {
			next = h.lease / core.RetryEvery
		}
	}
	h.LockState()
	defer h.UnlockState()
	h.RenewLocked(h.clk, next, h.watchdog)
}

// memberLost counts a member whose hold was lost; the hold is lost with
// fewer than a quorum left.
func (h *redHold) memberLost() {
	h.LockState()
	h.gone++
	lost := len(h.held)-h.gone < h.quorum
	h.UnlockState()
	if lost {
		h.Finish(fairlock.ErrLockLost)
	}
}

// end finishes the hold as released, unless it was lost first.
func (h *redHold) end() {
	for _, stop := range h.stops {
		stop()
	}
	h.Finish(fairlock.ErrReleased)
}

func isLost(m *reentrant.Mutex) bool {
	select {
	case <-m.Lost():
		return true
	default:
		return false
	}
}

// Unlock undoes one Lock or successful TryLock; the last one releases every
// member. A handle that does not hold the lock gets fairlock.ErrNotHeld; a lost hold
// gets fairlock.ErrLockLost (its members are released all the same). Members that no
// longer held it are not an error while a majority did.
func (r *RedLock) Unlock(ctx context.Context) error {
	if !r.made() {
		return core.Unmade()
	}
	if t := r.cfg.Observer.Tracer(); t != nil {
		ctx, end := t.StartCall(ctx, observe.Call{Primitive: observe.RedLock, Lock: r.name, Operation: "release",
			Script: r.cfg.Scripts.ReentrantRelease.Function()})
		err := r.unlock(ctx)
		end(err)
		return err
	}
	return r.unlock(ctx)
}

func (r *RedLock) unlock(ctx context.Context) error {
	r.mu.Lock()
	h := r.hold
	if h == nil {
		r.mu.Unlock()
		return fairlock.ErrNotHeld
	}
	r.depth--
	lost := h.IsLost()
	if r.depth > 0 && !lost {
		r.mu.Unlock()
		return nil
	}
	r.hold, r.depth = nil, 0
	r.mu.Unlock()
	h.end()
	var failed []error
	released := 0
	for _, err := range unlockAll(ctx, h.held) {
		switch {
		case err == nil:
			released++
		case errors.Is(err, fairlock.ErrNotHeld), errors.Is(err, fairlock.ErrLockLost): // lost on that master
		default:
			failed = append(failed, err)
		}
	}
	switch {
	case lost:
		return fairlock.ErrLockLost
	case released < r.quorum && len(failed) > 0:
		return errors.Join(failed...)
	}
	return nil
}

// Validity returns how long the current hold was valid for when it was
// taken: its lease minus the time the attempt took minus the drift
// allowance. With the watchdog (lease 0) the hold lasts beyond it while
// renewals succeed. 0 when not held.
func (r *RedLock) Validity() time.Duration {
	if !r.made() {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hold == nil {
		return 0
	}
	return r.hold.validity
}

// Tokens returns the fencing tokens of the members that hold the lock for
// this handle, in the order of the clients given to NewRedLock, 0 for a
// member that does not.
func (r *RedLock) Tokens() []int64 {
	if !r.made() {
		return nil
	}
	out := make([]int64, len(r.members))
	for i, m := range r.members {
		out[i] = m.Token()
	}
	return out
}

// Token returns the highest of Tokens, 0 if not held. Each master's tokens
// rise from one of its holds to the next, and any two majorities share a
// master; tokens of different masters are comparable only as far as their
// clocks agree (a token is at least its server's clock in µs). So Token rises
// from one RedLock hold to the next only while the masters' clocks agree to
// better than the time between the holds: use it as a fence only with that
// caveat (docs/redlock.md).
func (r *RedLock) Token() int64 {
	if !r.made() {
		return 0
	}
	r.mu.Lock()
	held := r.hold != nil
	r.mu.Unlock()
	if !held {
		return 0
	}
	return maxOf(r.Tokens())
}

func maxOf(v []int64) int64 {
	var m int64
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// Lost returns a channel closed when the current (or most recent) hold is
// lost: fewer than a majority of its members still hold it.
func (r *RedLock) Lost() <-chan struct{} {
	if !r.made() {
		lost, _ := core.Unheld()
		return lost
	}
	return r.latest.Lost()
}

// HoldContext returns a context cancelled when the current (or most recent)
// hold ends: cause fairlock.ErrLockLost or fairlock.ErrReleased.
//
// It carries the hold, as LockContext's does: call it only from the call
// chain that holds the lock.
func (r *RedLock) HoldContext() context.Context {
	if !r.made() {
		_, ctx := core.Unheld()
		return ctx
	}
	r.mu.Lock()
	h := r.hold
	r.mu.Unlock()
	if h == nil {
		return r.latest.Context()
	}
	return context.WithValue(h.Context(), redKey{r}, h)
}

// made reports whether r was made by NewRedLock: not nil, not a zero value. Its
// methods with an error refuse otherwise (core.Unmade), and the others
// return zero values.
func (r *RedLock) made() bool { return r != nil && len(r.members) > 0 }
