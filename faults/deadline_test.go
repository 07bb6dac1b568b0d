package faults

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/redis/go-redis/v9"
)

// Scenario: every call keeps its deadline while Redis is stopped. The
// clean-up a failed call owes (undo a grant it may have been given, leave
// the queue, release) goes on in the background, bounded by the cleanup
// timeout, instead of inside the caller's call. Before, a Lock with a 200 ms
// deadline returned after 3.6 s. docs/reliability.md quotes these figures.

// grace bounds how much later than its deadline a call may return: the
// library's own grace (50 ms) plus a slow machine's scheduling.
const grace = 400 * time.Millisecond

func TestCallsKeepTheirDeadlinesWhileRedisIsStopped(t *testing.T) {
	for _, lock := range []string{"fair", "reentrant"} {
		t.Run(lock, func(t *testing.T) {
			srv := ownServer(t)
			name := lockName(t)
			holder := newHandle(t, lock, client(t, srv.Addr), name, 10*time.Second)
			waiter := newHandle(t, lock, client(t, srv.Addr), name, 10*time.Second)
			deferred := newHandle(t, lock, client(t, srv.Addr), lockName(t), 10*time.Second)
			for _, h := range []handle{holder, deferred} {
				if err := h.Lock(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			srv.Stop()
			for _, deadline := range []time.Duration{200 * time.Millisecond, 2 * time.Second} {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				start := time.Now()
				err := waiter.Lock(ctx)
				took := time.Since(start)
				cancel()
				t.Logf("%s Lock with a %v deadline, Redis stopped: returned after %v: %v", lock, deadline, took.Round(time.Millisecond), err)
				if err == nil {
					t.Fatal("Lock succeeded with Redis stopped")
				}
				if took > deadline+grace {
					t.Errorf("Lock with a %v deadline returned after %v", deadline, took)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			start := time.Now()
			err := holder.Unlock(ctx)
			took := time.Since(start)
			cancel()
			t.Logf("%s Unlock with a 200ms deadline, Redis stopped: returned after %v: %v", lock, took.Round(time.Millisecond), err)
			if !errors.Is(err, fairlock.ErrPending) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Unlock with Redis stopped = %v, want ErrPending and the deadline", err)
			}
			if took > 200*time.Millisecond+grace {
				t.Errorf("Unlock with a 200ms deadline returned after %v", took)
			}
			// Under defer with a context that has already ended, as when a
			// request is cancelled: it returns within the grace.
			ended, cancel := context.WithCancel(context.Background())
			cancel()
			start = time.Now()
			err = deferred.Unlock(ended)
			took = time.Since(start)
			t.Logf("%s Unlock with an ended context, Redis stopped: returned after %v: %v", lock, took.Round(time.Millisecond), err)
			if !errors.Is(err, fairlock.ErrPending) || took > grace {
				t.Errorf("Unlock with an ended context = %v after %v, want ErrPending within the grace", err, took)
			}
		})
	}
}

// Scenario: a queued waiter rides out a short outage. The holder's fixed
// 600 ms lease runs out while Redis is stopped for 4 s, so the waiter (the
// head, which knows the expiry) tries then, and fails; it tries again with
// a jittered backoff, and once Redis is back (empty: its place went with
// the data, so it re-joins), takes the lock. When its ctx ends during an
// outage, its error names the lock, says what it was doing, and wraps both
// the outage's cause and the ctx's error.
func TestAQueuedWaiterRidesOutAShortOutage(t *testing.T) {
	srv := ownServer(t)
	name := lockName(t)
	holder, err := fair.New(redistest.Owner(client(t, srv.Addr)), name)
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := fair.New(redistest.Owner(client(t, srv.Addr)), name, fairlock.WithWaitTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	direct := client(t, srv.Addr)
	if ok, err := holder.TryLock(ctx, 0, 600*time.Millisecond); !ok || err != nil {
		t.Fatal(ok, err)
	}
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(ctx) }()
	// Queued in Redis, and asleep in its wait: it has read its join's reply.
	// Redis stopped between the join and its reply fails the Lock at once
	// (a first call is not ridden out), which this scenario is not about.
	eventually(t, 5*time.Second, "the waiter is queued", func() bool {
		return len(labelsOf(t, direct, name)) == 1 && redistest.Asleep() == 1
	})
	rideOutage(t, srv, got, "fair")
	_ = waiter.Unlock(ctx)

	// An outage longer than the waiter's place lasts: the waiter goes on
	// trying until its ctx ends, and its error says why it waited so long.
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	go func() { got <- waiter.Lock(dctx) }()
	// Queued in Redis, and asleep in its wait: it has read its join's reply.
	// Redis stopped between the join and its reply fails the Lock at once
	// (a first call is not ridden out), which this scenario is not about.
	eventually(t, 5*time.Second, "the waiter is queued", func() bool {
		return len(labelsOf(t, direct, name)) == 1 && redistest.Asleep() == 1
	})
	srv.Stop()
	select {
	case err := <-got:
		t.Logf("a 5 s Lock, Redis stopped for longer than the waiter's 3 s wait timeout: %v", err)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `fair lock "`+name+`": waiting in the queue, Redis out of reach for`) {
			t.Fatalf("the waiter's error = %v; want it to name the lock, say it waited in the queue with Redis out of reach, and wrap the deadline", err)
		}
		var netErr net.Error
		if !errors.As(err, &netErr) {
			t.Fatalf("the error does not wrap the outage's cause: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter's Lock did not return by its deadline")
	}
}

// A reentrant waiter holds no place in Redis, but rides an outage out the
// same way. The holder's fixed 600 ms lease runs out while Redis is stopped
// for 4 s, so the waiter's timer makes it try then, and fail; it tries
// again with a backoff, and once Redis is back (empty), takes the lock.
func TestAReentrantWaiterRidesOutAShortOutage(t *testing.T) {
	srv := ownServer(t)
	name := lockName(t)
	holder := newHandle(t, "reentrant", client(t, srv.Addr), name, 10*time.Second)
	waiter := newHandle(t, "reentrant", client(t, srv.Addr), name, 10*time.Second)
	ctx := context.Background()
	if ok, err := holder.TryLock(ctx, 0, 600*time.Millisecond); !ok || err != nil {
		t.Fatal(ok, err)
	}
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(ctx) }()
	eventually(t, 5*time.Second, "the waiter sleeps", func() bool { return redistest.Asleep() == 1 }) // its first try answered
	rideOutage(t, srv, got, "reentrant")
	_ = waiter.Unlock(ctx)
}

// rideOutage stops srv for 4 s, during which the waiter's Lock (its
// outcome on got) tries and fails and must not return; then restarts it,
// empty, and checks that the Lock returns holding the lock.
func rideOutage(t *testing.T, srv *Server, got <-chan error, lock string) {
	t.Helper()
	srv.Stop()
	time.Sleep(4 * time.Second)
	select {
	case err := <-got:
		t.Fatalf("the %s waiter's Lock returned during a 4 s outage: %v", lock, err)
	default:
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the %s waiter's Lock after the outage: %v", lock, err)
		}
		t.Logf("after a 4 s outage, the %s waiter held the lock %v after the restart", lock, time.Since(restarted).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatalf("the %s waiter did not take the lock within 10 s of the outage's end", lock)
	}
}

// A semaphore's first waiter (the gate's holder, waiting for permits)
// rides an outage out the same way: the holder's fixed 600 ms lease runs
// out while Redis is stopped, the waiter tries then and fails, and takes
// the permit once Redis is back.
func TestASemaphoreWaiterRidesOutAShortOutage(t *testing.T) {
	srv := ownServer(t)
	name := lockName(t)
	ctx := context.Background()
	s, err := fair.NewSemaphore(redistest.Owner(client(t, srv.Addr)), name, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx, 1, 0, 600*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var p *fair.Permit
	go func() {
		var err error
		p, err = s.Acquire(ctx, 1)
		got <- err
	}()
	eventually(t, 5*time.Second, "the waiter waits", func() bool { // in Redis, and asleep in its wait
		st, err := fair.InspectSemaphore(ctx, client(t, srv.Addr), name)
		return err == nil && len(st.Queue) == 1 && redistest.Asleep() == 1
	})
	rideOutage(t, srv, got, "semaphore")
	_ = p.Release(ctx)
}

// Scenario: a process shuts down while Redis hangs (a partition TCP does
// not notice), with go-redis's default options, which do not end a call
// at its ctx's deadline. Close keeps its deadline all the same; the hold
// ends locally at once; the release goes on in the background and frees
// the lock once Redis answers again.
func TestCloseKeepsItsDeadlineWhileRedisHangs(t *testing.T) {
	srv := ownServer(t)
	proxy, err := NewProxy(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	owner, err := fairlock.NewOwner(client(t, proxy.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	name := lockName(t)
	m, _ := fair.New(owner, name)
	hctx, err := m.LockContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	proxy.Hold()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	start := time.Now()
	err = owner.Close(ctx)
	took := time.Since(start)
	cancel()
	t.Logf("Close with a 300ms deadline, Redis hung: returned after %v: %v", took.Round(time.Millisecond), err)
	if !errors.Is(err, context.DeadlineExceeded) || took > 300*time.Millisecond+grace {
		t.Errorf("Close with Redis hung = %v after %v; want its deadline", err, took)
	}
	if cause := context.Cause(hctx); !errors.Is(cause, fairlock.ErrClosed) {
		t.Errorf("the hold's context ended with %v, want ErrClosed", cause)
	}
	proxy.Release()
	direct := client(t, srv.Addr)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := fair.Inspect(context.Background(), direct, name)
		if err == nil && st.Holder == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lock is still held 10 s after Redis answered again: %+v, %v", st.Holder, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := owner.Close(ctx); err != nil {
		t.Errorf("a second Close, once Redis answered = %v, want nil", err)
	}
}

// Scenario: a go-redis client with its default options (no
// ContextTimeoutEnabled), as the README's first snippet makes it, and a
// server that hangs (a proxy that forwards nothing, keeping connections
// open). Without a bound of the library's own, every call took go-redis's
// read timeout and retries: 5.0 s for a 200 ms deadline. Each call that
// takes a ctx now returns at its deadline; an acquisition's call goes on in
// the background, and what it may have taken is undone once Redis answers.
func TestCallsKeepTheirDeadlinesWithDefaultOptionsWhileRedisHangs(t *testing.T) {
	srv := ownServer(t)
	proxy, err := NewProxy(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	c := client(t, proxy.Addr()) // go-redis's defaults
	owner, err := fairlock.NewOwner(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = owner.Close(ctx)
	})
	name := lockName(t)
	m, _ := fair.New(owner, name)
	r, _ := reentrant.New(owner, name)
	sem, _ := fair.NewSemaphore(owner, name, 2)
	rw, _ := fair.NewRWMutex(owner, name)
	// Warm up: each learns the server's script mode, the pool has conns.
	ctx := context.Background()
	if ok, err := m.IsLocked(ctx); ok || err != nil {
		t.Fatal(ok, err)
	}
	proxy.Hold()
	const deadline = 200 * time.Millisecond
	calls := map[string]func(context.Context) error{
		"fair Lock": m.Lock,
		"fair TryLock": func(ctx context.Context) error {
			_, err := m.TryLock(ctx, time.Second, 0)
			return err
		},
		"reentrant Lock": r.Lock,
		"semaphore Acquire": func(ctx context.Context) error {
			_, err := sem.Acquire(ctx, 1)
			return err
		},
		"RWMutex RLock": rw.RLock,
		"IsLocked": func(ctx context.Context) error {
			_, err := m.IsLocked(ctx)
			return err
		},
		"Inspect": func(ctx context.Context) error {
			_, err := fair.Inspect(ctx, c, name)
			return err
		},
	}
	for what, call := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		start := time.Now()
		err := call(ctx)
		took := time.Since(start)
		cancel()
		t.Logf("%s with a %v deadline, default go-redis options, Redis hung: returned after %v: %v", what, deadline, took.Round(time.Millisecond), err)
		if !errors.Is(err, context.DeadlineExceeded) || took > deadline+grace {
			t.Errorf("%s = %v after %v; want the deadline, within %v", what, err, took, deadline+grace)
		}
	}
	// Once Redis answers again, what the abandoned acquisitions may have
	// taken is given back: the lock is free and nobody is queued.
	proxy.Release()
	direct := client(t, srv.Addr)
	released := time.Now()
	eventually(t, 15*time.Second, "every lock free and nobody queued", func() bool {
		bg := context.Background()
		st, err := fair.Inspect(bg, direct, name)
		sst, serr := fair.InspectSemaphore(bg, direct, name)
		rst, rerr := fair.InspectRWMutex(bg, direct, name)
		held, err2 := r.IsLocked(bg)
		return err == nil && st.Holder == nil && len(st.Queue) == 0 &&
			serr == nil && len(sst.Holders) == 0 && len(sst.Queue) == 0 &&
			rerr == nil && len(rst.Holders) == 0 && len(rst.Queue) == 0 && err2 == nil && !held
	})
	t.Logf("every lock was free and nobody queued %v after Redis answered again", time.Since(released).Round(time.Millisecond))
	if err := m.Lock(ctx); err != nil {
		t.Fatalf("Lock once Redis answers again: %v", err)
	}
	_ = m.Unlock(ctx)
}

// A Lock whose deadline passes while Redis is paused (SIGSTOP: connections
// stay open, nothing answers) says what it knows, no more: that its call
// had no answer, or when Redis last answered it; never that Redis was
// reachable.
func TestADeadlineWhileRedisIsPausedSaysWhatIsKnown(t *testing.T) {
	for _, lock := range []string{"fair", "reentrant"} {
		t.Run(lock, func(t *testing.T) {
			srv := ownServer(t)
			name := lockName(t)
			holder := newHandle(t, lock, client(t, srv.Addr), name, 10*time.Second)
			waiter := newHandle(t, lock, client(t, srv.Addr), name, 10*time.Second)
			if err := holder.Lock(context.Background()); err != nil {
				t.Fatal(err)
			}
			lockWithin := func(d time.Duration) error {
				ctx, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				err := waiter.Lock(ctx)
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Lock with a %v deadline = %v, want its deadline's error", d, err)
				}
				if strings.Contains(err.Error(), "reachable") {
					t.Errorf("Lock says Redis was reachable while it was paused: %v", err)
				}
				return err
			}

			// Paused before Lock: its first call has no answer.
			srv.Pause()
			err := lockWithin(300 * time.Millisecond)
			srv.Resume()
			t.Logf("%s, Redis paused before Lock: %v", lock, err)
			if !strings.Contains(err.Error(), "no answer from Redis to a call sent") {
				t.Errorf("Lock = %v, want it to say its call had no answer", err)
			}

			// Paused while it waits: it says when Redis last answered.
			time.AfterFunc(200*time.Millisecond, srv.Pause)
			err = lockWithin(600 * time.Millisecond)
			srv.Resume()
			t.Logf("%s, Redis paused 200 ms into the wait: %v", lock, err)
			if !strings.Contains(err.Error(), "Redis last answered") {
				t.Errorf("Lock = %v, want it to say when Redis last answered", err)
			}
		})
	}
}

// Scenario: a request's Unlock, on its ctx with a deadline, while Redis
// hangs (go-redis's default options). The release runs in the caller's
// goroutine, on a view of the client that ends it at the deadline and
// its grace; Redis has not answered, so Unlock returns ErrPending then,
// and the release is made again in the background. Once Redis answers,
// that release frees the lock (it is not left to its lease), and Close,
// which waits for it, returns.
func TestUnlockKeepsItsDeadlineWhileRedisHangsAndReleasesLater(t *testing.T) {
	for _, lock := range []string{"fair", "reentrant"} {
		t.Run(lock, func(t *testing.T) {
			srv := ownServer(t)
			proxy, c := proxied(t, srv, redis.Options{}) // go-redis's defaults
			owner, err := fairlock.NewOwner(c)
			if err != nil {
				t.Fatal(err)
			}
			name := lockName(t)
			var m fairlock.MutexHandle
			if lock == "fair" {
				m, err = fair.New(owner, name, fairlock.WithLease(time.Minute))
			} else {
				m, err = reentrant.New(owner, name, fairlock.WithLease(time.Minute))
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Lock(context.Background()); err != nil {
				t.Fatal(err)
			}
			proxy.Hold()
			const deadline = 200 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			start := time.Now()
			err = m.Unlock(ctx)
			took := time.Since(start)
			cancel()
			t.Logf("%s Unlock with a %v deadline, Redis hung: returned after %v: %v", lock, deadline, took.Round(time.Millisecond), err)
			if !errors.Is(err, fairlock.ErrPending) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Unlock with Redis hung = %v, want ErrPending and the deadline", err)
			}
			if took > deadline+grace {
				t.Errorf("Unlock with a %v deadline returned after %v", deadline, took)
			}
			// The lease is a minute: only the release made again can
			// free the lock within the wait below.
			proxy.Release()
			direct := client(t, srv.Addr)
			released := time.Now()
			probe := newHandle(t, lock, direct, name, time.Second)
			eventually(t, 15*time.Second, "the lock free once Redis answers", func() bool {
				held, err := probe.IsLocked(context.Background())
				return err == nil && !held
			})
			t.Logf("%s: the lock was free %v after Redis answered again", lock, time.Since(released).Round(time.Millisecond))
			cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer ccancel()
			if err := owner.Close(cctx); err != nil {
				t.Errorf("Close once Redis answered = %v, want nil", err)
			}
		})
	}
}
