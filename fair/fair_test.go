package fair_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

func TestWaitersAreServedInJoinOrder(t *testing.T) {
	e := newEnv(t)
	a, b, c, d := e.named("a"), e.named("b"), e.named("c"), e.named("d")
	mustLock(t, a)
	gotB := e.enqueue(b, 1)
	gotC := e.enqueue(c, 2)
	gotD := e.enqueue(d, 3)
	if q := e.queued(); !slices.Equal(q, []string{"b", "c", "d"}) {
		t.Fatalf("queue = %v, want [b c d]", q)
	}
	// A long hold does not cost anyone their place.
	for i := 0; i < 40; i++ {
		e.clk.Advance(time.Second)
	}
	mustUnlock(t, a)
	if r := await(t, gotB); !r.ok {
		t.Fatalf("b: %v, %v", r.ok, r.err)
	}
	notYet(t, gotC, "c before b unlocked")
	if h := e.holder(); h != "b" {
		t.Fatalf("holder after a's unlock = %q, want b", h)
	}
	mustUnlock(t, b)
	if r := await(t, gotC); !r.ok {
		t.Fatalf("c: %v, %v", r.ok, r.err)
	}
	notYet(t, gotD, "d before c unlocked")
	mustUnlock(t, c)
	if r := await(t, gotD); !r.ok {
		t.Fatalf("d: %v, %v", r.ok, r.err)
	}
	mustUnlock(t, d)
}

func TestTryLockWithoutWaitNeverBargesOrQueues(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, b, c := e.named("a"), e.named("b"), e.named("c")
	mustLock(t, a)
	gotB := e.enqueue(b, 1)
	if ok, err := c.TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("TryLock(0) while held = %v, %v", ok, err)
	}
	if q := e.queued(); !slices.Equal(q, []string{"b"}) {
		t.Fatalf("TryLock(0) joined the queue: %v", q)
	}
	if ok, _ := a.TryLock(a.HoldContext(), 0, 0); !ok {
		t.Fatal("the holder's re-entry by TryLock(0) failed")
	}
	mustUnlock(t, a)
	mustUnlock(t, a)
	// The lock went to b, not to whoever asks next.
	if ok, _ := c.TryLock(ctx, 0, 0); ok {
		t.Fatal("TryLock(0) took the lock ahead of a queued waiter")
	}
	if r := await(t, gotB); !r.ok {
		t.Fatal("b did not get the lock")
	}
	mustUnlock(t, b)
	if ok, _ := c.TryLock(ctx, 0, 0); !ok {
		t.Fatal("TryLock(0) on a free lock with an empty queue failed")
	}
	mustUnlock(t, c)
}

func TestGivingUpLeavesTheQueueAtOnce(t *testing.T) {
	e := newEnv(t)
	a, b, c := e.named("a"), e.named("b"), e.named("c")
	mustLock(t, a)
	gotB := tryLockAsync(b, context.Background(), 5*time.Second, 0)
	e.settle(1)
	ctx, cancel := context.WithCancel(context.Background())
	gotC := e.enqueueCtx(ctx, c, 2)

	cancel()
	if r := await(t, gotC); r.ok || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("c after cancel: %v, %v", r.ok, r.err)
	}
	if q := e.queued(); !slices.Equal(q, []string{"b"}) {
		t.Fatalf("queue right after c gave up = %v, want [b]", q)
	}
	e.clk.Advance(5 * time.Second)
	if r := await(t, gotB); r.ok || r.err != nil {
		t.Fatalf("b after its wait = %v, %v; want false, nil", r.ok, r.err)
	}
	if q := e.inspect().Queue; len(q) != 0 {
		t.Fatalf("Inspect still lists waiters that gave up: %+v", q)
	}
	mustUnlock(t, a)
}

func TestGivingUpHandsAFreeLockToTheNext(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, b, c := e.named("a"), e.named("b"), e.named("c")
	mustLock(t, a)
	gotB := e.enqueue(b, 1)
	gotC := e.enqueue(c, 2)
	// a's release hands the lock to b, but suppose b's grant message is not
	// yet read when b gives up: simulate with a release that publishes
	// nowhere, then cancel b's wait.
	token := a.Token()
	if err := lua.Default().FairRelease.Run(ctx, e.client, nil, keysFor(), ownerOfHolder(t, e), "req-x", token, "PUBLISH", "nowhere").Err(); err != nil {
		t.Fatal(err)
	}
	if h := e.holder(); h != "b" {
		t.Fatalf("holder after release = %q, want b", h)
	}
	_ = gotB
	// b learns of the grant at its next heartbeat (the fallback for lost
	// messages): it returns holding the lock.
	e.clk.Advance(fairlock.DefaultWaitTimeout / 3)
	if r := await(t, gotB); !r.ok {
		t.Fatalf("b after a lost grant message: %v, %v", r.ok, r.err)
	}
	mustUnlock(t, b)
	if r := await(t, gotC); !r.ok {
		t.Fatal("c did not get the lock after b")
	}
	mustUnlock(t, c)
	_ = a.Unlock(ctx) // a's hold was released behind its back
}

func keysFor() []string {
	return []string{holdKey, holdKey + ":queue", holdKey + ":deadlines"}
}

func ownerOfHolder(t *testing.T, e *env) string {
	h := e.inspect().Holder
	if h == nil {
		t.Fatal("no holder")
	}
	return h.Owner
}

func TestOneMessagePerHandOff(t *testing.T) {
	e := newEnv(t)
	msgs := e.watch()
	handles := []*fair.Mutex{e.named("a"), e.named("b"), e.named("c")}
	mustLock(t, handles[0])
	got := []<-chan result{nil, e.enqueue(handles[1], 1), e.enqueue(handles[2], 2)}
	for i := 0; i < 2; i++ {
		mustUnlock(t, handles[i])
		if r := await(t, got[i+1]); !r.ok {
			t.Fatalf("waiter %d: %v %v", i+1, r.ok, r.err)
		}
		select {
		case m := <-msgs:
			// The grant, and for the waiter behind the grantee (c, at the
			// first hand-off) the head notice, in the same message.
			grant, notice, _ := strings.Cut(m.Payload, ";")
			if len(strings.Fields(grant)) != 3 {
				t.Fatalf("hand-off message %q, want \"<entry> <token> <grant time>\" first", m.Payload)
			}
			if f := strings.Fields(notice); (i == 0) != (len(f) == 3 && f[1] == "head") {
				t.Fatalf("hand-off %d message %q: want a head notice \"<entry> head <expiry>\" exactly when a waiter is behind the grantee", i, m.Payload)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no hand-off message")
		}
		select {
		case m := <-msgs:
			t.Fatalf("a second message for one hand-off: %q", m.Payload)
		case <-time.After(50 * time.Millisecond):
		}
	}
	mustUnlock(t, handles[2])
	select {
	case m := <-msgs:
		t.Fatalf("a message when nobody waits: %q", m.Payload)
	case <-time.After(50 * time.Millisecond):
	}
}

// A hand-off reaches only the client whose waiter it names, however many
// clients wait: the grant goes to the grantee's inbox, the head notice to
// the next waiter's, and the clients further back hear nothing.
func TestHandOffReachesTheWaitersClientOnly(t *testing.T) {
	e := newEnv(t)
	msgs := e.watch()
	holder := e.named("holder")
	mustLock(t, holder)
	var waiters []*fair.Mutex
	var got []<-chan result
	for i := range 6 {
		m := e.handleOn(e.process(), fair.WithLabel(fmt.Sprint("w", i)))
		waiters = append(waiters, m)
		got = append(got, e.enqueue(m, i+1))
	}
	q := e.inspect().Queue
	mustUnlock(t, holder)
	if r := await(t, got[0]); !r.ok {
		t.Fatalf("the first waiter: %v, %v", r.ok, r.err)
	}
	for i, want := range []string{q[0].Entry + " ", q[1].Entry + " head "} {
		select {
		case m := <-msgs:
			checkInbox(t, m)
			if !strings.HasPrefix(m.Payload, want) || strings.Contains(m.Payload, transport.NoteSeparator) {
				t.Fatalf("message %d of the hand-off: %q on %s, want one note beginning %q", i, m.Payload, m.Channel, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("message %d of the hand-off did not come", i)
		}
	}
	select {
	case m := <-msgs:
		t.Fatalf("a third message for one hand-off: %q on %s", m.Payload, m.Channel)
	case <-time.After(50 * time.Millisecond):
	}
	for i, m := range waiters {
		if i > 0 {
			if r := await(t, got[i]); !r.ok {
				t.Fatalf("waiter %d: %v, %v", i, r.ok, r.err)
			}
		}
		mustUnlock(t, m)
	}
}

func TestHandOffIsClaimedToAFullLease(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.named("a")
	b := e.named("b", fairlock.WithLease(time.Minute), fairlock.WithWaitTimeout(3*time.Second))
	mustLock(t, a)
	gotB := e.enqueue(b, 1)
	mustUnlock(t, a)
	if r := await(t, gotB); !r.ok {
		t.Fatal("b did not get the lock")
	}
	// Until claimed, the grant lasts no longer than b's queue deadline (3 s).
	if ttl, _ := b.TTL(ctx); ttl > 3*time.Second {
		t.Fatalf("TTL before the claim = %v, want at most b's wait timeout, 3s", ttl)
	}
	if h := e.inspect().Holder; h == nil || !h.Pending {
		t.Fatalf("holder before the claim: %+v; want a pending hand-off", h)
	}
	// The claim runs halfway through that first lease.
	e.clk.Advance(1500 * time.Millisecond)
	if ttl, _ := b.TTL(ctx); ttl < 59*time.Second || ttl > time.Minute {
		t.Fatalf("TTL after the claim = %v, want about the full lease of 1m", ttl)
	}
	if h := e.inspect().Holder; h == nil || h.Pending {
		t.Fatalf("holder after the claim: %+v; want a claimed hold", h)
	}
	for i := 0; i < 10; i++ {
		e.clk.Advance(30 * time.Second)
	}
	if isClosed(b.Lost()) {
		t.Fatal("a handed-off hold was lost while its watchdog ran")
	}
	mustUnlock(t, b)
}

func TestEvictedWaiterRejoinsAtTheTailAndSaysSo(t *testing.T) {
	e := newEnv(t)
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	a, b, c := e.named("a"), e.named("b", fairlock.WithLogger(logger)), e.named("c")
	mustLock(t, a)
	gotB := e.enqueue(b, 1)
	gotC := e.enqueue(c, 2)
	// b's entry goes behind its back, a third of its wait timeout after
	// its last refresh, as when Redis loses its data: the log says it
	// vanished, not that b stalled.
	st := e.inspect()
	e.mr.ZRem(holdKey+":deadlines", st.Queue[0].Entry)
	e.clk.Advance(fairlock.DefaultWaitTimeout / 3)
	waitUntil(t, "b re-joined", func() bool { return slices.Equal(e.queued(), []string{"c", "b"}) })
	mu.Lock()
	if out := logs.String(); !strings.Contains(out, "entry vanished from the queue before its wait timeout") ||
		!strings.Contains(out, "re-joining at the tail") || strings.Contains(out, "stall longer") {
		t.Fatalf("log does not say the entry vanished and the waiter re-joined: %q", out)
	}
	mu.Unlock()
	mustUnlock(t, a)
	if r := await(t, gotC); !r.ok {
		t.Fatal("c did not get the lock")
	}
	mustUnlock(t, c)
	if r := await(t, gotB); !r.ok {
		t.Fatal("b did not get the lock after re-joining")
	}
	mustUnlock(t, b)
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestCrashedWaitersAreEvictedWithinTheBound(t *testing.T) {
	e := newEnv(t)
	wait := 3 * time.Second
	a := e.named("a")
	mustLock(t, a)
	// b and c run on a machine that will crash; d is alive.
	dead := e.process()
	b, c := e.handleOn(dead, fair.WithLabel("b"), fairlock.WithWaitTimeout(wait)), e.handleOn(dead, fair.WithLabel("c"), fairlock.WithWaitTimeout(wait))
	d := e.named("d", fairlock.WithWaitTimeout(wait))
	frozen, thaw := context.WithCancel(context.Background())
	gotB := e.enqueueCtx(frozen, b, 1)
	gotC := e.enqueueCtx(frozen, c, 2)
	gotD := e.enqueue(d, 3)
	crashed := e.clk.Now()
	_ = dead.Close() // b and c fall silent
	defer func() {   // end the frozen goroutines
		thaw()
		await(t, gotB)
		await(t, gotC)
	}()
	mustUnlock(t, a) // the lock goes to b, a dead head, until b's deadline
	// Run the fake clock to the bound, then stop it there: whatever d's
	// timers started by the bound gets real time to finish, and nothing that
	// happens after the bound can give d the lock. (Checking d's channel only
	// between steps raced d's goroutine: a lock won at the bound could be seen
	// one step past it.)
	bound := wait + wait/3 + 10*time.Millisecond
	for e.clk.Now().Sub(crashed) < bound {
		e.clk.Advance(10 * time.Millisecond)
		redistest.Quiet(t, "d has read every message", func() bool { return true })
	}
	select {
	case r := <-gotD:
		if !r.ok {
			t.Fatalf("d: %v %v", r.ok, r.err)
		}
		mustUnlock(t, d)
	case <-time.After(10 * time.Second):
		t.Fatalf("d did not get the lock within one wait timeout + one heartbeat after b and c died")
	}
}

func TestInspect(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if s := e.inspect(); s.Holder != nil || len(s.Queue) != 0 {
		t.Fatalf("Inspect of an unused lock: %+v", s)
	}
	a := e.named("holder", fairlock.WithLease(20*time.Second))
	b := e.named("waiter", fairlock.WithWaitTimeout(6*time.Second))
	mustLock(t, a)
	mustReenter(t, a)
	gotB := e.enqueue(b, 1)
	e.clk.Advance(time.Second)
	s := e.inspect()
	h := s.Holder
	if h == nil || h.Label != "holder" || h.Count != 2 || h.TTL != 19*time.Second || h.Token != a.Token() || h.PID == 0 || h.Host == "" {
		t.Fatalf("holder = %+v", h)
	}
	if len(s.Queue) != 1 {
		t.Fatalf("queue = %+v", s.Queue)
	}
	w := s.Queue[0]
	if w.Label != "waiter" || w.Expired || w.Deadline != 5*time.Second || w.Owner == "" || !strings.HasPrefix(w.Entry, w.Owner+"/") {
		t.Fatalf("waiter = %+v", w)
	}
	before := e.mr.Dump()
	e.inspect()
	if e.mr.Dump() != before {
		t.Fatal("Inspect changed Redis")
	}
	if _, err := fair.Inspect(ctx, e.client, "a{b}"); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Fatalf("Inspect of a bad name = %v", err)
	}
	if _, err := fair.Inspect(ctx, nil, "x"); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Fatalf("Inspect with a nil client = %v", err)
	}
	unlockAll(a)
	await(t, gotB)
	mustUnlock(t, b)
}

func TestNoKeysLeftBehind(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, b := e.named("a"), e.named("b")
	mustLock(t, a)
	got := tryLockAsync(b, ctx, 2*time.Second, 0)
	e.settle(1)
	for _, k := range e.mr.Keys() {
		if e.mr.TTL(k) <= 0 {
			t.Fatalf("key %s has no TTL", k)
		}
	}
	e.clk.Advance(2 * time.Second)
	await(t, got)
	unlockAll(a)
	// a's last lease (30 s, renewed by the watchdog until 2 s) and b's
	// deadline (10 s) are over by 32 s; keys stay at most 40 s more.
	e.clk.Advance(70*time.Second + time.Millisecond)
	if keys := redistest.LockKeys(e.mr); len(keys) != 0 {
		t.Fatalf("keys left 40 s after the last lease and deadline: %v", keys)
	}
}

func TestHolderThatDiesIsReplacedWhenItsLeaseRunsOut(t *testing.T) {
	e := newEnv(t)
	dead := e.process()
	a := e.handleOn(dead, fair.WithLabel("a"), fairlock.WithLease(5*time.Second))
	b := e.named("b")
	mustLock(t, a)
	gotB := e.enqueue(b, 1)
	_ = dead.Close()
	e.clk.Advance(5*time.Second + time.Millisecond)
	if r := await(t, gotB); !r.ok {
		t.Fatalf("b after the dead holder's lease: %v %v", r.ok, r.err)
	}
	if !isClosed(a.Lost()) {
		t.Fatal("the dead holder's Lost is not closed")
	}
	mustUnlock(t, b)
}

func TestFairBadInput(t *testing.T) {
	redistest.NoLeaks(t)
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	for name, opt := range map[string]fair.MutexOption{
		"negative wait timeout": fairlock.WithWaitTimeout(-time.Second),
		"zero wait timeout":     fairlock.WithWaitTimeout(0),
		"long label":            fair.WithLabel(strings.Repeat("x", 201)),
		"negative lease":        fairlock.WithLease(-1),
		"no replicas":           fairlock.WithReplicas(0, time.Second),
		"too many replicas":     fairlock.WithReplicas(101, time.Second),
		"zero replica timeout":  fairlock.WithReplicas(1, 0),
	} {
		if _, err := fair.New(redistest.Owner(client), "x", opt); !errors.Is(err, fairlock.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	for _, name := range []string{"", "{x}", "a}", strings.Repeat("x", fairlock.MaxNameLen+1)} {
		if _, err := fair.New(redistest.Owner(client), name); !errors.Is(err, fairlock.ErrInvalidArgument) {
			t.Errorf("name %.20q (%d bytes): %v, want ErrInvalidArgument", name, len(name), err)
		}
	}
	if _, err := fair.New(redistest.Owner(client), strings.Repeat("x", fairlock.MaxNameLen)); err != nil {
		t.Errorf("a name of fairlock.MaxNameLen bytes: %v", err)
	}
	if _, err := fair.New(nil, "x"); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Errorf("nil client: %v", err)
	}
	m, _ := fair.New(redistest.Owner(client), "x")
	if _, err := m.TryLock(context.Background(), -time.Second, 0); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Errorf("negative wait: %v", err)
	}
	if err := m.Unlock(context.Background()); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Errorf("Unlock without a hold: %v", err)
	}
}

func TestEvictedWaiterThatRejoinsAFreeLockHoldsItOnce(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, b := e.named("a"), e.named("b")
	mustLock(t, a)
	gotB := e.enqueue(b, 1)
	// b stalls past its deadline, and a releases meanwhile: nobody is left
	// to hand the lock to.
	e.mr.ZRem(holdKey+":deadlines", e.inspect().Queue[0].Entry)
	mustUnlock(t, a)
	e.clk.Advance(fairlock.DefaultWaitTimeout / 3) // b's heartbeat: evicted, re-join
	if r := await(t, gotB); !r.ok {
		t.Fatalf("b after re-joining a free lock: %v, %v", r.ok, r.err)
	}
	if n, _ := b.HoldCount(ctx); n != 1 {
		t.Fatalf("b holds the lock %d times after one Lock, want 1", n)
	}
	mustUnlock(t, b)
	if locked, _ := b.IsLocked(ctx); locked {
		t.Fatal("the lock is still held after b's one Unlock")
	}
}

// Extend lengthens a hold, a fixed lease or a hand-off not yet claimed (which
// it claims), and never shortens one.
func TestExtend(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, b := e.named("a"), e.named("b")
	if ok, err := a.TryLock(ctx, 0, time.Second); !ok || err != nil {
		t.Fatalf("TryLock: %v, %v", ok, err)
	}
	waiting := e.enqueue(b, 1)
	if err := a.Extend(ctx, 5*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	e.clk.Advance(2 * time.Second) // past the first lease
	if isClosed(a.Lost()) || e.holder() != "a" {
		t.Fatalf("an extended fixed lease ended early (holder %q)", e.holder())
	}
	mustUnlock(t, a)
	if r := await(t, waiting); !r.ok || r.err != nil {
		t.Fatalf("b's Lock: %v, %v", r.ok, r.err)
	}
	// b's hold is a hand-off, its first lease bounded by its queue deadline
	// until it is claimed: Extend claims it with the lease asked for.
	if err := b.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend of a hand-off: %v", err)
	}
	if ttl, err := b.TTL(ctx); err != nil || ttl != time.Minute {
		t.Fatalf("TTL after Extend(1m) = %v, %v", ttl, err)
	}
	if err := b.Extend(ctx, time.Second); err != nil {
		t.Fatalf("Extend to less: %v", err)
	}
	if ttl, _ := b.TTL(ctx); ttl != time.Minute {
		t.Fatalf("TTL after Extend(1s) = %v, want it kept at 1m", ttl)
	}
	mustUnlock(t, b)
	if err := b.Extend(ctx, time.Second); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("Extend after Unlock = %v, want ErrNotHeld", err)
	}
}

// A lock contended once and free since lets its inbox channel go 30 s
// after its last wait, however often it is taken meanwhile
// (redistest.InboxGoes says why it matters).
func TestAFreeLockLetsItsInboxChannelGo(t *testing.T) {
	e := newEnv(t)
	b := e.contendedOnce()
	redistest.InboxGoes(t, e.mr, e.clk, func() {
		mustLock(t, b)
		mustUnlock(t, b)
	})
}

// Once a lock's last waiter has left, the next Lock finds the queue empty
// and drops the waiters' horizon: the hold it writes is in the ordered
// form, and the Locks and Unlocks after it take the uncontended path at
// once, not a wait timeout later (hold.lua's take_free).
func TestTheUncontendedPathResumesOnceTheQueueIsEmpty(t *testing.T) {
	e := newEnv(t)
	b := e.contendedOnce()
	if raw, _ := e.mr.Get(transport.FairBase(lockName)); strings.HasPrefix(raw, `{"~":0,`) {
		t.Fatal("the hold is in the ordered form while a waiter's deadline is ahead")
	}
	redistest.TakesTheUncontendedPath(t, e.mr, transport.FairBase(lockName), func() { mustLock(t, b) }, func() { mustUnlock(t, b) })
}

// contendedOnce makes the lock contended once: a handle holds it while
// another waits for it, and the waiter takes it when the holder lets go,
// then lets go too. It returns the waiter's handle.
func (e *env) contendedOnce() *fair.Mutex {
	e.t.Helper()
	a, b := e.named("a"), e.named("b")
	mustLock(e.t, a)
	got := e.enqueue(b, 1)
	mustUnlock(e.t, a)
	if r := <-got; !r.ok || r.err != nil {
		e.t.Fatalf("the waiter's TryLock = %v, %v; want the lock", r.ok, r.err)
	}
	mustUnlock(e.t, b)
	return b
}
