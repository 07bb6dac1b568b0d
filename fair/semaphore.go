package fair

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/fairlock/fairlock/internal/waiting"
	"github.com/fairlock/fairlock/observe"
	"github.com/redis/go-redis/v9"
)

// MaxPermits bounds the permits of a Semaphore: every permit hold is a
// record that each of its script calls reads.
const MaxPermits = 10000

// Semaphore is one handle on a fair semaphore: K permits, taken in strict
// arrival order. A waiter asking for n permits blocks those behind it until
// n are free, even if fewer would do for them, so big requests never starve.
// Each Acquire is a permit hold of its own, with a lease that the watchdog
// renews (or a fixed one): a crashed holder's permits come back when its
// lease runs out. Its methods are safe for concurrent use; goroutines sharing
// a handle each get their own permit holds.
//
// Waiters queue on a fair lock of the semaphore's own, its gate: the gate's
// holder is the first waiter, waiting for permits, and everyone behind it
// waits in the gate's queue with all the fair lock's guarantees (the
// heartbeat, the eviction of a waiter silent for longer than its wait
// timeout, the direct hand-off). The first waiter keeps the gate with the
// wait timeout as its lease, so a first waiter that died is passed over
// within one wait timeout too.
type Semaphore struct {
	owner  *core.Owner
	client redis.UniversalClient
	name   string
	what   string // the primitive, as errors name it
	// primitive is the primitive, as an observer names it.
	primitive observe.Primitive
	base      string // where its keys start: fairlock:s:{name}, or an RWMutex's
	permits   int
	cfg       core.Config
	label     string
	calls     *core.BoundCalls // its scripts bound to its keys, for every permit hold's handle

	compared atomic.Bool // its number was compared with Redis's (comparePermits)
}

// Permit is one permit hold: n permits, from one Acquire or TryAcquire. It
// has a Mutex's TTL, Extend, Token, Lost and HoldContext; not IsLocked or
// ForceUnlock, which are about the whole lock: the semaphore's Available
// and InspectSemaphore show every hold, and SetPermits changes how many
// there may be.
type Permit struct {
	s   *Semaphore
	m   *core.Mutex
	end *core.End // the hold's
	n   int
}

// NewSemaphore returns a handle on the fair semaphore name with permits
// permits (1 to MaxPermits). The number a semaphore has lives with its
// state in Redis: the first handle to use it sets it, SetPermits changes it,
// and handles made with another number follow Redis's, both ways, until the
// semaphore has been unused long enough for its keys to expire: a handle
// made with 5 on a live semaphore of 2 hands out 2, and Permits says so. So
// a deploy that changes the number in the code changes nothing until it
// calls SetPermits; the handle's first acquisition warns of the difference
// on its logger (fairlock.WithLogger), naming both numbers. It takes the options
// of every fair primitive (Option): the lease of its permit holds, the wait
// timeout of its waiters, the label Inspect shows, and so on; not
// fairlock.WithReplicas. Bad arguments get an error wrapping fairlock.ErrInvalidArgument.
// Semaphore keys do not collide with those of a Mutex of the same name.
func NewSemaphore(owner *fairlock.Owner, name string, permits int, opts ...Option) (*Semaphore, error) {
	return newSemaphore(core.OwnerOf(owner), name, transport.SemaphoreBase(name), permits, opts)
}

func newSemaphore(owner *core.Owner, name, base string, permits int, opts []Option) (*Semaphore, error) {
	cfg, err := core.ApplyFair(opts)
	if err != nil {
		return nil, err
	}
	if err := core.CheckOwner(owner); err != nil {
		return nil, err
	}
	core.Equip(owner, &cfg)
	client := owner.Client()
	if err := core.CheckName(name); err != nil {
		return nil, err
	}
	if err := checkPermits(permits); err != nil {
		return nil, err
	}
	return &Semaphore{owner: owner, client: client, name: name, what: "semaphore", primitive: observe.Semaphore, base: base, permits: permits, cfg: cfg,
		label: transport.EncodeOrigin(hostname, os.Getpid(), cfg.Label), calls: core.NewBoundCalls()}, nil
}

func checkPermits(k int) error {
	if k < 1 || k > MaxPermits {
		return core.Invalid("permits must be from 1 to %d, got %d", MaxPermits, k)
	}
	return nil
}

// place is where the semaphore's permit holds live: the permits key, and
// the gate's keys (a release serves the waiters at the head). Grants to
// waiters go out to their clients' inboxes under the gate's channel, where
// they already listen.
func (s *Semaphore) place(_ string, scripts *lua.Scripts) core.Place {
	gate := placeAt(transport.GateBase(s.base), scripts)
	return core.Place{
		What:      s.what,
		Primitive: s.primitive,
		Acquire:   scripts.SemAcquire,
		Keys:      append([]string{s.base}, gate.Keys...),
		Channel:   gate.Channel,
		Release:   scripts.SemRelease,
		Renew:     scripts.SemRenew,
		Watch:     scripts.SemWatch,
		Bound:     s.calls,
		Presence:  true, // its first waiter ends a gone holder's permits (permits.lua)
	}
}

// Name returns the semaphore's name, as given to NewSemaphore.
func (s *Semaphore) Name() string {
	if !s.made() {
		return ""
	}
	return s.name
}

// named wraps err with the primitive and the name (core.Named).
func (s *Semaphore) named(ctx context.Context, err error) error {
	return core.Named(ctx, s.what, s.name, err)
}

// Acquire waits in the queue until n permits are this caller's, and keeps
// their lease alive with the watchdog until Release. ctx bounds only the
// wait; when it ends first, Acquire leaves the queue at once and returns
// ctx's error, wrapped with the semaphore's name and whether Redis was in
// reach (errors.Is finds it). n must be from 1 to the semaphore's number of permits as Redis
// has it (Permits): more (now, or once SetPermits lowered it while the
// caller waited) gets an error wrapping fairlock.ErrInvalidArgument.
func (s *Semaphore) Acquire(ctx context.Context, n int) (*Permit, error) {
	if !s.made() {
		return nil, core.Unmade()
	}
	return s.acquire(ctx, n, core.LockAttempt(&s.cfg))
}

// TryAcquire tries to take n permits for up to wait. Wait 0 is a single
// attempt that never queues: it succeeds only if n permits are free and
// nobody waits. A positive wait queues like Acquire. With lease 0 the
// watchdog keeps the lease alive; a positive lease holds the permits for
// that long, without renewal. When the wait elapsed, it returns an error
// wrapping ErrNotAcquired: a nil Permit always comes with an error.
func (s *Semaphore) TryAcquire(ctx context.Context, n int, wait, lease time.Duration) (*Permit, error) {
	if !s.made() {
		return nil, core.Unmade()
	}
	a, err := core.TryAttempt(&s.cfg, wait, lease)
	if err != nil {
		return nil, s.named(ctx, err)
	}
	p, err := s.acquire(ctx, n, a)
	if p == nil && err == nil {
		return nil, s.named(ctx, ErrNotAcquired)
	}
	return p, err
}

// ErrNotAcquired is wrapped by the error of a TryAcquire whose wait
// elapsed before the permits were free.
var ErrNotAcquired = errors.New("fairlock: not acquired within the wait")

// Do runs fn holding n permits: it acquires them as Acquire does, runs fn
// with the hold's context (ended when the hold ends or ctx ends; ctx's end
// never ends the hold), and releases them when fn returns, on a context of
// its own bounded by the cleanup timeout. It returns fn's error, joined with the release's if that
// failed (fairlock.ErrLockLost when the hold was lost while fn ran).
func (s *Semaphore) Do(ctx context.Context, n int, fn func(ctx context.Context) error) error {
	if !s.made() {
		return core.Unmade()
	}
	if err := core.CheckFunc(fn); err != nil {
		return s.named(ctx, err)
	}
	p, err := s.Acquire(ctx, n)
	if err != nil {
		return s.named(ctx, err)
	}
	return s.named(ctx, core.Held(core.Bind(ctx, p.end), p.Release, s.cfg.CleanupTimeout, fn))
}

// Permits returns the semaphore's number of permits as Redis has it: the
// number every handle follows, whatever it was made with. If the
// semaphore is unused (nothing recorded), it is this handle's, which its
// first Acquire will record.
func (s *Semaphore) Permits(ctx context.Context) (int, error) {
	if !s.made() {
		return 0, core.Unmade()
	}
	st, err := inspectSemaphore(ctx, s.client, s.name, s.base, s.cfg.Scripts)
	if err != nil {
		return 0, s.named(ctx, err)
	}
	if st.Permits == 0 {
		return s.permits, nil
	}
	return st.Permits, nil
}

func (s *Semaphore) acquire(ctx context.Context, n int, a core.Attempt) (*Permit, error) {
	if err := core.CheckContext(ctx); err != nil {
		return nil, s.named(ctx, err)
	}
	if n < 1 || n > MaxPermits {
		// Above the semaphore's own number, the script says so: that
		// number is Redis's, which SetPermits may have changed.
		return nil, s.named(ctx, core.Invalid("asked for %d permits; a semaphore has from 1 to %d", n, MaxPermits))
	}
	// Every permit hold is a handle of its own, used once: its hold id
	// names exactly one hold, which makes each of its script calls safe to
	// retry.
	m, err := core.NewMutex(s.owner, s.name, s.cfg, s.place)
	if err != nil {
		return nil, err
	}
	end, err := m.Acquire(ctx, a, func(t *core.Turn) (*core.Grant, error) {
		return (&semKind{h: t.Agent(), s: s, n: n}).Acquire(t.Context(), t.Attempt())
	})
	if end == nil {
		return nil, err // named by the permit hold's handle
	}
	if !s.compared.Swap(true) {
		s.comparePermits(ctx)
	}
	return &Permit{s: s, m: m, end: end, n: n}, nil
}

// comparePermits warns, once per handle (at its first acquisition), when
// the semaphore's number in Redis is not the one the handle was made with:
// a deploy that changed the number in the code changed nothing, since the
// handle follows Redis's (NewSemaphore), until SetPermits changes it. The
// warning goes to the handle's logger (fairlock.WithLogger) and names both numbers.
func (s *Semaphore) comparePermits(ctx context.Context) {
	l := s.cfg.Logger
	if l == nil || s.what != "semaphore" { // an RWMutex's number is fixed
		return
	}
	st, err := inspectSemaphore(ctx, s.client, s.name, s.base, s.cfg.Scripts)
	if err != nil || st.Permits == 0 || st.Permits == s.permits {
		return
	}
	l.Warn("fairlock: the semaphore has another number of permits in Redis than this handle was made with; "+
		"it hands out Redis's number until SetPermits changes it",
		slog.String("lock", s.name), slog.Int("redis_permits", st.Permits), slog.Int("handle_permits", s.permits))
}

// Release gives the permits back; the first waiter takes them if they are
// enough for it. A second Release gets fairlock.ErrNotHeld; a hold that was lost
// gets fairlock.ErrLockLost. If ctx has already ended, Release still runs, bounded by
// the cleanup timeout. If the call fails, the watchdog stops: the permits
// come back when the lease runs out.
func (p *Permit) Release(ctx context.Context) error {
	if !p.made() {
		return core.Unmade()
	}
	return p.m.Unlock(ctx)
}

// resize changes how many permits the hold has (an RWMutex's downgrade);
// false if the hold is gone.
func (p *Permit) resize(ctx context.Context, n int) (bool, error) {
	s := p.s
	l := s.place(s.name, s.cfg.Scripts)
	ok, err := s.cfg.Scripts.SemResize.Run(ctx, s.client, core.ScriptMode(s.owner), l.Keys,
		transport.SemResize(p.m.ID(), p.m.Token(), n, core.PublishCommand(s.client), l.Channel)...).Int()
	if err != nil {
		return false, err
	}
	if ok == 1 {
		p.n = n
	}
	return ok == 1, nil
}

// Extend makes the hold's lease d from now, never shortening it, in Redis
// and in this Permit's belief, as Mutex.Extend does: fairlock.ErrNotHeld once it was
// released, fairlock.ErrLockLost (ending the hold as lost) if Redis no longer has
// it. d must be positive.
func (p *Permit) Extend(ctx context.Context, d time.Duration) error {
	if !p.made() {
		return core.Unmade()
	}
	return p.m.Extend(ctx, d)
}

// TTL returns the hold's remaining lease as Redis has it; 0 once it ended.
func (p *Permit) TTL(ctx context.Context) (time.Duration, error) {
	if !p.made() {
		return 0, core.Unmade()
	}
	s := p.s
	st, err := inspectSemaphore(ctx, s.client, s.name, s.base, s.cfg.Scripts)
	if err != nil {
		return 0, s.named(ctx, err)
	}
	for _, h := range st.Holders {
		if h.Owner == p.m.ID() {
			return h.TTL, nil
		}
	}
	return 0, nil
}

// N returns the number of permits held.
func (p *Permit) N() int {
	if !p.made() {
		return 0
	}
	return p.n
}

// Token returns the hold's fencing token, 0 once it ended. Tokens rise from
// one permit hold to the next of the same semaphore.
func (p *Permit) Token() int64 {
	if !p.made() {
		return 0
	}
	return p.m.Token()
}

// Lost returns a channel closed if the hold is lost: a renewal found it gone,
// or its lease ran out without a successful renewal. Release never closes it.
func (p *Permit) Lost() <-chan struct{} {
	if !p.made() {
		lost, _ := core.Unheld()
		return lost
	}
	return p.end.Lost()
}

// HoldContext returns a context cancelled when the hold ends for any reason;
// context.Cause tells fairlock.ErrLockLost (lost) from fairlock.ErrReleased
// (released) and fairlock.ErrClosed (the owner's Close ended it).
func (p *Permit) HoldContext() context.Context {
	if !p.made() {
		_, ctx := core.Unheld()
		return ctx
	}
	return p.end.Context()
}

// SetPermits changes the number of permits of the semaphore in Redis, for
// every handle, and returns the number it had (0 if it had none recorded).
// Holds in force keep their permits: after lowering, more than k may be in
// use until enough are released. Raising wakes the first waiter.
func (s *Semaphore) SetPermits(ctx context.Context, k int) (int, error) {
	if !s.made() {
		return 0, core.Unmade()
	}
	if err := core.CheckContext(ctx); err != nil {
		return 0, s.named(ctx, err)
	}
	if err := checkPermits(k); err != nil {
		return 0, err
	}
	l := s.place(s.name, s.cfg.Scripts)
	was, err := s.cfg.Scripts.SemSet.Run(ctx, s.client, core.ScriptMode(s.owner), l.Keys, transport.SemSet(k, core.PublishCommand(s.client), l.Channel)...).Int()
	if err != nil {
		return 0, fmt.Errorf("fairlock: setting the permits of %q: %w", s.name, err)
	}
	return was, nil
}

// Available returns how many permits are free now (0 when more than the
// number of permits are in use, after SetPermits lowered it).
func (s *Semaphore) Available(ctx context.Context) (int, error) {
	if !s.made() {
		return 0, core.Unmade()
	}
	st, err := inspectSemaphore(ctx, s.client, s.name, s.base, s.cfg.Scripts)
	if err != nil {
		return 0, err
	}
	k := st.Permits
	if k == 0 {
		k = s.permits // nothing recorded: the first caller will set its own
	}
	return max(k-st.InUse, 0), nil
}

// SemaphoreState is a snapshot of a semaphore, as InspectSemaphore returns
// it.
type SemaphoreState struct {
	// Permits is the number of permits recorded in Redis: 0 when the
	// semaphore is unused (its keys expired), and the next caller sets it.
	Permits int
	// InUse is the sum of the permits held.
	InUse int
	// Holders lists the permit holds in force, in token order.
	Holders []PermitHolder
	// Queue lists the waiters in the order they will be served. The first
	// is the gate's holder, waiting for permits (its Deadline is its
	// gate's remaining lease); the rest are the gate's queue.
	Queue []Waiter
}

// PermitHolder describes one permit hold.
type PermitHolder struct {
	Owner   string        // hold id of the permit hold
	Permits int           // permits held
	TTL     time.Duration // remaining lease
	Token   int64         // fencing token
	Origin
}

// InspectSemaphore reads the state of the semaphore name without changing
// it.
func InspectSemaphore(ctx context.Context, client redis.UniversalClient, name string) (SemaphoreState, error) {
	if err := core.CheckClient(client); err != nil {
		return SemaphoreState{}, err
	}
	if err := core.CheckName(name); err != nil {
		return SemaphoreState{}, err
	}
	return inspectSemaphore(ctx, client, name, transport.SemaphoreBase(name), lua.Default())
}

func inspectSemaphore(ctx context.Context, client redis.UniversalClient, name, base string, scripts *lua.Scripts) (SemaphoreState, error) {
	if err := core.CheckContext(ctx); err != nil {
		return SemaphoreState{}, err
	}
	v, err := scripts.SemState.Run(ctx, client, nil, []string{base}).Slice()
	if err != nil {
		return SemaphoreState{}, fmt.Errorf("fairlock: inspecting semaphore %q: %w", name, err)
	}
	st, err := parseSemState(v)
	if err != nil {
		return st, err
	}
	g, err := scripts.FairInspect.Run(ctx, client, nil, transport.QueueKeys(transport.GateBase(base))).Slice()
	if err != nil {
		return SemaphoreState{}, fmt.Errorf("fairlock: inspecting semaphore %q: %w", name, err)
	}
	gate, err := transport.DecodeInspect(g)
	if err != nil {
		return st, err
	}
	// Each waiter is shown by the hold id of the permit hold it waits for,
	// which is the Owner of its PermitHolder once served.
	if h := gate.Holder; h != nil {
		st.Queue = append(st.Queue, Waiter{Owner: h.Permit.Owner, Entry: h.Entry, Deadline: h.TTL,
			Permits: h.Permit.N, Origin: parseOrigin(h.Origin)})
	}
	for _, w := range queueOf(gate) {
		w.Owner = w.permitOwner
		st.Queue = append(st.Queue, w.Waiter)
	}
	return st, nil
}

func parseSemState(v []any) (SemaphoreState, error) {
	in, err := transport.DecodeSemState(v)
	if err != nil {
		return SemaphoreState{}, err
	}
	st := SemaphoreState{Permits: in.Permits}
	for _, ph := range in.Holds {
		h := PermitHolder{Owner: ph.Owner, Permits: ph.Permits, TTL: ph.TTL, Token: ph.Token, Origin: parseOrigin(ph.Origin)}
		st.InUse += h.Permits
		st.Holders = append(st.Holders, h)
	}
	slices.SortFunc(st.Holders, func(a, b PermitHolder) int { return cmp.Compare(a.Token, b.Token) })
	return st, nil
}

// semKind takes the permits of one permit hold: at once when nobody waits,
// otherwise through the gate.
type semKind struct {
	h core.Agent
	s *Semaphore
	n int
}

// semReply is sem_acquire.lua's answer.
type semReply struct {
	held      bool
	token     int64
	grantedAt int64 // held: when the permits were served to the caller as it waited (Redis ms; 0: granted to this call)
	expiry    int64 // held: the hold's expiry (Redis ms)
	gateLost  bool  // mode "gate": the caller's gate hold ran out
	tooMany   int64 // n is above the semaphore's number, this one
	next      int64 // not now: when the first permit hold expires (Redis ms, 0: none)
	now       int64 // Redis's clock (ms)
	settling  bool  // not now: the server lost its data and settles until next
	clock     redisClock
}

// served is the grant of permits served to the caller while it waited:
// usable at once, lasting until the reply's expiry unless claimed.
func (r semReply) served() *core.Grant {
	return &core.Grant{Token: r.token, Since: r.clock.notLater(r.grantedAt),
		First: time.Duration(r.expiry-r.grantedAt) * time.Millisecond, Handoff: true}
}

func (k *semKind) attempt(ctx context.Context, a core.Attempt, mode string, gate *core.Mutex) (semReply, error) {
	h := k.h
	gateOwner, gateToken := "", int64(0)
	if gate != nil {
		gateOwner, gateToken = gate.ID(), gate.Token()
	}
	if err := h.Present(ctx); err != nil {
		return semReply{}, err
	}
	clk := h.Config.Clock
	sent := clk.Now()
	req, _ := h.NewRequest() // sem_acquire.lua takes no stale token
	v, err := h.Config.Scripts.SemAcquire.Run(ctx, h.Client, h.Mode(), h.Keys, transport.SemAcquire{
		Owner: h.ID, N: k.n, Lease: transport.Ms(a.Lease), Permits: k.s.permits, Mode: mode,
		GateOwner: gateOwner, GateToken: gateToken, Origin: k.s.label, Publish: h.Publish, Channel: h.Channel,
	}.Args()...).Result()
	read := clk.Now()
	h.Answered(ctx, req, err) // a lost reply's grant is undone
	if err != nil {
		if ctx.Err() != nil {
			err = core.NoAnswer(sent, read, ctx.Err())
		}
		return semReply{}, err
	}
	r, err := transport.DecodeSemAcquire(v)
	switch {
	case err != nil:
		return semReply{}, err
	case r.GateLost:
		return semReply{gateLost: true}, nil
	case r.TooMany != 0:
		return semReply{tooMany: r.TooMany}, nil
	case r.Checked:
		return semReply{}, nil // nothing was served to the caller
	}
	redisNow := time.UnixMilli(r.Now)
	c := redisClock{atSend: redisNow.Sub(sent), atRead: redisNow.Sub(read)}
	if r.Held {
		return semReply{held: true, token: r.Token, grantedAt: r.Granted, expiry: r.Expiry, now: r.Now, clock: c}, nil
	}
	return semReply{next: r.Next, now: r.Now, settling: r.Settling, clock: c}, nil
}

// Acquire is one Acquire or TryAcquire: a first attempt that passes nobody,
// then the gate's queue, then, as the gate's holder, the wait for permits.
// The permits may come at any point of the wait: a release serves the
// waiters at the head, queued or holding the gate, whose requests fit.
func (k *semKind) Acquire(ctx context.Context, a core.Attempt) (*core.Grant, error) {
	// The owner's presence first (if it keeps one): a hold's lease counts from
	// a send time after it was up.
	if err := k.h.Present(ctx); err != nil {
		return nil, err
	}
	clk := k.h.Config.Clock
	sent := clk.Now()
	r, err := k.attempt(ctx, a, transport.SemTry, nil)
	if err == nil && r.settling {
		// Held by nobody's while a server that lost its data settles (at
		// most the presence grace): wait it out, and try once more.
		if err = core.Settle(ctx, clk, time.Duration(r.next-r.now)*time.Millisecond); err == nil {
			sent = clk.Now()
			r, err = k.attempt(ctx, a, transport.SemTry, nil)
		}
	}
	if g, done, err := k.outcome(a, r, err, sent); done {
		return g, err
	}
	if a.Wait == 0 && !a.Forever {
		return nil, nil
	}
	end := sent.Add(a.Wait)
	for {
		gate, served, err := k.lockGate(ctx, a, end)
		if served != nil {
			a.HandedOff(served.Since)
			if g, err := usable(ctx, k.h, served, a); g != nil || err != nil {
				if g != nil {
					g.Waited = true
				}
				return g, err
			}
			continue // served too late to use, and gone: queue afresh
		}
		if gate == nil || err != nil {
			k.giveBack(ctx)
			return nil, err
		}
		g, again, err := k.waitPermits(ctx, a, gate, end)
		if g == nil && !again {
			k.giveBack(ctx)
		}
		// The next waiter's turn: the gate goes straight to it.
		if err := gate.Unlock(ctx); err != nil && !errors.Is(err, core.ErrLockLost) {
			k.h.Info("giving the semaphore's gate on failed; its lease will run out", "error", err)
		}
		if !again {
			if g != nil {
				g.Waited = true
			}
			return g, err
		}
	}
}

// giveBack returns permits that a release may have served to this call just
// as it stopped waiting (its wait ended, its ctx was cancelled, or Redis
// failed): nobody will use them, and the waiters behind should not wait for
// their lease to run out. It runs even when ctx has ended.
func (k *semKind) giveBack(ctx context.Context) {
	h := k.h
	if err := h.Undo(ctx, transport.UndoAny); err != nil {
		h.Info("giving back permits served to a waiter that stopped waiting failed; their first lease will run out", "error", err)
	}
}

// outcome reads a reply that ends the call: a grant, too many permits asked
// for, or an error.
func (k *semKind) outcome(a core.Attempt, r semReply, err error, sent time.Time) (*core.Grant, bool, error) {
	switch {
	case err != nil:
		return nil, true, err
	case r.tooMany != 0:
		return nil, true, core.Invalid("asked for %d permits of semaphore %q, which has %d", k.n, k.h.Name, r.tooMany)
	case r.held && r.grantedAt != 0:
		g := r.served()
		a.HandedOff(g.Since)
		return g, true, nil
	case r.held:
		return &core.Grant{Token: r.token, Since: sent}, true, nil
	}
	return nil, false, nil
}

// lockGate queues on the gate until it is this call's (gate), or this
// call's permits were served to it as it waited there (served), or end
// (unless a waits forever): all nil when the wait elapsed. The gate's lease
// is the wait timeout. Each of its attempts says what it asks for (the
// permit hold's hold id, its permits and lease: transport.PermitRequest), which
// the gate keeps so that a release can serve it in the queue.
func (k *semKind) lockGate(ctx context.Context, a core.Attempt, end time.Time) (gate *core.Mutex, served *core.Grant, err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	cfg := *k.h.Config
	cfg.Lease = cfg.WaitTimeout
	cfg.Observer = cfg.Observer.QueueOnly() // the gate's own holds are not the user's
	cfg.Turn = true                         // nor are they for Close to end first
	ga := core.LockAttempt(&cfg)
	if !a.Forever {
		left := end.Sub(cfg.Clock.Now())
		if left <= 0 {
			return nil, nil, nil
		}
		ga = core.Attempt{Wait: left, Lease: cfg.Lease}
	}
	ga.Report = a.Report // the permit hold's acquisition queues here
	req := transport.PermitRequest{Owner: k.h.ID, N: k.n, Lease: transport.Ms(a.Lease)}
	gate, err = core.NewMutex(k.h.Owner, k.h.Name, cfg, func(name string, scripts *lua.Scripts) core.Place {
		p := placeAt(transport.GateBase(k.s.base), scripts)
		p.Primitive = k.h.Primitive // its waiters are the semaphore's
		p.What = k.h.What           // and so are its errors
		return p
	})
	if err != nil {
		return nil, nil, err
	}
	// The gate is a handle of its own, used for this one turn: its hold id
	// is the gate's (Owner), which a release serves permits to.
	t, err := gate.Begin(ctx, ga)
	if err != nil {
		return nil, nil, err
	}
	gq := newGateQueue(t.Agent(), req, k)
	held, err := gq.Acquire(t.Context(), t.Attempt())
	if _, err := gate.Keep(t, held, err); held == nil || err != nil {
		return nil, gq.served, err
	}
	return gate, nil, nil
}

// served asks whether this call's permits were served to it while it waited
// in the gate's queue: the grant, or nil (permitSource).
func (k *semKind) served(ctx context.Context) (*core.Grant, error) {
	r, err := k.attempt(ctx, core.Attempt{}, transport.SemCheck, nil)
	if err != nil || !r.held {
		return nil, err
	}
	return r.served(), nil
}

// waitPermits is the gate's holder waiting for permits (waiting.Loop). It
// tries, then tries again on a release's note to its gate hold id, when
// the first permit hold expires (which sends no message), every wait
// timeout / 3, when its subscription is confirmed, and when the gate is
// lost. again reports the gate lost (this client fell silent past the wait
// timeout): the call queues afresh at the tail, like an evicted waiter.
func (k *semKind) waitPermits(ctx context.Context, a core.Attempt, gate *core.Mutex, end time.Time) (g *core.Grant, again bool, err error) {
	sub, err := core.HubsOf(k.h.Owner).Subscribe(ctx, transport.Inbox(k.h.Channel, gate.ID()), gate.ID())
	if err != nil {
		return nil, false, err
	}
	defer sub.Close()
	w := waiting.New(k.h, a, "waiting for permits", end)
	defer w.Close()
	w.Listen(sub)
	// The gate's watchdog keeps the gate while it can; its loss wakes the
	// waiter, whose next try learns it.
	stop := context.AfterFunc(gate.HoldContext(), func() { w.Sleeper().Fire(transport.Retry, nil) })
	defer stop()
	pw := &permitWait{k: k, a: a, gate: gate, w: w}
	err = w.Run(ctx, pw, true)
	return pw.g, pw.again, err
}

// permitWait is the gate's holder waiting for permits (waiting.Steps).
type permitWait struct {
	k    *semKind
	a    core.Attempt
	gate *core.Mutex
	w    *waiting.Loop

	last     semReply  // the latest "not now", after which any serving came
	lastSent time.Time // when its request was sent

	g     *core.Grant // the permits, when the wait ends with them
	again bool        // the gate was lost: queue afresh
}

// Try asks for the permits as the gate's holder.
func (pw *permitWait) Try(ctx context.Context) (bool, error) {
	k, a := pw.k, pw.a
	if err := k.h.Present(ctx); err != nil {
		return false, err // while it is down: an outage, ridden out
	}
	clk := k.h.Config.Clock
	sent := clk.Now()
	actx, cancel := pw.w.Bound(ctx)
	r, err := k.attempt(actx, a, transport.SemGate, pw.gate)
	cancel()
	if err != nil {
		return false, err
	}
	if pw.w.FellBack() && r.held && r.grantedAt != 0 {
		// Served while it slept: the reply says all the note would have.
		pw.w.Delivered(ctx, "permits served", pw.servedNote)
	}
	if g, done, err := k.outcome(a, r, nil, sent); done {
		pw.g = g
		return true, err
	}
	if r.gateLost {
		k.h.Info("the first waiter of a semaphore lost its place after a stall longer than its wait timeout; re-joining at the tail")
		pw.again = true
		return true, nil
	}
	pw.last, pw.lastSent = r, sent
	// Try again when the first permit hold expires (a lease that runs out
	// sends no message), and at the latest after a heartbeat's time, wait
	// timeout / 3: a waiter in the queue finds permits served to it by its
	// heartbeat, and the first waiter must not wait a whole lease for a
	// release whose note never reached it. (An expiry not ahead of Redis's
	// clock is never armed: a timer in the past would fire at once, again
	// and again.)
	at := clk.Now().Add(k.h.Config.WaitTimeout / 3)
	if expiry := r.clock.notEarlier(r.next).Add(time.Millisecond); r.next > r.now && expiry.Before(at) {
		at = expiry
	}
	pw.w.FallBackAt(at)
	return false, nil
}

// servedNote reports whether payload serves permits to the gate's holder.
func (pw *permitWait) servedNote(payload string) bool {
	return transport.IsNote[transport.Served](payload, pw.gate.ID())
}

// News is a note on the gate's channel: permits served to the gate's
// holder end the wait if still usable; any other note, or permits served
// too late to use, prompt a try.
func (pw *permitWait) News(ctx context.Context, wk transport.Wake) (done, try bool, err error) {
	n, _ := transport.ParseNote(wk.Payload, pw.gate.ID())
	sv, ok := n.(transport.Served)
	if !ok {
		return false, true, nil // another note for it: look again
	}
	r := semReply{held: true, token: sv.Token, grantedAt: sv.GrantedAt, expiry: sv.Expiry, clock: pw.last.clock}
	g := r.served()
	if pw.lastSent.After(g.Since) {
		g.Since = pw.lastSent
	}
	pw.a.HandedOff(g.Since)
	if g, err := usable(ctx, pw.k.h, g, pw.a); g != nil || err != nil {
		pw.g = g
		return true, false, err
	}
	return false, true, nil
}

// Leave: the gate's holder leaves nothing to undo here; the caller gives
// back what may have been served and hands the gate on.
func (pw *permitWait) Leave(context.Context) {}

// made reports whether s was made by NewSemaphore: not nil, not a zero value. Its
// methods with an error refuse otherwise (core.Unmade), and the others
// return zero values.
func (s *Semaphore) made() bool { return s != nil && s.owner != nil }

// made reports whether p was made by an Acquire: not nil, not a zero value. Its
// methods with an error refuse otherwise (core.Unmade), and the others
// return zero values.
func (p *Permit) made() bool { return p != nil && p.m != nil }
