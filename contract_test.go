package fairlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/multi"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/redis/go-redis/v9"
)

// heldWork is one primitive's context-returning acquisition, seen as the
// contract of a hold's context (the package doc) sees it: take returns the
// context to work in, held asks another process whether it could take the
// same thing now, and done is the holder's Unlock (Release, Resign).
type heldWork struct {
	take func(ctx context.Context) (context.Context, error)
	held func(ctx context.Context) bool
	done func(hctx context.Context) error
}

// One contract for every primitive: the end of the ctx an acquisition was
// given ends the context it handed back (with ctx's cause), so the work
// stops, but not the hold: nobody else can take it until the holder's
// Unlock, which succeeds, and after which the context's hold is ended as
// released.
func TestEveryPrimitiveKeepsTheHoldsContextContract(t *testing.T) {
	redistest.NoLeaks(t)
	mr, clk, c := redistest.Mini(t)
	oc := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = oc.Close() })
	mine, other := redistest.OwnerOn(c, clk, nil), redistest.OwnerOn(oc, clk, nil)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	bg := context.Background()
	tryLock := func(m interface {
		TryLock(context.Context, time.Duration, time.Duration) (bool, error)
	}) func(context.Context) bool {
		return func(ctx context.Context) bool {
			ok, err := m.TryLock(ctx, 0, 0)
			must(err)
			if ok {
				must(m.(interface{ Unlock(context.Context) error }).Unlock(ctx))
			}
			return !ok
		}
	}
	cases := map[string]func() heldWork{
		"fair.Mutex": func() heldWork {
			m, err := fair.New(mine, "c-fair")
			must(err)
			o, err := fair.New(other, "c-fair")
			must(err)
			return heldWork{m.LockContext, tryLock(o), m.Unlock}
		},
		"reentrant.Mutex": func() heldWork {
			m, err := reentrant.New(mine, "c-plain")
			must(err)
			o, err := reentrant.New(other, "c-plain")
			must(err)
			return heldWork{m.LockContext, tryLock(o), m.Unlock}
		},
		"fair.RWMutex (write)": func() heldWork {
			m, err := fair.NewRWMutex(mine, "c-rw")
			must(err)
			o, err := fair.NewRWMutex(other, "c-rw")
			must(err)
			return heldWork{m.LockContext, func(ctx context.Context) bool {
				ok, err := o.TryRLock(ctx, 0, 0)
				must(err)
				if ok {
					must(o.RUnlock(ctx))
				}
				return !ok
			}, m.Unlock}
		},
		"fair.RWMutex (read)": func() heldWork {
			m, err := fair.NewRWMutex(mine, "c-rw")
			must(err)
			o, err := fair.NewRWMutex(other, "c-rw")
			must(err)
			return heldWork{m.RLockContext, tryLock(o), m.RUnlock}
		},
		"fair.Election": func() heldWork {
			e, err := fair.NewElection(mine, "c-lead")
			must(err)
			o, err := fair.NewElection(other, "c-lead")
			must(err)
			return heldWork{
				func(ctx context.Context) (context.Context, error) { return e.Campaign(ctx, "mine") },
				func(ctx context.Context) bool {
					l, err := o.Leader(ctx)
					return err == nil && l.Value == "mine"
				},
				e.Resign,
			}
		},
		"multi.Lock": func() heldWork {
			a, err := fair.New(mine, "c-m1")
			must(err)
			b, err := reentrant.New(mine, "c-m2")
			must(err)
			l, err := multi.New(a, b)
			must(err)
			o, err := reentrant.New(other, "c-m2")
			must(err)
			return heldWork{l.LockContext, tryLock(o), l.Unlock}
		},
	}
	for name, make := range cases {
		t.Run(name, func(t *testing.T) {
			w := make()
			ctx, cancel := context.WithCancel(bg)
			hctx, err := w.take(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !w.held(bg) {
				t.Fatal("not held after the acquisition returned")
			}
			cancel()
			if cause := context.Cause(hctx); !errors.Is(cause, context.Canceled) {
				t.Fatalf("the returned context after its ctx ended: cause %v, want ctx's (context.Canceled)", cause)
			}
			if !w.held(bg) {
				t.Fatal("the end of the acquisition's ctx ended the hold: only Unlock, loss or Close may")
			}
			if err := w.done(hctx); err != nil {
				t.Fatalf("Unlock with the returned context, after its ctx ended: %v", err)
			}
			if w.held(bg) {
				t.Fatal("still held after Unlock")
			}
			if err := w.done(hctx); !errors.Is(err, fairlock.ErrNotHeld) {
				t.Fatalf("a second Unlock = %v, want ErrNotHeld", err)
			}
		})
	}
}

// Do keeps the same contract: fn's context ends when Do's ctx does, and
// the hold lasts until fn returns, so nobody else starts while fn still
// runs; then Do releases it.
func TestDoReleasesWhenFnReturnsNotWhenCtxEnds(t *testing.T) {
	redistest.NoLeaks(t)
	mr, clk, c := redistest.Mini(t)
	oc := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = oc.Close() })
	mine, other := redistest.OwnerOn(c, clk, nil), redistest.OwnerOn(oc, clk, nil)
	bg := context.Background()
	m, _ := fair.New(mine, "c-do")
	o, _ := fair.New(other, "c-do")
	s, _ := fair.NewSemaphore(mine, "c-sem", 1)
	os, _ := fair.NewSemaphore(other, "c-sem", 1)
	dos := map[string]struct {
		do   func(ctx context.Context, fn func(context.Context) error) error
		free func() bool
	}{
		"fair.Mutex.Do": {m.Do, func() bool {
			ok, err := o.TryLock(bg, 0, 0)
			if ok {
				_ = o.Unlock(bg)
			}
			return ok && err == nil
		}},
		"fair.Semaphore.Do": {func(ctx context.Context, fn func(context.Context) error) error { return s.Do(ctx, 1, fn) }, func() bool {
			p, err := os.TryAcquire(bg, 1, 0, 0)
			if p != nil {
				_ = p.Release(bg)
			}
			return err == nil
		}},
	}
	for name, d := range dos {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(bg)
			err := d.do(ctx, func(fctx context.Context) error {
				cancel()
				<-fctx.Done()
				if cause := context.Cause(fctx); !errors.Is(cause, context.Canceled) {
					t.Errorf("fn's context ended with %v, want Do's ctx's cause", cause)
				}
				if d.free() {
					t.Error("another process took the lock while fn still ran, after Do's ctx ended")
				}
				return nil
			})
			if err != nil {
				t.Fatalf("Do = %v", err)
			}
			if !d.free() {
				t.Fatal("the lock is still held after Do returned")
			}
		})
	}
}
