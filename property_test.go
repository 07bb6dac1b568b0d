package fairlock_test

// The executable specification of the fair lock.
//
// A rapid state machine drives real fair.Mutex handles, each on a client of
// its own (a "process"), against miniredis, with the fake clock moving
// miniredis's TIME and the library's timers together. Its actions are what
// users and failures do: join the queue, try without waiting, re-enter,
// unlock, give up, crash (fall silent for good), stall (a waiter cut off from
// Redis for a while, then back), replay a release late (a go-redis retry
// that comes after others used the lock), and let time pass in steps no longer than a
// quarter of a heartbeat. After every step it checks what a user can
// observe, one property per guarantee of package fair.
//
//	go test -run TestFairLockSpecification .                      # 1,000 checks (CI)
//	RAPID_CHECKS=100000 go test -run TestFairLockSpecification -timeout 0 .
//
// TestSpecificationCatchesBrokenScripts runs the same machine against
// deliberately broken scripts and expects it to fail for each.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"pgregory.net/rapid"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// The fair lock's specification runs 1,000 checks unless told
	// otherwise (the semaphore's, semaphoreChecks).
	checksGiven = os.Getenv("RAPID_CHECKS") != "" || flagSet("rapid.checks")
	if !checksGiven {
		_ = flag.Set("rapid.checks", "1000")
	}
	redistest.Exit(m)
}

// checksGiven: the number of checks was given (RAPID_CHECKS or
// -rapid.checks), for every specification.
var checksGiven bool

func flagSet(name string) (set bool) {
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

const (
	waitTimeout = 3 * time.Second
	heartbeat   = waitTimeout / 3
	lease       = 5 * time.Second
	maxStep     = heartbeat / 4
	processes   = 5
	lockName    = "spec"
	// leaseEndSlack is how long after a hold's end (Redis's clock) the head
	// may still wait: its timer fires 1 ms after the expiry, and one more
	// for rounding. A real network adds one round trip.
	leaseEndSlack = 2 * time.Millisecond
)

type phase int

const (
	idle phase = iota
	waiting
	holding
	crashed
)

// proc is one handle on a client of its own.
type proc struct {
	label   string
	client  *redis.Client
	m       *fair.Mutex
	phase   phase
	count   int // holds, as the model counts them
	joined  int // join order among waiters
	entry   string
	cancel  context.CancelFunc
	result  chan error    // the running Lock call's outcome
	running bool          // a Lock call's goroutine has not returned
	fixed   time.Duration // the lease its Lock asked for; 0: kept by the watchdog

	crashedAt    time.Time
	crashedPhase phase

	cut        *redistest.Partition // cuts the process off from Redis
	releases   *releaseLog          // its last final release, to replay
	stalled    bool                 // cut off now
	stalledAt  time.Time
	wasStalled bool     // stalled since its Lock call began: it may lose its place once
	orphans    []orphan // entries left behind by calls that failed while cut off
	token      int64    // the token of its latest hold
	lostToken  int64    // the token of its latest hold that it lost
}

// orphan is a queue entry whose waiter's call failed while it was cut off
// from Redis: it could not leave, so the entry must die by its deadline.
type orphan struct {
	entry string
	since time.Time // the waiter's last contact with Redis was before this
}

// spec is the model: only what a user can observe.
type spec struct {
	t         *rapid.T
	mr        *miniredis.Miniredis
	clk       *clock.Fake
	probe     *redis.Client
	procs     []*proc
	joins     int
	lastToken int64
	freeSince time.Time // the lock was free while a live waiter waited, since

	// The hold seen at the last check, and the waiter then at the front of
	// the queue: when that hold ends, this waiter must take over at once.
	holdEnds time.Time
	headThen string

	synced string // what had been published when the hubs were last synced

	finalReleases atomic.Int64 // releases that ended a hold, by any process
}

func newSpec(t *rapid.T, scripts *lua.Scripts) *spec {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		t.Fatalf("miniredis: %v", err)
	}
	mr.ClockTTL(true)
	s := &spec{t: t, mr: mr, clk: clock.NewFake(redistest.Epoch, mr.SetTime)}
	s.probe = redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	for i := 0; i < processes; i++ {
		c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
		cut := &redistest.Partition{}
		c.AddHook(cut)
		rl := &releaseLog{script: scripts.FairRelease, seq: &s.finalReleases, clk: s.clk}
		c.AddHook(rl)
		m, err := fair.New(c, lockName, core.WithClock(s.clk), core.WithScripts(scripts),
			fair.WithLabel(fmt.Sprintf("p%d", i)), fair.WithWaitTimeout(waitTimeout), fair.WithLease(lease))
		if err != nil {
			t.Fatal(err)
		}
		s.procs = append(s.procs, &proc{label: fmt.Sprintf("p%d", i), client: c, m: m, cut: cut, releases: rl})
	}
	return s
}

func (s *spec) inspect() fair.State {
	st, err := fair.Inspect(context.Background(), s.probe, lockName)
	if err != nil {
		s.t.Fatalf("Inspect: %v", err)
	}
	return st
}

func (s *spec) pick(ph phase) *proc {
	var c []*proc
	for _, p := range s.procs {
		if p.phase == ph && !p.stalled {
			c = append(c, p)
		}
	}
	if len(c) == 0 {
		s.t.Skip("no such handle")
	}
	return rapid.SampledFrom(c).Draw(s.t, "handle")
}

// Actions.

func (s *spec) join(t *rapid.T) {
	p := s.pick(idle)
	// Half the joins ask for a fixed lease, as TryLock(ctx, wait, lease)
	// does: those holds end by themselves, with no Unlock, often within one
	// wait action. Some are shorter than a heartbeat interval.
	fixed := time.Duration(0)
	if rapid.Bool().Draw(t, "fixed lease") {
		fixed = time.Duration(rapid.IntRange(500, 2500).Draw(t, "lease ms")) * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.joins++
	p.phase, p.joined, p.cancel, p.entry, p.wasStalled, p.fixed = waiting, s.joins, cancel, "", false, fixed
	p.result, p.running = make(chan error, 1), true
	go func() {
		ok, err := p.m.TryLock(ctx, time.Hour, fixed)
		if err == nil && !ok {
			err = errors.New("wait elapsed")
		}
		p.result <- err
	}()
	s.settle()
}

func (s *spec) tryWithoutWaiting(t *rapid.T) {
	p := s.pick(idle)
	before := s.inspect()
	ok, err := p.m.TryLock(context.Background(), 0, 0)
	if err != nil {
		t.Fatalf("%s TryLock(0): %v", p.label, err)
	}
	// The caller's own entries, left behind by calls that failed while it was
	// cut off, are removed by this call before it tries: they do not count.
	live := slices.ContainsFunc(before.Queue, func(w fair.Waiter) bool { return !w.Expired && !p.isOrphan(w.Entry) })
	// Likewise a hand-off to such an entry is given back first, and a hold
	// the caller lost (its client gave it up a margin before Redis does) is
	// ended first.
	held := before.Holder != nil && !(before.Holder.Pending && p.isOrphan(before.Holder.Entry)) &&
		!(p.lostToken != 0 && before.Holder.Token == p.lostToken)
	// Guarantee 3, no barging: only a free lock with no live waiter is taken.
	if ok && (held || live) {
		t.Fatalf("no barging: %s took the lock with TryLock(0) while holder=%v and queue=%+v", p.label, before.Holder, before.Queue)
	}
	if !ok && !held && !live {
		t.Fatalf("TryLock(0) by %s failed on a free lock with no live waiter", p.label)
	}
	if after := s.inspect(); len(after.Queue) > len(before.Queue) {
		t.Fatalf("no barging: TryLock(0) by %s joined the queue", p.label)
	}
	if ok {
		s.acquired(p)
	}
	// Giving back a grant made to an abandoned entry hands the lock on.
	s.settle()
}

func (s *spec) reenter(t *rapid.T) {
	p := s.pick(holding)
	if p.fixed != 0 {
		t.Skip("a hold with a fixed lease is not re-entered here: a re-entry may lengthen it")
	}
	ok, err := p.m.TryLock(context.Background(), 0, 0)
	if !ok || err != nil {
		t.Fatalf("re-entry by holder %s = %v, %v", p.label, ok, err)
	}
	p.count++
}

func (s *spec) unlock(t *rapid.T) {
	p := s.pick(holding)
	if err := p.m.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock by holder %s: %v", p.label, err)
	}
	p.count--
	if p.count == 0 {
		p.phase = idle
	}
	s.settle()
}

func (s *spec) giveUp(t *rapid.T) {
	p := s.pick(waiting)
	entry := p.entry
	p.cancel()
	err := <-p.result
	p.running = false
	if err == nil {
		// Granted just before giving up: it holds the lock.
		s.acquired(p)
		return
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("%s gave up with %v, want context.Canceled", p.label, err)
	}
	p.phase = idle
	// Guarantee 5: once the call has returned, the entry is gone.
	for _, w := range s.inspect().Queue {
		if (w.Label == p.label && !p.isOrphan(w.Entry)) || (entry != "" && w.Entry == entry) {
			t.Fatalf("giving up: %s's entry is still listed after TryLock returned", p.label)
		}
	}
	s.settle()
}

func (s *spec) crash(t *rapid.T) {
	var c []*proc
	for _, p := range s.procs {
		if p.phase != crashed {
			c = append(c, p)
		}
	}
	if len(c) == 0 {
		t.Skip("everyone crashed")
	}
	p := rapid.SampledFrom(c).Draw(t, "handle")
	p.crashedPhase, p.crashedAt, p.phase = p.phase, s.clk.Now(), crashed
	_ = p.client.Close() // it falls silent: no heartbeat, renewal or unlock gets through
	s.settle()
}

// stall cuts a waiter off from Redis: its heartbeats fail, so once its
// deadline passes it is dead to the queue.
func (s *spec) stall(t *rapid.T) {
	p := s.pick(waiting)
	p.cut.On.Store(true)
	p.stalled, p.stalledAt, p.wasStalled = true, s.clk.Now(), true
	s.settle()
}

// stallFor cuts a waiter off for up to two wait timeouts, checking after
// every step, then reconnects it.
func (s *spec) stallFor(t *rapid.T) {
	p := s.pick(waiting)
	p.cut.On.Store(true)
	p.stalled, p.stalledAt, p.wasStalled = true, s.clk.Now(), true
	s.settle()
	n := rapid.IntRange(1, int(2*waitTimeout/maxStep)).Draw(t, "steps")
	for i := 0; i < n; i++ {
		s.clk.Advance(maxStep)
		s.settle()
		s.check(t)
	}
	if p.stalled {
		p.cut.On.Store(false)
		p.stalled = false
		s.settle()
	}
}

// resume reconnects a stalled process.
func (s *spec) resume(t *rapid.T) {
	var c []*proc
	for _, p := range s.procs {
		if p.stalled && p.phase != crashed {
			c = append(c, p)
		}
	}
	if len(c) == 0 {
		t.Skip("nobody is stalled")
	}
	p := rapid.SampledFrom(c).Draw(t, "handle")
	p.cut.On.Store(false)
	p.stalled = false
	s.settle()
}

func (s *spec) advance(t *rapid.T) {
	d := time.Duration(rapid.IntRange(1, int(maxStep/time.Millisecond)).Draw(t, "ms")) * time.Millisecond
	s.clk.Advance(d)
	s.settle()
}

// wait lets up to two wait timeouts pass, in full steps, checking after each.
func (s *spec) wait(t *rapid.T) {
	n := rapid.IntRange(1, int(2*waitTimeout/maxStep)).Draw(t, "steps")
	for i := 0; i < n; i++ {
		s.clk.Advance(maxStep)
		s.settle()
		s.check(t)
	}
}

// lateRetry replays a process's last final release, as go-redis does when
// the reply was lost, but late: other handles may have taken and released
// the lock since, overwriting the stored answer. It must change nothing
// (never a second release or hand-off), and answer "released" ({1}) while
// the hold's token is among the last four released; after that "not held"
// ({0}) is allowed: a false ErrLockLost, not a safety matter.
func (s *spec) lateRetry(t *rapid.T) {
	var c []*proc
	for _, p := range s.procs {
		if args, _, _ := p.releases.last(); args != nil {
			c = append(c, p)
		}
	}
	if len(c) == 0 {
		t.Skip("no final release yet")
	}
	p := rapid.SampledFrom(c).Draw(t, "handle")
	args, at, when := p.releases.last()
	before := s.inspect()
	v, err := s.probe.Do(context.Background(), args...).Slice()
	if err != nil {
		t.Fatalf("replaying %s's release: %v", p.label, err)
	}
	after := s.inspect()
	if !sameState(before, after) {
		t.Fatalf("a late retry of %s's release changed the lock: %+v / %+v, then %+v / %+v",
			p.label, before.Holder, before.Queue, after.Holder, after.Queue)
	}
	// The memory lives in the hold's key, which outlives the last hold and
	// deadline by 30 s: a real retry comes within milliseconds.
	since, age := s.finalReleases.Load()-at, s.clk.Now().Sub(when)
	if since <= 3 && age < 30*time.Second && (len(v) != 1 || v[0] != int64(1)) {
		t.Fatalf("a retry of %s's release, %v and %d later final releases after it, answered %v, want {1}", p.label, age, since, v)
	}
	if len(v) != 1 || (v[0] != int64(0) && v[0] != int64(1)) {
		t.Fatalf("a late retry of %s's release answered %v, want {1} or {0}", p.label, v)
	}
	s.settle()
}

// sameState compares what Inspect shows of two states.
func sameState(a, b fair.State) bool {
	if (a.Holder == nil) != (b.Holder == nil) {
		return false
	}
	if h, g := a.Holder, b.Holder; h != nil && (h.Owner != g.Owner || h.Token != g.Token || h.Count != g.Count ||
		h.Pending != g.Pending || h.Entry != g.Entry || h.TTL != g.TTL) {
		return false
	}
	return slices.EqualFunc(a.Queue, b.Queue, func(x, y fair.Waiter) bool {
		return x.Entry == y.Entry && x.Deadline == y.Deadline && x.Expired == y.Expired
	})
}

// releaseLog is a go-redis hook that keeps a process's last release that
// ended its hold (answered {1}), to replay it as a late retry, and counts
// every such release of every process (undoing ones too: they are kept in
// the same memory of released tokens).
type releaseLog struct {
	script *lua.Script
	seq    *atomic.Int64
	clk    clock.Clock

	mu   sync.Mutex
	args []any
	at   int64     // seq after it
	when time.Time // when it ran
}

func (r *releaseLog) last() ([]any, int64, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.args, r.at, r.when
}

func (r *releaseLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *releaseLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if err != nil || !r.script.Calls(args) {
			return err
		}
		if v, ok := cmd.(*redis.Cmd); ok {
			if res, _ := v.Slice(); len(res) == 1 && res[0] == int64(1) {
				n := r.seq.Add(1)
				// owner, request, token, publish, channel: no request to undo.
				if len(args) == 3+3+5 {
					r.mu.Lock()
					r.args, r.at, r.when = slices.Clone(args), n, r.clk.Now()
					r.mu.Unlock()
				}
			}
		}
		return err
	}
}

func (r *releaseLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// acquired records a fresh acquisition by p.
func (s *spec) acquired(p *proc) {
	// Guarantee 2, FIFO: nobody alive who joined earlier is still waiting.
	for _, o := range s.procs {
		if o.phase == waiting && !o.wasStalled && o != p && p.phase == waiting && o.joined < p.joined {
			s.t.Fatalf("FIFO: %s (joined #%d) got the lock while %s (joined #%d) still waits", p.label, p.joined, o.label, o.joined)
		}
	}
	tok := p.m.Token()
	if tok <= s.lastToken {
		s.t.Fatalf("fencing: %s got token %d, not above the previous %d", p.label, tok, s.lastToken)
	}
	s.lastToken = tok
	p.phase, p.count, p.token = holding, 1, tok
}

// settle lets every background reaction finish: each live waiter has either
// returned or is asleep, no message is on its way to one (the hubs have read
// all Redis sent, and every waiter took what was delivered to it), and none
// has been handed the lock without knowing.
func (s *spec) settle() {
	deadline := time.Now().Add(10 * time.Second)
	for spins := 0; ; spins++ {
		running := 0
		for _, p := range s.procs {
			if !p.running {
				continue
			}
			select {
			case err := <-p.result:
				p.running = false
				if p.phase == crashed {
					continue // a crashed process's call fails; nobody sees it
				}
				if err != nil && (p.stalled || (p.wasStalled && errors.Is(err, redistest.ErrPartitioned))) {
					// Cut off, its call failed and could not leave the queue
					// (seen here possibly only after it was reconnected).
					p.orphans = append(p.orphans, orphan{entry: p.entry, since: p.stalledAt})
					p.phase = idle
					continue
				}
				if err != nil {
					s.t.Fatalf("%s's Lock failed: %v", p.label, err)
				}
				s.acquired(p)
			default:
				running++
			}
		}
		if running == core.Asleep() && core.Unread() == 0 {
			st := s.inspect()
			if !s.grantPending(st) {
				// Every message a script publishes comes with a new
				// holder token or a new front of the queue list: if
				// neither changed since the last sync, none is in flight.
				if pub := published(st); pub != s.synced {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					core.SyncHubs(ctx)
					cancel()
					s.synced = pub
					continue // look again: a waiter may have woken
				}
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("waiters did not settle: %d running, %d asleep", running, core.Asleep())
		}
		if spins < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// published names what Redis has published so far: the holder's token and
// the front of the queue list change with every message.
func published(st fair.State) string {
	var token int64
	if st.Holder != nil {
		token = st.Holder.Token
	}
	front := ""
	if len(st.Queue) > 0 {
		front = st.Queue[0].Entry
	}
	return fmt.Sprint(token, " ", front)
}

// grantPending reports a live waiter that Redis made the holder but whose
// Lock has not returned yet (its hand-off message is on the way).
func (s *spec) grantPending(st fair.State) bool {
	h := st.Holder
	if h == nil {
		return false
	}
	for _, p := range s.procs {
		if p.label == h.Label && p.phase == waiting {
			return true
		}
	}
	return false
}

// check runs after every step: each property is named after its guarantee.
func (s *spec) check(t *rapid.T) {
	now := s.clk.Now()

	// A hold is lost only by a process that was cut off from Redis, or when
	// its fixed lease ran out; its Unlock then says so.
	for _, p := range s.procs {
		if p.phase != holding {
			continue
		}
		select {
		case <-p.m.Lost():
		default:
			continue
		}
		if !p.wasStalled && p.fixed == 0 {
			t.Fatalf("%s lost a hold that its watchdog kept alive", p.label)
		}
		if p.stalled {
			continue // it cannot even tell Redis yet
		}
		if err := p.m.Unlock(context.Background()); !errors.Is(err, fair.ErrLockLost) {
			t.Fatalf("Unlock of %s's lost hold = %v, want ErrLockLost", p.label, err)
		}
		p.phase, p.count, p.lostToken = idle, 0, p.token
	}
	st := s.inspect()

	// Guarantee 1, mutual exclusion: at most one handle believes it holds
	// the lock, and Redis agrees with it, hold count included.
	var holders []*proc
	for _, p := range s.procs {
		if p.phase == holding && !isClosed(p.m.Lost()) {
			holders = append(holders, p)
		}
	}
	if len(holders) > 1 {
		t.Fatalf("mutual exclusion: %s and %s both hold the lock", holders[0].label, holders[1].label)
	}
	if len(holders) == 1 {
		p := holders[0]
		if st.Holder == nil || st.Holder.Label != p.label || st.Holder.Count != p.count {
			t.Fatalf("mutual exclusion: %s holds %d times, Redis says %+v", p.label, p.count, st.Holder)
		}
	}
	if st.Holder != nil && st.Holder.Token < s.lastToken {
		t.Fatalf("fencing: the holder's token %d is below one already issued, %d", st.Holder.Token, s.lastToken)
	}

	// Guarantee 2, FIFO: live waiters are queued in join order, each at the
	// place it first got. Guarantee 4, second half: a waiter that was cut
	// off for longer than its wait timeout may have lost its place; it then
	// re-joins at the tail.
	var live []*proc
	for _, p := range s.procs {
		if p.phase == waiting && !p.stalled {
			live = append(live, p)
		}
	}
	listed := map[*proc]bool{}
	var queued []string
	for _, w := range st.Queue {
		for _, p := range live {
			if p.label != w.Label || w.Expired || p.isOrphan(w.Entry) {
				continue
			}
			listed[p] = true
			queued = append(queued, p.label)
			switch {
			case p.entry == "":
				p.entry = w.Entry
			case p.entry != w.Entry && !p.wasStalled:
				t.Fatalf("FIFO: live waiter %s lost its place (entry %s became %s)", p.label, p.entry, w.Entry)
			case p.entry != w.Entry:
				// Evicted during its stall, it re-joined: from now on it
				// counts from the tail.
				s.joins++
				p.joined, p.entry, p.wasStalled = s.joins, w.Entry, false
			}
		}
	}
	slices.SortFunc(live, func(a, b *proc) int { return a.joined - b.joined })
	var want []string
	for _, p := range live {
		if p.wasStalled && !listed[p] {
			continue // evicted during its stall; its re-join is on the way
		}
		want = append(want, p.label)
	}
	if !slices.Equal(queued, want) {
		t.Fatalf("FIFO: live waiters queued as %v, want join order %v (queue %+v)", queued, want, st.Queue)
	}

	// Guarantee 4, eviction: a waiter cut off from Redis (stalled, or
	// crashed) stops counting by its deadline, at most one wait timeout
	// after it fell silent, and a grant handed to it ends by then too; a
	// crashed holder's lease runs out. Guarantee 5: an entry a waiter could
	// not remove when it gave up is gone within one wait timeout.
	for _, p := range s.procs {
		if p.stalled && p.phase == waiting && now.Sub(p.stalledAt) >= waitTimeout {
			for _, w := range st.Queue {
				if w.Entry == p.entry && !w.Expired {
					t.Fatalf("eviction: %s, cut off for %v, is still a live waiter", p.label, now.Sub(p.stalledAt))
				}
			}
			if st.Holder != nil && st.Holder.Label == p.label {
				t.Fatalf("eviction: %s, cut off for %v, still holds a grant", p.label, now.Sub(p.stalledAt))
			}
		}
		kept := p.orphans[:0]
		for _, o := range p.orphans {
			if now.Sub(o.since) < waitTimeout {
				kept = append(kept, o)
				continue
			}
			for _, w := range st.Queue {
				if w.Entry == o.entry && !w.Expired {
					t.Fatalf("giving up: %s's entry, left behind while cut off, is still live %v later", p.label, now.Sub(o.since))
				}
			}
		}
		p.orphans = kept
	}
	for _, p := range s.procs {
		if p.phase != crashed {
			continue
		}
		silent := now.Sub(p.crashedAt)
		if p.crashedPhase == waiting && silent >= waitTimeout {
			for _, w := range st.Queue {
				if w.Label == p.label && !w.Expired {
					t.Fatalf("eviction: %s, silent for %v, is still a live waiter", p.label, silent)
				}
			}
			if st.Holder != nil && st.Holder.Label == p.label {
				t.Fatalf("eviction: %s, silent for %v, still holds a grant", p.label, silent)
			}
		}
		if p.crashedPhase == holding && silent >= lease && st.Holder != nil && st.Holder.Label == p.label {
			t.Fatalf("lease: %s crashed %v ago and still holds the lock", p.label, silent)
		}
	}

	// Guarantee 6, hand-off: a free lock never keeps a live waiter waiting
	// longer than one heartbeat (the fallback that covers lost messages).
	if st.Holder == nil && len(live) > 0 {
		if s.freeSince.IsZero() {
			s.freeSince = now
		} else if d := now.Sub(s.freeSince); d > heartbeat+maxStep {
			t.Fatalf("hand-off: the lock has been free for %v while %s waits", d, live[0].label)
		}
	} else {
		s.freeSince = time.Time{}
	}

	// Guarantee 6, progress after a lease ends: when a hold ends because its
	// lease ran out (a fixed lease, a holder that crashed or was cut off, a
	// grant never claimed), no message says so; the live waiter that was at the front of
	// the queue while it was held must hold the lock within leaseEndSlack of
	// the hold's end, not a heartbeat later.
	if st.Holder != nil {
		s.holdEnds, s.headThen = now.Add(st.Holder.TTL), ""
		if len(st.Queue) > 0 && !st.Queue[0].Expired {
			s.headThen = st.Queue[0].Entry
		}
	} else if s.headThen != "" && now.Sub(s.holdEnds) > leaseEndSlack &&
		len(st.Queue) > 0 && st.Queue[0].Entry == s.headThen {
		for _, p := range live {
			if p.entry == s.headThen && !p.wasStalled {
				t.Fatalf("progress after a lease ends: the hold ended %v ago and %s, at the head of the queue since before, still waits",
					now.Sub(s.holdEnds), p.label)
			}
		}
	}

	// Guarantee 8, nothing leaks: every key carries a TTL.
	for _, k := range s.mr.Keys() {
		if s.mr.TTL(k) <= 0 {
			t.Fatalf("leak: key %s has no TTL", k)
		}
	}
}

func (p *proc) isOrphan(entry string) bool {
	return slices.ContainsFunc(p.orphans, func(o orphan) bool { return o.entry == entry })
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// finish ends every hold and wait, then lets time pass: no key may be left.
func (s *spec) finish() {
	for _, p := range s.procs {
		p.cut.On.Store(false)
		p.stalled = false
	}
	for _, p := range s.procs {
		if p.running {
			p.cancel()
			err := <-p.result
			p.running = false
			if err == nil && p.phase == waiting {
				// Granted just before giving up, as in giveUp: it holds the
				// lock, and is unlocked below.
				p.phase, p.count = holding, 1
			}
		}
	}
	for _, p := range s.procs {
		if p.phase == holding {
			for p.m.Unlock(context.Background()) == nil {
			}
		}
	}
	noKeysAfterAMinute(s.t, s.clk, s.mr)
}

// noKeysAfterAMinute lets a minute pass once every hold and wait has ended:
// every key must have expired by then.
func noKeysAfterAMinute(t *rapid.T, clk *clock.Fake, mr *miniredis.Miniredis) {
	for i := 0; i < 60; i++ {
		clk.Advance(time.Second)
	}
	if keys := mr.Keys(); len(keys) != 0 {
		t.Fatalf("leak: keys left a minute after every client was gone: %v", keys)
	}
}

func (s *spec) close() {
	for _, p := range s.procs {
		if p.running {
			p.cancel()
			<-p.result
		}
		_ = p.client.Close()
	}
	_ = s.probe.Close()
	s.mr.Close()
}

// fairLockSpec is the property: any sequence of actions keeps every guarantee.
func fairLockSpec(scripts *lua.Scripts) func(*rapid.T) {
	return func(t *rapid.T) {
		s := newSpec(t, scripts)
		defer s.close()
		s.t = t
		t.Repeat(map[string]func(*rapid.T){
			"join":              s.join,
			"tryWithoutWaiting": s.tryWithoutWaiting,
			"reenter":           s.reenter,
			"unlock":            s.unlock,
			"giveUp":            s.giveUp,
			"crash":             s.crash,
			"stall":             s.stall,
			"stallFor":          s.stallFor,
			"resume":            s.resume,
			"advance":           s.advance,
			"wait":              s.wait,
			"lateRetry":         s.lateRetry,
			"":                  s.check,
		})
		s.finish()
	}
}

func TestFairLockSpecification(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	rapid.Check(t, fairLockSpec(lua.Default))
}
