package fairlock_test

// The executable specification of the fair semaphore and of the fair
// read-write lock, like the fair lock's (property_test.go): a rapid state
// machine drives fair.Semaphore (or fair.RWMutex) handles, each on a client
// of its own, against miniredis under the fake clock. Its actions: join
// (Acquire, or TryAcquire with a fixed lease; RLock or Lock), try without
// waiting, release, give up, crash, change the number of permits (the
// semaphore) or downgrade a write hold (the RW lock), and let time pass.
// After every step it checks each guarantee, and what Redis shows of the
// gate, the fair lock its waiters queue on (queueLedger): every message on
// the gate's channel (grants of permits, hand-offs of the gate, head
// notices) counted, and its queue's tidiness. An RWMutex is a semaphore of
// MaxPermits permits where a reader takes 1 and a writer all: the same
// accounting check is "no reader beside a writer, never two writers".
//
// Two rules are checked at the call that must keep them, not only at the
// settled steps, where the waiters' own retries would hide a breach:
//   - serving is work-conserving: a release, a raise of the number of
//     permits or a downgrade leaves no free permits that the first waiter
//     not yet served fits (checked with every other handle's client held
//     still, so that no retry of theirs can make up for it);
//   - a call about what is not held is answered as such, and changes
//     nothing: a renewal, release or resize with a stale token or an owner
//     id that holds nothing, and a gate holder's request with the wrong
//     gate hold id or token (staleCall).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"
)

const semName = "semspec"

// semProc is one semaphore (or RW lock) handle on a client of its own. It
// has at most one Acquire (or lock call) or hold at a time.
type semProc struct {
	label     string
	client    *redis.Client
	s         *fair.Semaphore
	rw        *fair.RWMutex
	cut       *redistest.Partition
	sever     *redistest.Severable
	still     *stillHook      // held: its client's commands wait
	presence  *fairlock.Owner // its owner, if it keeps a presence (fairlock.WithPresence)
	phase     phase
	n         int           // permits asked for or held
	fixed     time.Duration // fixed lease; 0: the watchdog's
	joined    int
	cancel    context.CancelFunc
	result    chan semResult
	running   bool
	permit    specHold
	grantedAt time.Time
	crashedAt time.Time
	silentAt  time.Time // when it crashed (crashedAt is when its holds must end)
}

type semResult struct {
	p   specHold
	err error
}

// specHold is a hold as the machine sees it: a *fair.Permit, or an RW
// lock's read or write hold.
type specHold interface {
	N() int
	Token() int64
	Lost() <-chan struct{}
	Release(ctx context.Context) error
}

type rwHold struct {
	m     *fair.RWMutex
	write bool
}

func (h rwHold) N() int {
	if h.write {
		return fair.MaxPermits
	}
	return 1
}
func (h rwHold) Token() int64          { return h.m.Token() }
func (h rwHold) Lost() <-chan struct{} { return h.m.Lost() }
func (h rwHold) Release(ctx context.Context) error {
	if h.write {
		return h.m.Unlock(ctx)
	}
	return h.m.RUnlock(ctx)
}

// acquire is one call: wait and fixed as TryAcquire's; forever: Acquire (or
// RLock, Lock). It returns nil, nil when the wait elapsed.
func (p *semProc) acquire(ctx context.Context, n int, forever bool, wait, fixed time.Duration) (specHold, error) {
	if p.rw == nil {
		var permit *fair.Permit
		var err error
		if forever {
			permit, err = p.s.Acquire(ctx, n)
		} else {
			permit, err = p.s.TryAcquire(ctx, n, wait, fixed)
			if errors.Is(err, fair.ErrNotAcquired) {
				err = nil // the wait elapsed: the model says when
			}
		}
		if permit == nil {
			return nil, err
		}
		return permit, err
	}
	write := n == fair.MaxPermits
	var ok bool
	var err error
	switch {
	case forever && write:
		err = p.rw.Lock(ctx)
		ok = err == nil
	case forever:
		err = p.rw.RLock(ctx)
		ok = err == nil
	case write:
		ok, err = p.rw.TryLock(ctx, wait, fixed)
	default:
		ok, err = p.rw.TryRLock(ctx, wait, fixed)
	}
	if !ok {
		return nil, err
	}
	return rwHold{m: p.rw, write: write}, nil
}

type semSpec struct {
	t       *rapid.T
	scripts *lua.Scripts
	base    string // the semaphore's (or RW lock's) key
	mr      *miniredis.Miniredis
	clk     *clock.Fake
	probe   *redis.Client
	admin   *fair.Semaphore // SetPermits
	procs   []*semProc
	k       int // the number of permits, as last set
	k0      int // the number the handles were made with
	rw      bool
	joins   int

	lastToken  int64
	ledger     *queueLedger // the gate's messages and queue, as Redis shows them
	servable   time.Time    // the first waiter could be served since (zero: not)
	servableBy string
	allowance  time.Duration // how long it may take
}

// newSemSpec makes the model; the last present of its processes keep a
// presence (fairlock.WithPresence).
func newSemSpec(t *rapid.T, scripts *lua.Scripts, rw bool, present int) *semSpec {
	mr, clk := fakeServer(t)
	s := &semSpec{t: t, scripts: scripts, mr: mr, clk: clk, k: 3, k0: 3, rw: rw}
	if rw {
		s.k, s.k0 = fair.MaxPermits, fair.MaxPermits
	}
	s.probe = redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	base := "fairlock:s:{" + semName + "}"
	if rw {
		base = "fairlock:rw:{" + semName + "}"
	}
	s.base = base
	s.ledger = newQueueLedger(t, s.probe, "the gate", base+":gate", base)
	// A waiter whose own attempt on the gate passed over the dead ahead of
	// it learns from its reply that it is the gate's head.
	s.ledger.replies = newHeadReplies(scripts.FairAcquire)
	opts := func(label string) []fair.Option {
		return []fair.Option{fair.WithLabel(label),
			fairlock.WithWaitTimeout(waitTimeout), fairlock.WithLease(lease)}
	}
	var err error
	if s.admin, err = fair.NewSemaphore(redistest.OwnerOn(s.probe, s.clk, scripts), semName, 3, opts("admin")...); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < processes; i++ {
		c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
		cut, sever, still := &redistest.Partition{}, &redistest.Severable{}, &stillHook{}
		c.AddHook(cut)
		c.AddHook(sever)
		c.AddHook(still)
		c.AddHook(s.ledger.replies)
		label := fmt.Sprintf("p%d", i)
		p := &semProc{label: label, client: c, cut: cut, sever: sever, still: still}
		owner := redistest.OwnerOn(c, s.clk, scripts)
		if i >= processes-present {
			var err error
			if p.presence, err = redistest.PresentOwner(c, s.clk, scripts); err != nil {
				t.Fatal(err)
			}
			owner = p.presence
		}
		var err error
		if rw {
			p.rw, err = fair.NewRWMutex(owner, semName, opts(label)...)
		} else {
			p.s, err = fair.NewSemaphore(owner, semName, 3, opts(label)...)
		}
		if err != nil {
			t.Fatal(err)
		}
		s.procs = append(s.procs, p)
	}
	return s
}

func (s *semSpec) inspect() fair.SemaphoreState {
	inspect := fair.InspectSemaphore
	if s.rw {
		inspect = fair.InspectRWMutex
	}
	st, err := inspect(context.Background(), s.probe, semName)
	if err != nil {
		s.t.Fatalf("Inspect: %v", err)
	}
	switch st.Permits {
	case 0:
		// Unused long enough for its keys to expire: the next caller sets
		// the number its handle was made with.
		s.k = s.k0
	case s.k:
	default:
		s.t.Fatalf("the semaphore has %d permits, %d were set", st.Permits, s.k)
	}
	return st
}

func (s *semSpec) pick(ph phase) *semProc {
	var c []*semProc
	for _, p := range s.procs {
		if p.phase == ph {
			c = append(c, p)
		}
	}
	if len(c) == 0 {
		s.t.Skip("no such handle")
	}
	return rapid.SampledFrom(c).Draw(s.t, "handle")
}

// draws the permits a call asks for: 1 or 2 of a semaphore; a read (1) or
// a write (all) of the RW lock.
func (s *semSpec) permits(t *rapid.T) int {
	if s.rw {
		return rapid.SampledFrom([]int{1, fair.MaxPermits}).Draw(t, "read (1) or write")
	}
	return rapid.IntRange(1, 2).Draw(t, "permits")
}

func (s *semSpec) join(t *rapid.T) {
	p := s.pick(idle)
	p.n = s.permits(t)
	p.fixed = 0
	if rapid.Bool().Draw(t, "fixed lease") {
		p.fixed = time.Duration(rapid.IntRange(500, 2500).Draw(t, "lease ms")) * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.joins++
	p.phase, p.joined, p.cancel = waiting, s.joins, cancel
	p.result, p.running = make(chan semResult, 1), true
	go func() {
		var r semResult
		r.p, r.err = p.acquire(ctx, p.n, p.fixed == 0, time.Hour, p.fixed)
		p.result <- r
	}()
	s.settle()
}

func (s *semSpec) tryWithoutWaiting(t *rapid.T) {
	p := s.pick(idle)
	n := s.permits(t)
	before := s.inspect()
	permit, err := p.acquire(context.Background(), n, false, 0, 0)
	if n > s.k {
		// Guarantee 5: more than the semaphore has is an error, not a wait.
		if !errors.Is(err, fairlock.ErrInvalidArgument) {
			t.Fatalf("%s TryAcquire(%d, 0) of %d permits = %v, %v; want ErrInvalidArgument", p.label, n, s.k, permit, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s TryAcquire(%d, 0): %v", p.label, n, err)
	}
	live := slices.ContainsFunc(before.Queue, func(w fair.Waiter) bool { return !w.Expired })
	fits := before.InUse+n <= s.k
	// No barging: a newcomer passes no waiter, even with permits free. The
	// permits of a process that kept a presence and crashed the grace ago
	// or more may be taken back by any attempt.
	if permit != nil && (live || !fits) && (live || before.InUse-s.presenceGone(before)+n > s.k) {
		t.Fatalf("no barging: %s took %d permits with TryAcquire(0) with %d of %d in use and queue %+v",
			p.label, n, before.InUse, s.k, before.Queue)
	}
	if permit == nil && !live && fits {
		t.Fatalf("TryAcquire(%d, 0) by %s failed with %d of %d in use and nobody waiting", n, p.label, before.InUse, s.k)
	}
	if permit != nil {
		p.n, p.fixed, p.phase = n, 0, waiting
		s.granted(p, permit)
	}
}

func (s *semSpec) release(t *rapid.T) {
	p := s.pick(holding)
	var err error
	s.serving(p, func() bool {
		err = p.permit.Release(context.Background())
		return err == nil // "not held" serves nobody: a lease that ran out is the waiters' timers' news
	}, p.label+"'s release")
	switch {
	case err == nil:
	case errors.Is(err, fairlock.ErrLockLost) && p.fixed > 0:
		// A fixed lease may have run out.
	default:
		t.Fatalf("Release by %s: %v", p.label, err)
	}
	p.phase, p.permit = idle, nil
	s.settle()
}

func (s *semSpec) giveUp(t *rapid.T) {
	p := s.pick(waiting)
	p.cancel()
	r := <-p.result
	p.running = false
	switch {
	case r.err == nil:
		s.granted(p, r.p) // granted just before giving up
	case errors.Is(r.err, context.Canceled):
		p.phase = idle
	default:
		t.Fatalf("%s's Acquire failed: %v", p.label, r.err)
	}
	s.settle()
}

// crash cuts a process off from Redis for good: it neither renews nor
// leaves. Its permits must come back within its lease, and its place in
// the queue within one wait timeout.
func (s *semSpec) crash(t *rapid.T) {
	p := rapid.SampledFrom(s.procs).Draw(t, "handle")
	if p.phase == crashed {
		t.Skip("already crashed")
	}
	p.cut.On.Store(true)
	p.silentAt = s.clk.Now()
	if p.presence != nil {
		p.sever.Sever() // its sockets close, and with them its presence
	}
	if p.phase == idle {
		p.phase = crashed
		p.crashedAt = s.clk.Now()
		return
	}
	was := p.phase
	p.phase, p.crashedAt = crashed, s.clk.Now()
	if was == holding && p.fixed > 0 {
		// Its lease was fixed: it ends when it was always going to.
		p.crashedAt = p.grantedAt.Add(p.fixed - lease)
	}
	s.settle()
}

// presenceGone is the permits st shows held by processes that kept a
// presence and crashed at least the grace ago: the gate's holder may take
// them back.
func (s *semSpec) presenceGone(st fair.SemaphoreState) int {
	n := 0
	for _, h := range st.Holders {
		if p := s.byLabel(h.Label); p != nil && p.phase == crashed && p.presence != nil &&
			s.clk.Now().Sub(p.silentAt) >= core.PresenceGrace {
			n += h.Permits
		}
	}
	return n
}

// blip breaks every connection of a live process that keeps a presence (a
// network reset, a CLIENT KILL), holding permits or idle: it connects again
// at once, within the grace. A blip costs nothing: the holder keeps its
// permits (Lost open, Redis agreeing); a fixed lease is kept too (checked,
// not lengthened), until it runs out, which the checks after it judge.
func (s *semSpec) blip(t *rapid.T) {
	var c []*semProc
	for _, p := range s.procs {
		if p.presence != nil && (p.phase == holding || p.phase == idle) {
			c = append(c, p)
		}
	}
	if len(c) == 0 {
		t.Skip("no live process that keeps a presence, holding or idle")
	}
	p := rapid.SampledFrom(c).Draw(t, "handle")
	live := p.phase == holding && !isClosed(p.permit.Lost())
	if live {
		pingAnswered(t, p.label, p.presence, s.clk)
	}
	ups := redistest.PresenceUps(p.presence)
	p.sever.Sever()
	if ups > 0 {
		riddenOut(t, p.label, p.presence, s.clk, ups)
	}
	if live && p.fixed == 0 && isClosed(p.permit.Lost()) {
		t.Fatalf("presence: a blip cost %s its permits", p.label)
	}
	s.settle()
}

func (s *semSpec) setPermits(t *rapid.T) {
	if s.rw {
		t.Skip("the RW lock's number is fixed")
	}
	k := rapid.IntRange(1, 4).Draw(t, "permits")
	var err error
	s.serving(nil, func() bool {
		if _, err = s.admin.SetPermits(context.Background(), k); err == nil {
			s.k = k
		}
		return err == nil
	}, fmt.Sprintf("SetPermits(%d)", k))
	if err != nil {
		t.Fatalf("SetPermits(%d): %v", k, err)
	}
	s.settle()
}

// downgrade: a writer takes the read lock and unlocks the write lock. It
// keeps its hold, token and all, as a read hold of 1 permit; readers
// waiting first in line come in at once.
func (s *semSpec) downgrade(t *rapid.T) {
	if !s.rw {
		t.Skip("a semaphore has no downgrade")
	}
	var c []*semProc
	for _, p := range s.procs {
		if p.phase == holding && p.n == fair.MaxPermits && p.fixed == 0 {
			c = append(c, p)
		}
	}
	if len(c) == 0 {
		t.Skip("no writer")
	}
	p := rapid.SampledFrom(c).Draw(t, "writer")
	ctx := context.Background()
	tok := p.rw.Token()
	if err := p.rw.RLock(p.rw.HoldContext()); err != nil {
		t.Fatalf("RLock by writer %s: %v", p.label, err)
	}
	var err error
	s.serving(p, func() bool {
		err = p.rw.Unlock(ctx)
		return err == nil
	}, p.label+"'s downgrade")
	if err != nil {
		t.Fatalf("Unlock by writer %s holding the read lock: %v", p.label, err)
	}
	if got := p.rw.Token(); got != tok {
		t.Fatalf("%s's downgraded hold has token %d, had %d", p.label, got, tok)
	}
	p.n, p.permit = 1, rwHold{m: p.rw}
	s.settle()
}

func (s *semSpec) advance(t *rapid.T) {
	s.clk.Advance(time.Duration(rapid.Int64Range(1, int64(maxStep)).Draw(t, "step")))
	s.settle()
}

func (s *semSpec) wait(t *rapid.T) {
	steps := rapid.IntRange(1, int(2*waitTimeout/maxStep)).Draw(t, "steps")
	for i := 0; i < steps; i++ {
		s.clk.Advance(maxStep)
		s.settle()
		s.check(t)
	}
}

// serving runs call, a call of actor's (nil: the admin's) that serves the
// waiters at the head (a release, SetPermits, a downgrade), with every
// other handle's client held still, so that nothing else reaches Redis
// until it returns; if it served (call reports it), the result must be
// work-conserving.
func (s *semSpec) serving(actor *semProc, call func() bool, what string) {
	for _, p := range s.procs {
		if p != actor {
			p.still.hold()
		}
	}
	defer func() {
		for _, p := range s.procs {
			if p != actor {
				p.still.release()
			}
		}
	}()
	if call() {
		s.workConserved(what)
	}
}

// workConserved checks that serving, just done by what, handed on every
// free permit it could: the first waiter not yet served (the gate's holder,
// else the first live entry of the gate's queue) does not fit in the
// permits left free. A request for more than the semaphore has is its
// waiter's to learn, and stops the serving.
func (s *semSpec) workConserved(what string) {
	st := s.inspect()
	if st.Permits == 0 {
		return
	}
	served := map[string]bool{}
	for _, h := range st.Holders {
		served[h.Owner] = true
	}
	for _, w := range st.Queue {
		if w.Expired || served[w.Owner] {
			continue // a served gate holder that has yet to give the gate on
		}
		if w.Permits == 0 || w.Permits > st.Permits {
			return
		}
		if st.InUse+w.Permits <= st.Permits {
			s.t.Fatalf("work conservation: after %s, %d of %d permits are free and the first waiter not served (%s) asks for %d: "+
				"a free permit the next waiter fits must go to it in the same call", what, st.Permits-st.InUse, st.Permits, w.Label, w.Permits)
		}
		return
	}
}

// staleCall sends, as a client that kept an old belief would, a call about
// what it does not hold: a renewal, release or resize of a permit hold with
// a stale token or by a hold id that holds nothing, or a gate holder's
// request with the wrong gate hold id or token. Each must be answered as
// such (not held, gate lost), never with a Lua error, and change nothing.
func (s *semSpec) staleCall(t *rapid.T) {
	before := s.inspect()
	if before.Permits == 0 {
		t.Skip("the semaphore has no state in Redis")
	}
	keys := append([]string{s.base}, transport.QueueKeys(transport.GateBase(s.base))...)
	gate := s.gateHolder()
	kinds := []string{"renew", "release", "resize"}
	if gate != nil {
		kinds = append(kinds, "gate")
	}
	kind := rapid.SampledFrom(kinds).Draw(t, "stale call")
	// Whose: a hold id that holds nothing, with a live token; or a live
	// hold's hold id with a token it does not have.
	const ghost = "p9.ghost"
	owner, token := ghost, int64(1)
	if kind == "gate" {
		owner, token = gate.Owner, gate.Token
	} else if len(before.Holders) > 0 {
		h := rapid.SampledFrom(before.Holders).Draw(t, "hold")
		owner, token = h.Owner, h.Token
	}
	if rapid.Bool().Draw(t, "stale token (else a hold id that holds nothing)") {
		// A token never issued: tokens are Redis's time in ms times 1000
		// plus a count, and the fake clock moves in whole seconds, so one
		// a second on (+1000003) can be a real token, released since.
		token += 900_000_000_000_003
	} else {
		owner = ghost
	}
	whose := "the hold id " + owner
	if owner == ghost {
		whose = "a hold id that holds nothing"
	}
	ctx := context.Background()
	var reply any
	var err error
	switch kind {
	case "renew":
		reply, err = s.scripts.SemRenew.Run(ctx, s.probe, nil, keys[:1], owner, token, int64(lease/time.Millisecond), "0").Result()
	case "release":
		reply, err = s.scripts.SemRelease.Run(ctx, s.probe, nil, keys, owner, "p9.req", token, "PUBLISH", "fairlock:spec:stale").Result()
	case "resize":
		reply, err = s.scripts.SemResize.Run(ctx, s.probe, nil, keys, owner, token, 1, "PUBLISH", "fairlock:spec:stale").Result()
	case "gate":
		reply, err = s.scripts.SemAcquire.Run(ctx, s.probe, nil, keys, transport.SemAcquire{
			Owner: "p9.permit", N: 1, Lease: int64(lease / time.Millisecond), Permits: s.k, Mode: transport.SemGate,
			GateOwner: owner, GateToken: token, Publish: "PUBLISH", Channel: "fairlock:spec:stale"}.Args()...).Result()
	}
	what := fmt.Sprintf("a %s by %s, token %d", kind, whose, token)
	if err != nil {
		t.Fatalf("%s failed: %v; want it answered as not held", what, err)
	}
	switch kind {
	case "gate":
		r, derr := transport.DecodeSemAcquire(reply.([]any))
		if derr != nil || !r.GateLost {
			t.Fatalf("%s was answered %v (%+v, %v); want gate lost", what, reply, r, derr)
		}
	case "resize":
		if n, _ := reply.(int64); n != 0 {
			t.Fatalf("%s was answered %v; want 0 (not held)", what, reply)
		}
	default:
		if l, _ := reply.([]any); len(l) == 0 || l[0] != int64(0) {
			t.Fatalf("%s was answered %v; want {0} (not held)", what, reply)
		}
	}
	after := s.inspect()
	if fmt.Sprint(after.Holders) != fmt.Sprint(before.Holders) || fmt.Sprint(after.Queue) != fmt.Sprint(before.Queue) {
		t.Fatalf("%s changed the semaphore:\nbefore %+v\nafter  %+v", what, before, after)
	}
}

// gateHolder is the gate's holder as Redis has it: its hold id and token;
// nil when nobody holds the gate.
func (s *semSpec) gateHolder() *transport.InspectedHolder {
	v, err := s.scripts.FairInspect.Run(context.Background(), s.probe, nil, transport.QueueKeys(transport.GateBase(s.base))).Slice()
	if err != nil {
		s.t.Fatalf("inspecting the gate: %v", err)
	}
	in, err := transport.DecodeInspect(v)
	if err != nil {
		s.t.Fatalf("inspecting the gate: %v", err)
	}
	return in.Holder
}

// stillHook holds a client still while held: each command waits until
// release.
type stillHook struct{ mu sync.RWMutex }

func (h *stillHook) hold()    { h.mu.Lock() }
func (h *stillHook) release() { h.mu.Unlock() }

func (h *stillHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *stillHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.RLock()
		h.mu.RUnlock() //nolint:staticcheck // a gate, not a critical section
		return next(ctx, cmd)
	}
}

func (h *stillHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.RLock()
		h.mu.RUnlock() //nolint:staticcheck // a gate, not a critical section
		return next(ctx, cmds)
	}
}

// granted records a new permit hold of p, checking what must hold at the
// moment of a grant.
func (s *semSpec) granted(p *semProc, permit specHold) {
	t := s.t
	if p.phase != waiting || permit == nil {
		t.Fatalf("%s was granted permits in phase %v", p.label, p.phase)
	}
	// Arrival order: nobody live who joined earlier is still waiting. Its
	// grant may be on its way to this test (results are read in turn): it
	// gets a moment to arrive, and is recorded first.
	for _, o := range s.procs {
		if o == p || o.phase != waiting || !o.running || p.joined == 0 || o.joined > p.joined {
			continue
		}
		select {
		case r := <-o.result:
			o.running = false
			if r.err != nil {
				t.Fatalf("%s's Acquire failed: %v", o.label, r.err)
			}
			s.granted(o, r.p)
		case <-time.After(2 * time.Second):
			t.Fatalf("arrival order: %s (joined %d) got its permits before %s (joined %d)", p.label, p.joined, o.label, o.joined)
		}
	}
	// Permit accounting: the permits its holders believe in, this grant's
	// included, are never more than the semaphore has.
	sum := permit.N()
	for _, o := range s.procs {
		if o != p && o.phase == holding && !isClosed(o.permit.Lost()) {
			sum += o.n
		}
	}
	if sum > s.k && s.rw {
		t.Fatalf("no reader beside a writer: %s was granted %d with %d held (a writer holds %d)", p.label, permit.N(), sum-permit.N(), s.k)
	}
	if sum > s.k {
		t.Fatalf("permit accounting: %d permits held at once after %s's grant, of %d", sum, p.label, s.k)
	}
	if permit.N() != p.n {
		t.Fatalf("%s asked for %d permits and holds %d", p.label, p.n, permit.N())
	}
	if tok := permit.Token(); tok <= s.lastToken {
		t.Fatalf("fencing: token %d after %d", tok, s.lastToken)
	}
	s.lastToken = permit.Token()
	p.phase, p.permit, p.grantedAt, p.joined = holding, permit, s.clk.Now(), 0
}

// settle lets every background reaction finish, as the fair lock's does:
// every call that has not returned is asleep, and no message is on its way
// to one. Calls that returned are recorded as they come.
func (s *semSpec) settle() {
	redistest.Quiet(s.t, "the waiters settled", func() bool {
		running := 0
		for _, p := range s.procs {
			if !p.running {
				continue
			}
			select {
			case r := <-p.result:
				p.running = false
				if p.phase == crashed {
					continue
				}
				if r.err != nil && p.n > s.k && errors.Is(r.err, fairlock.ErrInvalidArgument) {
					p.phase = idle // it asked for more than the semaphore has
					continue
				}
				if r.err != nil {
					s.t.Fatalf("%s's Acquire failed: %v", p.label, r.err)
				}
				s.granted(p, r.p)
			default:
				running++
			}
		}
		return running == redistest.Asleep()
	})
}

func (s *semSpec) byLabel(label string) *semProc {
	for _, p := range s.procs {
		if p.label == label {
			return p
		}
	}
	return nil
}

func (s *semSpec) check(t *rapid.T) {
	st := s.inspect()
	now := s.clk.Now()
	// The gate is a fair lock: its messages and queue keep the fair lock's
	// rules, and every grant of permits to a waiter had its message.
	s.ledger.check(t, s.probe, now)
	// Every hold a live handle believes in is in Redis, with its permits;
	// every hold in Redis is one a handle was granted.
	tokens := map[int64]*semProc{}
	for _, p := range s.procs {
		if p.phase == holding {
			tokens[p.permit.Token()] = p
		}
	}
	for _, h := range st.Holders {
		p := s.byLabel(h.Label)
		if p == nil {
			t.Fatalf("a permit hold nobody was granted: %+v", h)
		}
		if p.phase == holding && h.Token == p.permit.Token() && h.Permits != p.n {
			t.Fatalf("%s holds %d permits, Redis says %d", p.label, p.n, h.Permits)
		}
		// A fixed lease ends when it was granted for: served or not,
		// claimed or not, it never runs past its grant plus the lease.
		if p.phase == holding && h.Token == p.permit.Token() && p.fixed > 0 &&
			now.Add(h.TTL).After(p.grantedAt.Add(p.fixed+time.Millisecond)) {
			t.Fatalf("%s's fixed lease of %v, granted %v ago, has %v left in Redis", p.label, p.fixed, now.Sub(p.grantedAt), h.TTL)
		}
		// Crashed holders' permits come back within their lease.
		if p.phase == crashed && !now.Before(p.crashedAt.Add(lease)) {
			t.Fatalf("%s crashed at %v holding permits, still held %v after its lease", p.label, p.crashedAt, now.Sub(p.crashedAt))
		}
	}
	for tok, p := range tokens {
		if isClosed(p.permit.Lost()) {
			if p.fixed == 0 {
				t.Fatalf("a renewed permit hold of %s (no crash) was lost", p.label)
			}
			continue
		}
		if !slices.ContainsFunc(st.Holders, func(h fair.PermitHolder) bool { return h.Token == tok }) {
			t.Fatalf("%s believes it holds token %d, Redis does not have it", p.label, tok)
		}
	}
	// Available is what the permits and the holds leave.
	if !s.rw {
		avail, err := s.admin.Available(context.Background())
		if err != nil {
			t.Fatalf("Available: %v", err)
		}
		if want := max(s.k-st.InUse, 0); avail != want {
			t.Fatalf("Available = %d with %d of %d in use", avail, st.InUse, s.k)
		}
	}
	// The queue is the live waiters in join order (a crashed waiter stays
	// until its wait timeout passed).
	var queued []string
	for _, w := range st.Queue {
		if p := s.byLabel(w.Label); p != nil && p.phase == waiting && !w.Expired {
			queued = append(queued, p.label)
		}
	}
	var want []string
	waiters := []*semProc{}
	for _, p := range s.procs {
		if p.phase == waiting && p.running {
			waiters = append(waiters, p)
		}
	}
	slices.SortFunc(waiters, func(a, b *semProc) int { return a.joined - b.joined })
	for _, p := range waiters {
		want = append(want, p.label)
	}
	if !slices.Equal(queued, want) {
		t.Fatalf("queue order %v, want the live waiters in join order %v", queued, want)
	}
	// Progress: when the first waiter's request fits, it is served at once
	// (a lease that ran out is noticed 1 ms later, and rounding adds one);
	// when it asks for more than the semaphore has, it is told so at once.
	// Dead waiters ahead of it, past their deadline, are the fair lock's
	// eviction bound: the next heartbeat removes them.
	first, deadAhead := "", false
	for _, w := range st.Queue {
		if !w.Expired {
			first = w.Label
			break
		}
		deadAhead = true
	}
	// Presence (fairlock.WithPresence): permits held by a process that kept
	// a presence and crashed are the first waiter's once they have been
	// gone for the grace, counted from the first look after the later of
	// the crash and the waiter coming first: within the grace and two polls
	// (and a step) of that.
	gone := 0
	for _, h := range st.Holders {
		if o := s.byLabel(h.Label); o != nil && o.phase == crashed && o.presence != nil {
			gone += h.Permits
		}
	}
	if p := s.byLabel(first); p != nil && p.phase == waiting && (st.InUse-gone+p.n <= s.k || p.n > s.k) {
		if s.servable.IsZero() || s.servableBy != first {
			s.servable, s.servableBy, s.allowance = now, first, leaseEndSlack
			if st.InUse+p.n > s.k && p.n <= s.k {
				s.allowance = core.PresenceGrace + 2*core.PresencePoll + maxStep
			}
			if deadAhead {
				s.allowance += heartbeat
			}
		} else if now.Sub(s.servable) > s.allowance {
			t.Fatalf("progress: %s waits for %d permits since %v with %d of %d in use",
				first, p.n, now.Sub(s.servable), st.InUse, s.k)
		}
	} else {
		s.servable = time.Time{}
	}
}

// finish ends every hold and wait, then lets time pass: no key may be left.
func (s *semSpec) finish() {
	for _, p := range s.procs {
		// A crashed process stays cut off: its holds must end by themselves.
		if p.running {
			p.cancel()
			r := <-p.result
			p.running = false
			if r.err == nil && r.p != nil {
				_ = r.p.Release(context.Background())
			}
		}
		if p.phase == holding {
			_ = p.permit.Release(context.Background())
		}
	}
	noKeysAfterAMinute(s.t, s.clk, s.mr)
}

func (s *semSpec) close() {
	for _, p := range s.procs {
		if p.running {
			p.cancel()
			<-p.result
		}
		_ = p.client.Close()
	}
	s.ledger.close()
	_ = s.probe.Close()
	s.mr.Close()
	redistest.CloseOwners() // or every later check's SyncHubs looks at this one's too
}

// semaphoreSpec is the property: any sequence of actions keeps every
// guarantee of the semaphore.
func semaphoreSpec(scripts *lua.Scripts) func(*rapid.T) { return semSpecOf(scripts, false, 0) }

// rwMutexSpec is the RW lock's property.
func rwMutexSpec(scripts *lua.Scripts) func(*rapid.T) { return semSpecOf(scripts, true, 0) }

// semaphorePresenceSpec is semaphoreSpec with two of the five processes
// keeping a presence (fairlock.WithPresence), and the blip action.
func semaphorePresenceSpec(scripts *lua.Scripts) func(*rapid.T) { return semSpecOf(scripts, false, 2) }

// rwMutexPresenceSpec is rwMutexSpec with presence, as
// semaphorePresenceSpec.
func rwMutexPresenceSpec(scripts *lua.Scripts) func(*rapid.T) { return semSpecOf(scripts, true, 2) }

// semSpecOf is the semaphore's (rw: the RW lock's) property; present of
// its processes keep a presence.
func semSpecOf(scripts *lua.Scripts, rw bool, present int) func(*rapid.T) {
	return func(t *rapid.T) {
		s := newSemSpec(t, scripts, rw, present)
		defer s.close()
		actions := map[string]func(*rapid.T){
			"join":              s.join,
			"tryWithoutWaiting": s.tryWithoutWaiting,
			"release":           s.release,
			"giveUp":            s.giveUp,
			"crash":             s.crash,
			"setPermits":        s.setPermits,
			"downgrade":         s.downgrade,
			"staleCall":         s.staleCall,
			"advance":           s.advance,
			"wait":              s.wait,
			"":                  s.check,
		}
		if present > 0 {
			actions["blip"] = s.blip
		}
		t.Repeat(actions)
		s.finish()
	}
}

// semaphoreChecks is how many checks the semaphore's specification runs
// unless told otherwise (a quarter under -race, checkWith): each takes
// about as long as 3 of the fair lock's (its waits pass through two
// queues). The mutation test gives it up to 1,000 per mutation.
const semaphoreChecks = 300

func TestSemaphoreSpecification(t *testing.T) {
	checkWith(t, semaphoreChecks, semaphoreSpec(lua.Default()))
}

func TestRWMutexSpecification(t *testing.T) {
	checkWith(t, semaphoreChecks, rwMutexSpec(lua.Default()))
}

// The semaphore's and the RW lock's specifications with two processes that
// keep a presence (fairlock.WithPresence): a crashed one's permits go to the
// first waiter within the grace and two polls, and a blip ends a live one's
// holds, which it gives back. 60 checks each, without -race
// (checkWithoutRace: the fair lock's specification with presence drives the
// same Go paths under it): while such a process holds and another waits,
// the gate's holder looks every 50 ms of the fake clock, which makes each
// check several times as long; everything else they check, the plain
// machines check too.
func TestSemaphoreSpecificationWithPresence(t *testing.T) {
	checkWithoutRace(t, presenceChecks, semaphorePresenceSpec(lua.Default()))
}

func TestRWMutexSpecificationWithPresence(t *testing.T) {
	checkWithoutRace(t, presenceChecks, rwMutexPresenceSpec(lua.Default()))
}

// presenceChecks is how many checks the semaphore's and the RW lock's
// specifications with presence run unless told otherwise.
const presenceChecks = 60
