package fair_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The restart check (internal/core/restart.go) on miniredis, its rounds on
// the fake clock: an owner that holds anything PINGs Redis every
// DefaultRestartCheck on a connection of its own, and renews at once the
// holds a new connection's answer does not cover. faults/restart_test.go
// does the same with a real redis-server killed and started again.

// restartEnv is an owner with the restart check on, on a client with
// go-redis's default options, and a count of its renewals.
type restartEnv struct {
	mr       *miniredis.Miniredis
	clk      *clock.Fake
	owner    *fairlock.Owner
	renewals *atomic.Int32
}

func newRestartEnv(t *testing.T) *restartEnv {
	redistest.NoLeaks(t)
	mr, clk, _ := redistest.Mini(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	owner, renewals := checkingOwner(t, c, core.Rig{Clock: clk, RestartCheck: core.DefaultRestartCheck})
	return &restartEnv{mr: mr, clk: clk, owner: owner, renewals: renewals}
}

// checkingOwner returns an owner of c made with rig (its restart check
// on), closed when the test ends, and the count of its renewals that Redis
// answered.
func checkingOwner(t *testing.T, c redis.UniversalClient, rig core.Rig) (*fairlock.Owner, *atomic.Int32) {
	t.Helper()
	renewals := &atomic.Int32{}
	c.AddHook(onCall(func(cmd redis.Cmder, err error) {
		if err == nil && redistest.Calls(lua.Default().Renew, cmd.Args()) {
			renewals.Add(1)
		}
	}))
	o, err := core.NewOwnerWith(c, rig)
	if err != nil {
		t.Fatal(err)
	}
	owner := redistest.Public(o)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := owner.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return owner, renewals
}

// restartEmpty stops miniredis, which drops every connection, and starts it
// again on the same port without its keys.
func (e *restartEnv) restartEmpty(t *testing.T) {
	e.mr.Close()
	e.mr.FlushAll()
	if err := e.mr.Restart(); err != nil {
		t.Fatal(err)
	}
}

// A restart right after Lock, before the owner's check has ever run, is
// found at its first round: the hold ends as lost then, not at its next
// renewal (a third of the lease).
func TestARestartRightAfterLockIsFoundAtTheFirstRound(t *testing.T) {
	e := newRestartEnv(t)
	m, err := fair.New(e.owner, lockName)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := m.LockContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	e.restartEmpty(t)
	e.clk.Advance(core.DefaultRestartCheck)
	if !isClosed(m.Lost()) {
		t.Fatalf("one round (%v) after Redis restarted empty under a hold, Lost() is open", core.DefaultRestartCheck)
	}
	if cause := context.Cause(ctx); cause != fairlock.ErrLockLost {
		t.Errorf("the hold's context ended with %v, want ErrLockLost", cause)
	}
}

// A hold taken after the owner's connection answered is covered by it: the
// check renews only holds taken before a connection's first answer (once
// each), so holds taken while the owner holds others cost no renewal; a
// restart then ends all of them at the next round.
func TestTheRestartCheckRenewsOnlyHoldsItDoesNotCover(t *testing.T) {
	e := newRestartEnv(t)
	first, _ := fair.New(e.owner, lockName)
	second, _ := fair.New(e.owner, "reports")
	mustLock(t, first)
	e.clk.Advance(core.DefaultRestartCheck) // the connection's first answer: first is renewed
	if n := e.renewals.Load(); n != 1 {
		t.Fatalf("%d renewals at the first round, want 1 (the hold taken before the check's connection answered)", n)
	}
	mustLock(t, second)
	for range 4 {
		e.clk.Advance(core.DefaultRestartCheck)
	}
	if n := e.renewals.Load(); n != 1 {
		t.Fatalf("%d renewals after 4 more rounds, want still 1: the second hold was taken after the check's connection answered", n)
	}
	e.restartEmpty(t)
	e.clk.Advance(core.DefaultRestartCheck)
	for _, m := range []*fair.Mutex{first, second} {
		if !isClosed(m.Lost()) {
			t.Errorf("a hold of %q outlived the round after Redis restarted empty", m.Name())
		}
	}
}

// The check's connection stays open for 30 s after the owner's last hold
// ended (the next hold needs no new one), then closes; Close closes it at
// once.
func TestTheRestartCheckConnectionLingersThenCloses(t *testing.T) {
	e := newRestartEnv(t)
	m, _ := fair.New(e.owner, lockName)
	mustLock(t, m)
	before := e.mr.CurrentConnectionCount()
	e.clk.Advance(core.DefaultRestartCheck)
	if got := e.mr.CurrentConnectionCount(); got != before+1 {
		t.Fatalf("%d connections after the check's first round, want %d (one of its own)", got, before+1)
	}
	mustUnlock(t, m)
	e.clk.Advance(29 * time.Second)
	mustLock(t, m) // a hold in the lingering connection's time
	e.clk.Advance(core.DefaultRestartCheck)
	if got := e.mr.CurrentConnectionCount(); got != before+1 {
		t.Fatalf("%d connections after a hold 29 s later, want %d: the same one", got, before+1)
	}
	if n := e.renewals.Load(); n != 1 {
		t.Fatalf("%d renewals, want 1: the second hold was taken on a connection that had answered", n)
	}
	mustUnlock(t, m)
	for range 62 { // 31 s
		e.clk.Advance(core.DefaultRestartCheck)
	}
	waitUntil(t, "the check's connection closed 30 s after the last hold", func() bool {
		return e.mr.CurrentConnectionCount() == before
	})
	mustLock(t, m)
	e.clk.Advance(core.DefaultRestartCheck)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.owner.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "Close closed the check's connection", func() bool {
		return e.mr.CurrentConnectionCount() < before+1
	})
}

// onCall is a go-redis hook that calls f with each command and its error
// once it has its reply.
type onCall func(redis.Cmder, error)

func (onCall) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f onCall) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		f(cmd, err)
		return err
	}
}

func (onCall) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The restart check runs on every deployment: its first round, one
// connection of its own per server (each Cluster master, Sentinel's
// master), renews the hold taken before it answered, once, and later rounds
// renew nothing while no connection breaks.
func TestRestartCheckOnRedisDeployments(t *testing.T) {
	const every = 100 * time.Millisecond
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			redistest.NoLeaks(t)
			owner, renewals := checkingOwner(t, redistest.DefaultClient(t, kind), core.Rig{RestartCheck: every})
			m, err := fair.New(owner, redistest.Name(t))
			if err != nil {
				t.Fatal(err)
			}
			mustLock(t, m)
			waitUntil(t, "the first round renewed the hold", func() bool { return renewals.Load() > 0 })
			time.Sleep(10 * every)
			if n := renewals.Load(); n != 1 {
				t.Errorf("%d renewals in the first 10 rounds on %s, want 1 (the first round's)", n, kind)
			}
			if isClosed(m.Lost()) {
				t.Fatalf("the hold was lost on %s", kind)
			}
			mustUnlock(t, m)
		})
	}
}
