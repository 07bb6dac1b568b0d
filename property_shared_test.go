package fairlock_test

// The specification of goroutines that share a handle (fair/doc.go,
// "Goroutines"): a rapid state machine drives callers, each a goroutine
// with its own call chain, four of them on one fair.Mutex and one on a
// handle of another client, against miniredis on the fake clock. Its
// actions are what those goroutines do: Lock with a context of their own,
// re-enter with the context their Lock returned, Unlock with it, and Unlock
// a hold that already ended. After every step it checks that at most one
// caller holds the lock, that callers are served in the order they called
// Lock, whichever handle they share, and that Redis's holder and queue are
// what the model says.
//
//	go test -run TestSharedHandleSpecification .

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"
)

// caller is one goroutine's call chain on a handle.
type caller struct {
	label   string
	m       *fair.Mutex
	shared  bool            // on the handle the goroutines share
	result  chan lockResult // its running Lock's outcome
	waiting bool
	holding bool
	count   int             // holds, as the model counts them
	hold    context.Context // the context its Lock returned: its proof
	ended   context.Context // the context of its last hold, ended
}

type lockResult struct {
	ctx context.Context
	err error
}

type sharedSpec struct {
	t       *rapid.T
	mr      *miniredis.Miniredis
	clk     *clock.Fake
	probe   *redis.Client
	clients []*redis.Client
	callers []*caller
	queue   []*caller // the model's queue, in Lock-call order
	holder  *caller
	lastTok int64
}

func newSharedSpec(t *rapid.T) *sharedSpec {
	mr, clk := fakeServer(t)
	s := &sharedSpec{t: t, mr: mr, clk: clk}
	s.probe = redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	handle := func(label string) *fair.Mutex {
		c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
		s.clients = append(s.clients, c)
		m, err := fair.New(redistest.OwnerOn(c, s.clk, nil), lockName, fair.WithLabel(label))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	shared := handle("shared")
	for i := range 4 {
		s.callers = append(s.callers, &caller{label: fmt.Sprintf("g%d", i), m: shared, shared: true})
	}
	s.callers = append(s.callers, &caller{label: "other", m: handle("other")})
	return s
}

func (s *sharedSpec) pick(ok func(*caller) bool) *caller {
	var c []*caller
	for _, x := range s.callers {
		if ok(x) {
			c = append(c, x)
		}
	}
	if len(c) == 0 {
		s.t.Skip("no such caller")
	}
	return rapid.SampledFrom(c).Draw(s.t, "caller")
}

// lock: an idle goroutine calls LockContext with a context of its own. It
// holds at once if the lock is free and nobody waits; otherwise it waits,
// behind everyone who called before it, of its handle or another.
func (s *sharedSpec) lock(t *rapid.T) {
	c := s.pick(func(c *caller) bool { return !c.waiting && !c.holding })
	c.waiting, c.result = true, make(chan lockResult, 1)
	go func() {
		ctx, err := c.m.LockContext(context.Background())
		c.result <- lockResult{ctx, err}
	}()
	s.queue = append(s.queue, c)
	s.settle()
}

// reenter: the holder re-enters with its hold's context, at once.
func (s *sharedSpec) reenter(t *rapid.T) {
	c := s.pick(func(c *caller) bool { return c.holding })
	if ok, err := c.m.TryLock(c.hold, 0, 0); !ok || err != nil {
		t.Fatalf("%s's re-entry with its hold's context = %v, %v", c.label, ok, err)
	}
	c.count++
}

// unlock: the holder undoes one level with its hold's context; the last
// one hands the lock to the first caller that waits.
func (s *sharedSpec) unlock(t *rapid.T) {
	c := s.pick(func(c *caller) bool { return c.holding })
	if err := c.m.Unlock(c.hold); err != nil {
		t.Fatalf("%s's Unlock: %v", c.label, err)
	}
	c.count--
	if c.count == 0 {
		if cause := context.Cause(c.hold); !errors.Is(cause, fairlock.ErrReleased) {
			t.Fatalf("%s's hold context after its last Unlock: cause %v, want ErrReleased", c.label, cause)
		}
		c.holding, c.ended, c.hold, s.holder = false, c.hold, nil, nil
	}
	s.settle()
}

// strayUnlock: a goroutine unlocks, with its context, a hold that already
// ended: ErrNotHeld, and nothing changes, whoever holds the lock now (of
// its own handle included).
func (s *sharedSpec) strayUnlock(t *rapid.T) {
	c := s.pick(func(c *caller) bool { return c.ended != nil && !c.holding })
	before := s.inspect()
	if err := c.m.Unlock(c.ended); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("%s's Unlock of a hold that ended = %v, want ErrNotHeld", c.label, err)
	}
	if after := s.inspect(); !sameHolder(before, after) {
		t.Fatalf("%s's Unlock of a hold that ended changed the lock: %+v, then %+v", c.label, before.Holder, after.Holder)
	}
}

func sameHolder(a, b fair.State) bool {
	if (a.Holder == nil) != (b.Holder == nil) {
		return false
	}
	return a.Holder == nil || (a.Holder.Token == b.Holder.Token && a.Holder.Count == b.Holder.Count)
}

// advance lets time pass: the watchdog and the heartbeats keep holds and
// places, so nothing else changes.
func (s *sharedSpec) advance(t *rapid.T) {
	s.clk.Advance(time.Duration(rapid.IntRange(1, 3000).Draw(t, "ms")) * time.Millisecond)
	s.settle()
}

// settle waits until every waiting caller is asleep and the one the lock
// went to, if any, has returned; it checks that this is the model's next.
func (s *sharedSpec) settle() {
	redistest.Quiet(s.t, "the callers settle", func() bool {
		for _, c := range s.callers {
			if !c.waiting {
				continue
			}
			select {
			case r := <-c.result:
				s.acquired(c, r)
			default:
			}
		}
		waiting := 0
		for _, c := range s.callers {
			if c.waiting {
				waiting++
			}
		}
		if s.holder == nil && len(s.queue) > 0 {
			return false // the lock is on its way to the first waiter
		}
		return redistest.Asleep() == waiting
	})
}

// acquired takes in a caller's Lock that returned.
func (s *sharedSpec) acquired(c *caller, r lockResult) {
	t := s.t
	if r.err != nil {
		t.Fatalf("%s's Lock: %v", c.label, r.err)
	}
	if s.holder != nil {
		t.Fatalf("mutual exclusion: %s's Lock returned while %s held the lock", c.label, s.holder.label)
	}
	if s.queue[0] != c {
		t.Fatalf("arrival order: %s's Lock returned, but %s called Lock before it and still waits", c.label, s.queue[0].label)
	}
	s.queue = s.queue[1:]
	tok := c.m.Token()
	if tok <= s.lastTok {
		t.Fatalf("%s's token %d is not above the previous hold's %d", c.label, tok, s.lastTok)
	}
	s.lastTok = tok
	c.waiting, c.holding, c.count, c.hold, s.holder = false, true, 1, r.ctx, c
}

func (s *sharedSpec) inspect() fair.State {
	st, err := fair.Inspect(context.Background(), s.probe, lockName)
	if err != nil {
		s.t.Fatalf("Inspect: %v", err)
	}
	return st
}

// check compares Redis with the model: the holder, its count, and the
// queue in order (by handle: the shared handle's goroutines show its
// label).
func (s *sharedSpec) check(t *rapid.T) {
	st := s.inspect()
	switch {
	case s.holder == nil && st.Holder != nil:
		t.Fatalf("nobody holds the lock, but Redis has %+v", st.Holder)
	case s.holder != nil && (st.Holder == nil || st.Holder.Token != s.lastTok || st.Holder.Count != s.holder.count):
		t.Fatalf("%s holds the lock %d times with token %d, but Redis has %+v", s.holder.label, s.holder.count, s.lastTok, st.Holder)
	}
	var want, got []string
	for _, c := range s.queue {
		want = append(want, map[bool]string{true: "shared", false: "other"}[c.shared])
	}
	for _, w := range st.Queue {
		if !w.Expired {
			got = append(got, w.Label)
		}
	}
	if !slices.Equal(want, got) {
		t.Fatalf("the queue in Redis is %v, the callers waiting %v", got, want)
	}
	if s.holder != nil && s.holder.shared {
		if n, err := s.holder.m.HoldCount(context.Background()); err != nil || n != s.holder.count {
			t.Fatalf("HoldCount of the shared handle = %d, %v; its holder counts %d", n, err, s.holder.count)
		}
	}
}

func (s *sharedSpec) close() {
	for _, c := range s.callers {
		if c.holding {
			for c.m.Unlock(c.hold) == nil {
			}
			c.holding = false
		}
	}
	for len(s.queue) > 0 {
		s.holder = nil
		s.settle()
		if s.holder != nil {
			for s.holder.m.Unlock(s.holder.hold) == nil {
			}
			s.holder.holding, s.holder = false, nil
		}
	}
	redistest.CloseOwners()
	for _, c := range s.clients {
		_ = c.Close()
	}
	_ = s.probe.Close()
	s.mr.Close()
}

func TestSharedHandleSpecification(t *testing.T) {
	checkWith(t, 1000, func(t *rapid.T) {
		s := newSharedSpec(t)
		defer s.close()
		t.Repeat(map[string]func(*rapid.T){
			"lock":        s.lock,
			"reenter":     s.reenter,
			"unlock":      s.unlock,
			"strayUnlock": s.strayUnlock,
			"advance":     s.advance,
			"":            s.check,
		})
	})
}
