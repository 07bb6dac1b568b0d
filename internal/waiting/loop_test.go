package waiting_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/fairlock/fairlock/internal/waiting"
)

// script is a Waiter whose tries answer as the test says, one by one.
type script struct {
	mu      sync.Mutex
	answers []error // a try's error; nil: not yet (sleep on)
	grantAt int     // the try that ends the wait (1-based); 0: none
	// fallback, if set, is armed by the first try, that far ahead
	fallback time.Duration
	tries    int
	fell     []bool      // FellBack at each try
	at       []time.Time // the clock at each try
	leaves   int
	news     int
	w        *waiting.Loop
	clk      clock.Clock
}

func (s *script) Try(context.Context) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tries++
	s.fell = append(s.fell, s.w.FellBack())
	s.at = append(s.at, s.clk.Now())
	if s.tries == s.grantAt {
		return true, nil
	}
	if s.tries <= len(s.answers) {
		return false, s.answers[s.tries-1]
	}
	if s.tries == 1 && s.fallback > 0 {
		s.w.FallBackAt(s.clk.Now().Add(s.fallback))
	}
	return false, nil
}

func (s *script) News(context.Context, transport.Wake) (bool, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.news++
	return false, true, nil
}

func (s *script) Leave(context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaves++
}

func (s *script) count() (tries, leaves int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tries, s.leaves
}

// refusal is an answer of Redis (a redis.Error): no retry would change it.
type refusal string

func (r refusal) Error() string { return string(r) }
func (refusal) RedisError()     {}

// loopEnv is an agent on a fake clock, whose owner's hubs the loop's
// sleeper comes from; the scripted waiter never reaches Redis.
type loopEnv struct {
	clk *clock.Fake
	h   core.Agent
}

func newLoopEnv(t *testing.T) *loopEnv {
	t.Helper()
	_, clk, client := redistest.Mini(t)
	o := core.OwnerOf(redistest.OwnerOn(client, clk, nil))
	cfg := core.NewConfig()
	core.Equip(o, &cfg)
	return &loopEnv{clk: clk, h: core.Agent{Client: client, Owner: o, Name: "loop", Config: &cfg}}
}

// run starts a loop for s that waits up to wait (forever if 0), and
// returns what Run returns.
func (e *loopEnv) run(ctx context.Context, s *script, wait time.Duration) <-chan error {
	a := core.Attempt{Wait: wait, Forever: wait == 0}
	w := waiting.New(e.h, a, "waiting for the test", e.clk.Now().Add(wait))
	s.w, s.clk = w, e.clk
	done := make(chan error, 1)
	go func() {
		defer w.Close()
		done <- w.Run(ctx, s, true)
	}()
	return done
}

// settle waits until the loop has made n tries and armed its timers.
func (e *loopEnv) settle(t *testing.T, s *script, n, timers int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if tries, _ := s.count(); tries == n && e.clk.Pending() == timers {
			return
		}
		if time.Now().After(deadline) {
			tries, _ := s.count()
			t.Fatalf("%d tries and %d timers, want %d and %d", tries, e.clk.Pending(), n, timers)
		}
		time.Sleep(time.Millisecond)
	}
}

func result(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// A try that cannot reach Redis is retried after a jittered backoff on the
// loop's clock (MinPause, then doubling), each retry a fallback; the wait
// goes on until a try ends it, and it leaves nothing behind.
func TestLoopRidesOutAnOutage(t *testing.T) {
	e := newLoopEnv(t)
	unreachable := errors.New("dial tcp: connection refused")
	s := &script{answers: []error{unreachable, unreachable, unreachable}, grantAt: 4}
	done := e.run(context.Background(), s, 0)
	e.settle(t, s, 1, 1)                // the backoff's timer alone: the wait is forever
	e.clk.Advance(2 * waiting.MaxPause) // fires each retry as it falls due
	if err := result(t, done); err != nil {
		t.Fatalf("Run = %v, want nil (the fourth try ends the wait)", err)
	}
	if tries, leaves := s.count(); tries != 4 || leaves != 0 {
		t.Errorf("%d tries, %d leaves; want 4 and 0", tries, leaves)
	}
	if want := []bool{false, true, true, true}; !equal(s.fell, want) {
		t.Errorf("FellBack at each try = %v, want %v", s.fell, want)
	}
	// The pause doubles from MinPause, each jittered down by up to a half.
	for i, level := range []time.Duration{waiting.MinPause, 2 * waiting.MinPause, 4 * waiting.MinPause} {
		if gap := s.at[i+1].Sub(s.at[i]); gap < level/2 || gap > level {
			t.Errorf("retry %d came %v after the try before, want within [%v, %v]", i+1, gap, level/2, level)
		}
	}
}

// A try Redis refuses ends the wait at once: the waiter leaves, and the
// error says what it was doing.
func TestLoopEndsOnARefusal(t *testing.T) {
	e := newLoopEnv(t)
	s := &script{answers: []error{refusal("ERR no such script")}}
	err := result(t, e.run(context.Background(), s, time.Minute))
	var r refusal
	if !errors.As(err, &r) || !strings.Contains(err.Error(), "waiting for the test: ERR no such script") {
		t.Fatalf("Run = %v, want the refusal, saying what the waiter did", err)
	}
	if tries, leaves := s.count(); tries != 1 || leaves != 1 {
		t.Errorf("%d tries, %d leaves; want 1 and 1", tries, leaves)
	}
}

// A wait that elapses returns nil, having left; its fallback timer, when
// armed, makes a try that counts as a fallback.
func TestLoopElapsesAndFallsBack(t *testing.T) {
	e := newLoopEnv(t)
	s := &script{fallback: time.Second}
	done := e.run(context.Background(), s, time.Minute)
	e.settle(t, s, 1, 2) // the wait's end, and the fallback
	e.clk.Advance(time.Second)
	e.settle(t, s, 2, 1) // the fallback fired once, and is not re-armed
	e.clk.Advance(time.Minute)
	if err := result(t, done); err != nil {
		t.Fatalf("Run = %v, want nil: the wait elapsed", err)
	}
	if tries, leaves := s.count(); tries != 2 || leaves != 1 {
		t.Errorf("%d tries, %d leaves; want 2 and 1", tries, leaves)
	}
	if want := []bool{false, true}; !equal(s.fell, want) {
		t.Errorf("FellBack at each try = %v, want %v", s.fell, want)
	}
	if n := e.clk.Pending(); n != 0 {
		t.Errorf("%d timers left after Run returned", n)
	}
}

// A wait whose ctx ends returns ctx's error, having left; while Redis is
// out of reach, the error also says so and wraps the outage's cause.
func TestLoopEndsWithItsContext(t *testing.T) {
	e := newLoopEnv(t)
	unreachable := errors.New("dial tcp: connection refused")
	s := &script{answers: []error{unreachable}}
	ctx, cancel := context.WithCancel(context.Background())
	done := e.run(ctx, s, 0)
	e.settle(t, s, 1, 1)
	cancel()
	err := result(t, done)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, unreachable) || !strings.Contains(err.Error(), "Redis out of reach") {
		t.Fatalf("Run = %v, want ctx's error wrapping the outage's cause", err)
	}
	if _, leaves := s.count(); leaves != 1 {
		t.Errorf("%d leaves, want 1", leaves)
	}
}

func equal(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// An acquisition the replicas did not acknowledge (WithReplicas) was
// answered by Redis and undone: the wait ends with it, as with a refusal,
// rather than riding it out as an outage.
func TestLoopEndsWhenReplicasDidNotAcknowledge(t *testing.T) {
	e := newLoopEnv(t)
	s := &script{answers: []error{fmt.Errorf("%w: 0 of 1", core.ErrNotReplicated)}}
	err := result(t, e.run(context.Background(), s, time.Minute))
	if !errors.Is(err, core.ErrNotReplicated) {
		t.Fatalf("Run = %v, want ErrNotReplicated", err)
	}
	if tries, leaves := s.count(); tries != 1 || leaves != 1 {
		t.Errorf("%d tries, %d leaves; want 1 and 1", tries, leaves)
	}
}
