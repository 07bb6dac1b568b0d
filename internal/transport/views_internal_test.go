package transport

import (
	"context"
	"errors"
	"net"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/fairlock/fairlock/internal/redistest/hung"
	"github.com/redis/go-redis/v9"
)

// A view's timeout is the time left rounded up to a step: never sooner
// than the deadline (so go-redis does not try again before it), never more
// than 1/32 of the time left after it; one view per step.
func TestViewStepsRoundUpWithinAThirtySecond(t *testing.T) {
	prev := -1
	for left := time.Duration(1<<viewMinShift) + 1; left < 10*time.Minute; left += left/7 + 13 {
		i, timeout, ok := viewStep(left)
		if !ok {
			t.Fatalf("%v left: no view", left)
		}
		if timeout < left || timeout > left+left/32 {
			t.Errorf("%v left: timeout %v, want in [%v, %v]", left, timeout, left, left+left/32)
		}
		if i < prev {
			t.Errorf("%v left: step %d after step %d", left, i, prev)
		}
		prev = i
		if j, same, _ := viewStep(timeout); j != i || same != timeout {
			t.Errorf("%v left: step %d (%v), but its own timeout is step %d (%v)", left, i, timeout, j, same)
		}
	}
	if i, timeout, ok := viewStep(time.Microsecond); !ok || i != 0 || timeout != 1<<viewMinShift {
		t.Errorf("1µs left: step %d, %v, %v; want the shortest view", i, timeout, ok)
	}
	if _, _, ok := viewStep(time.Hour); ok {
		t.Error("an hour left: a view; want none (a goroutine)")
	}
}

// goroutinesCreated is how many goroutines the process has started.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// dialCost is how many goroutines go-redis starts for a call on a new
// connection by itself: a client that ends calls at their ctx's deadline
// (ContextTimeoutEnabled), whose calls this package never bounds, calls a
// server that hangs (which times its connection out, so each call dials).
func dialCost(t *testing.T) uint64 {
	c := redis.NewClient(&redis.Options{Addr: hung.Server(t), ContextTimeoutEnabled: true})
	defer func() { _ = c.Close() }()
	s := NewScript(&Library{Name: "fairlock_test", Code: "#!lua name=fairlock_test\n"}, "f", "return 1")
	var m Mode
	cost := uint64(1 << 20)
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		before := goroutinesCreated()
		_ = s.Run(ctx, c, &m, []string{"k"}).Err()
		cost = min(cost, goroutinesCreated()-before)
		cancel()
	}
	return cost
}

// On a client with go-redis's default options, a call whose deadline is
// sooner than go-redis's own bound returns at that deadline (within a step
// of a view) with ctx's error, however long the server hangs, and starts
// no goroutine of its own (go-redis's for a new connection aside). A call
// on a client that has no views (Cluster), on a one-off *Mode (nil), and
// one followed by WAIT (RunWait: WithReplicas) keeps the goroutine.
func TestAViewKeepsTheDeadlineWithoutAGoroutine(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: hung.Server(t)})
	t.Cleanup(func() { _ = c.Close() })
	s := NewScript(&Library{Name: "fairlock_test", Code: "#!lua name=fairlock_test\n"}, "f", "return 1")
	var m Mode
	Attach(&m, c)
	dial := dialCost(t)
	for _, d := range []time.Duration{50 * time.Millisecond, 200 * time.Millisecond} {
		for _, call := range []struct {
			what string
			run  func(ctx context.Context) error
		}{
			{"Script.Run", func(ctx context.Context) error { return s.Run(ctx, c, &m, []string{"k"}).Err() }},
			{"Call.Run", func(ctx context.Context) error { return s.On([]string{"k"}).Run(ctx, c, &m).Err() }},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			before, start := goroutinesCreated(), time.Now()
			err := call.run(ctx)
			took, started := time.Since(start), goroutinesCreated()-before
			cancel()
			var a *Abandoned
			if !errors.As(err, &a) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s, %v deadline, server hung: %v; want Abandoned wrapping the deadline", call.what, d, err)
				continue
			}
			select {
			case <-a.Done:
			default:
				t.Errorf("%s: Done open, but the call has returned", call.what)
			}
			// The bound: the deadline, a step of the view, and the
			// scheduler's slack; never go-redis's 3 s read timeout.
			if took < d || took > d+d/32+100*time.Millisecond {
				t.Errorf("%s, %v deadline, server hung: returned after %v", call.what, d, took)
			}
			if started != dial {
				t.Errorf("%s, %v deadline: %d goroutines started, want go-redis's %d for a new connection alone", call.what, d, started, dial)
			}
		}
	}
	if m.views.of.Load() != c {
		t.Error("the views are not of the client called")
	}

	// No views: a nil Mode, another client than the one attached.
	other := redis.NewClient(&redis.Options{Addr: hung.Server(t)})
	t.Cleanup(func() { _ = other.Close() })
	for what, run := range map[string]func(context.Context) *redis.Cmd{
		"nil Mode":     func(ctx context.Context) *redis.Cmd { return s.Run(ctx, c, nil, []string{"k"}) },
		"other client": func(ctx context.Context) *redis.Cmd { return s.Run(ctx, other, &m, []string{"k"}) },
		"RunWait": func(ctx context.Context) *redis.Cmd {
			cmd, _, _ := s.RunWait(ctx, c, &m, []string{"k"}, 1, time.Second)
			return cmd
		},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		before := goroutinesCreated()
		err := run(ctx).Err()
		started := goroutinesCreated() - before
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || started <= dial {
			t.Errorf("%s: %v, %d goroutines started; want the deadline, on a goroutine", what, err, started)
		}
	}
}

// finisher records what it was asked to make again, and makes it.
type finisher struct {
	mu   sync.Mutex
	what []string
	errs chan error
}

func (f *finisher) GoOn(ctx context.Context, what string, call func(context.Context) error) {
	f.mu.Lock()
	f.what = append(f.what, what)
	f.mu.Unlock()
	go func() {
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 300*time.Millisecond)
		defer cancel()
		f.errs <- call(bg)
	}()
}

// A clean-up on a Finishing ctx runs in its caller's goroutine until its
// deadline and grace; a call the server has not answered by then fails
// with Abandoned, and its Finisher is handed the same call, to make again
// in the background. Done closes once that call returned.
func TestAFinishingCallGoesOnInTheBackground(t *testing.T) {
	// Short timeouts, so that the call made again fails soon.
	c := redis.NewClient(&redis.Options{Addr: hung.Server(t), ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	s := NewScript(&Library{Name: "fairlock_test", Code: "#!lua name=fairlock_test\n"}, "f", "return 1")
	var m Mode
	Attach(&m, c)
	dial := dialCost(t)
	// Finishing's ctx, and RunUntil, which makes none.
	for _, way := range []string{"Finishing", "RunUntil"} {
		f := &finisher{errs: make(chan error, 1)}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		d, _ := ctx.Deadline()
		until := d.Add(50 * time.Millisecond)
		before := goroutinesCreated()
		var err error
		if way == "Finishing" {
			here := Finishing(ctx, &m, c, until, "releasing the lock", f)
			if here == nil {
				t.Fatal("no Finishing ctx for a client with views")
			}
			if got, _ := here.Deadline(); !got.Equal(until) {
				t.Errorf("Deadline = %v, want the deadline and grace, %v", got, until)
			}
			err = s.On([]string{"k"}).Run(here, c, &m).Err()
		} else {
			cmd, kept := s.On([]string{"k"}).RunUntil(ctx, c, &m, until, "releasing the lock", f)
			if !kept {
				t.Fatal("RunUntil did not keep the call on a client with views")
			}
			err = cmd.Err()
		}
		started := goroutinesCreated() - before
		var a *Abandoned
		if !errors.As(err, &a) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: a late clean-up: %v; want Abandoned wrapping the deadline", way, err)
		}
		if time.Now().Before(until) {
			t.Errorf("%s: returned before its deadline and grace", way)
		}
		// The finisher's call may have dialed already, or not.
		if started < dial+1 || started > 2*dial+1 {
			t.Errorf("%s: %d goroutines started, want one (the finisher's) and go-redis's %d per new connection", way, started, dial)
		}
		f.mu.Lock()
		what := f.what
		f.mu.Unlock()
		if len(what) != 1 || what[0] != "releasing the lock" {
			t.Errorf("%s: the finisher was asked for %q, want the call once", way, what)
		}
		if err := <-f.errs; err == nil {
			t.Errorf("%s: the call made again on a hung server succeeded", way)
		}
		select {
		case <-a.Done:
		case <-time.After(time.Second):
			t.Errorf("%s: Done still open after the call made again returned", way)
		}
	}

	// No Finisher, or a client without views: the caller must bound the
	// call itself.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	until := time.Now().Add(time.Second)
	if Finishing(ctx, &m, c, until, "x", nil) != nil {
		t.Error("a Finishing ctx without a Finisher")
	}
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = cluster.Close() })
	f := &finisher{errs: make(chan error, 1)}
	if Finishing(ctx, &m, cluster, until, "x", f) != nil {
		t.Error("a Finishing ctx for a Cluster client, which has no views")
	}
	if _, kept := s.On([]string{"k"}).RunUntil(ctx, cluster, &m, until, "x", f); kept {
		t.Error("RunUntil kept a call on a Cluster client, which has no views")
	}
}

// counter is a go-redis hook that counts the commands it sees, as a
// user's tracing or metrics hook would.
type counter struct{ n atomic.Int64 }

func (h *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A call kept by a view passes the hooks the client had when it was
// attached (go-redis's views have none of their own), once; attaching the
// same client again adds no second keeper.
func TestAKeptCallPassesTheClientsHooks(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: hung.Server(t)})
	t.Cleanup(func() { _ = c.Close() })
	hook := &counter{}
	c.AddHook(hook)
	var m, again Mode
	Attach(&m, c)
	Attach(&again, c)
	s := NewScript(&Library{Name: "fairlock_test", Code: "#!lua name=fairlock_test\n"}, "f", "return 1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if view, _ := m.keep(ctx, c); view == nil {
		t.Fatal("no view for a deadline sooner than go-redis's bound")
	}
	err := s.On([]string{"k"}).Run(ctx, c, &m).Err()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a kept call on a hung server: %v", err)
	}
	if n := hook.n.Load(); n != 1 {
		t.Errorf("the client's hook saw %d commands, want the one call", n)
	}
	n := 0
	keepers.Range(func(k, _ any) bool {
		if k.(weak.Pointer[redis.Client]).Value() == c {
			n++
		}
		return true
	})
	if n != 1 {
		t.Errorf("%d keepers recorded for the client, want 1", n)
	}
}

// timeoutErr is a dial's timeout.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// A call on a view whose dial times out long before its deadline (Redis
// stopped for a moment, a lost SYN) returns that error as it comes, as on
// any client: the call was never sent, and a wait tries again within its
// deadline rather than sit out the rest of it.
func TestADialTimeoutBeforeTheDeadlineIsAnError(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		time.Sleep(20 * time.Millisecond)
		return nil, &net.OpError{Op: "dial", Net: network, Err: timeoutErr{}}
	}})
	t.Cleanup(func() { _ = c.Close() })
	var m Mode
	Attach(&m, c)
	s := NewScript(&Library{Name: "fairlock_test", Code: "#!lua name=fairlock_test\n"}, "f", "return 1")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	err := s.On([]string{"k"}).Run(ctx, c, &m).Err()
	took := time.Since(start)
	var a *Abandoned
	if err == nil || errors.As(err, &a) {
		t.Fatalf("a dial that timed out: %v; want its own error", err)
	}
	// go-redis tries the dial 4 times with its backoffs (about 2 s here):
	// well before the deadline.
	if took > 4*time.Second {
		t.Errorf("returned after %v, want as soon as go-redis gave up dialing", took)
	}
	t.Logf("dial timeouts, a 5 s deadline: returned after %v: %v", took.Round(time.Millisecond), err)
}
