package multi_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/redistest/hung"
	"github.com/fairlock/fairlock/multi"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/redis/go-redis/v9"
)

func fairOn(t *testing.T, c redis.UniversalClient, name string, opts ...fair.MutexOption) *fair.Mutex {
	t.Helper()
	m, err := fair.New(redistest.Owner(c), name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func reentrantOn(t *testing.T, c redis.UniversalClient, name string) *reentrant.Mutex {
	t.Helper()
	m, err := reentrant.New(redistest.Owner(c), name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestNewRefusesBadMembers(t *testing.T) {
	c := redistest.Real(t)
	name := redistest.Name(t)
	var nilFair *fair.Mutex
	for what, members := range map[string][]multi.Locker{
		"no members":          nil,
		"a nil member":        {fairOn(t, c, name), nil},
		"a nil *fair.Mutex":   {nilFair},
		"a zero fair.Mutex":   {&fair.Mutex{}},
		"a zero reentrant":    {fairOn(t, c, name), &reentrant.Mutex{}},
		"the same lock twice": {fairOn(t, c, name), fairOn(t, c, name)},
	} {
		if _, err := multi.New(members...); !errors.Is(err, fairlock.ErrInvalidArgument) {
			t.Errorf("%s: New = %v, want ErrInvalidArgument", what, err)
		}
	}
	_, err := multi.New(fairOn(t, c, name), fairOn(t, c, name))
	if want := fmt.Sprintf("two members are the fair lock %q", name); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("New with one lock twice = %v; want it to say %q", err, want)
	}
	// A fair and a reentrant lock of one name are different locks.
	if _, err := multi.New(fairOn(t, c, name), reentrantOn(t, c, name)); err != nil {
		t.Errorf("a fair and a reentrant lock of one name: %v", err)
	}
}

func TestTakesMembersInOneGlobalOrder(t *testing.T) {
	c := redistest.Real(t)
	base := redistest.Name(t)
	l, err := multi.New(fairOn(t, c, base+"-c"), reentrantOn(t, c, base+"-a"), fairOn(t, c, base+"-b"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{base + "-b", base + "-c", base + "-a"} // fair before reentrant, then by name
	if got := l.Names(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
}

func TestAllOrNothing(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Real(t)
	ctx := context.Background()
	base := redistest.Name(t)
	a, b := fairOn(t, c, base+"-a"), fairOn(t, c, base+"-b")
	other := fairOn(t, c, base+"-b")
	if err := other.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := multi.New(b, a)
	if err != nil {
		t.Fatal(err)
	}
	for _, wait := range []time.Duration{0, 50 * time.Millisecond} {
		ok, err := l.TryLock(ctx, wait, 0)
		if ok || err != nil {
			t.Fatalf("TryLock(wait %v) with a member held elsewhere = %v, %v; want false, nil", wait, ok, err)
		}
		if held, _ := a.IsLocked(ctx); held {
			t.Fatalf("TryLock(wait %v) failed but left the other member held", wait)
		}
	}
	if err := l.Unlock(ctx); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("Unlock of a Lock not held = %v, want ErrNotHeld", err)
	}
	// Lock waits for the member held elsewhere, holding the first meanwhile.
	done := make(chan error, 1)
	go func() { done <- l.Lock(ctx) }()
	time.Sleep(50 * time.Millisecond)
	if held, _ := a.IsLocked(ctx); !held {
		t.Fatal("Lock waiting for its second member does not hold its first")
	}
	if err := other.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i, tok := range l.Tokens() {
		if tok == 0 {
			t.Errorf("member %s has no token while held", l.Names()[i])
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(l.HoldContext()); !errors.Is(cause, fairlock.ErrReleased) {
		t.Fatalf("HoldContext's cause after Unlock = %v, want ErrReleased", cause)
	}
	for _, m := range []*fair.Mutex{a, b} {
		if held, _ := m.IsLocked(ctx); held {
			t.Fatalf("%s still held after Unlock", m.Name())
		}
	}
}

// Lock whose ctx ends while it waits for a later member gives back the
// members it took.
func TestCancelledLockGivesBackWhatItTook(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Real(t)
	ctx := context.Background()
	base := redistest.Name(t)
	a, b := reentrantOn(t, c, base+"-a"), reentrantOn(t, c, base+"-b")
	other := reentrantOn(t, c, base+"-b")
	if err := other.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	l, _ := multi.New(a, b)
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := l.Lock(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock = %v, want the ctx's error", err)
	}
	if held, _ := a.IsLocked(ctx); held {
		t.Fatal("the first member stayed held after Lock gave up")
	}
	_ = other.Unlock(ctx)
}

// Two Locks over the same members, given in opposite orders, taking turns
// many times from several goroutines: no deadlock, and never both held.
func TestOverlappingLocksNeverDeadlock(t *testing.T) {
	redistest.NoLeaks(t)
	for _, d := range redistest.Deployments {
		t.Run(string(d), func(t *testing.T) {
			clients := redistest.Clients(t, d, 4)
			base := redistest.Name(t)
			var inside atomic.Int32
			var wg sync.WaitGroup
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for i := range 4 {
				c := clients[i]
				names := []string{base + "-x", base + "-y", base + "-z"}
				if i%2 == 1 {
					names = []string{names[2], names[0], names[1]}
				}
				l, err := multi.New(fairOn(t, c, names[0]), fairOn(t, c, names[1]), fairOn(t, c, names[2]))
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 25 {
						if err := l.Lock(ctx); err != nil {
							t.Errorf("Lock: %v (a deadlock would end here when ctx does)", err)
							return
						}
						if inside.Add(1) != 1 {
							t.Error("two Locks over the same members held at once")
						}
						inside.Add(-1)
						if err := l.Unlock(context.Background()); err != nil {
							t.Errorf("Unlock: %v", err)
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// A member's hold that is lost ends the whole Lock: Lost closes, the hold
// context's cause is ErrLockLost, and Unlock reports it.
func TestAMemberLostLosesTheLock(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Real(t)
	ctx := context.Background()
	base := redistest.Name(t)
	a := fairOn(t, c, base+"-a", fairlock.WithLease(300*time.Millisecond))
	b := fairOn(t, c, base+"-b", fairlock.WithLease(300*time.Millisecond))
	l, _ := multi.New(a, b)
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	// Someone else ends b's hold; b's watchdog finds it gone at its next
	// renewal (every 100 ms).
	if _, err := fairOn(t, c, base+"-b").ForceUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost() did not close after a member's hold was lost")
	}
	if cause := context.Cause(l.HoldContext()); !errors.Is(cause, fairlock.ErrLockLost) {
		t.Fatalf("HoldContext's cause = %v, want ErrLockLost", cause)
	}
	if err := l.Lock(l.HoldContext()); !errors.Is(err, fairlock.ErrLockLost) {
		t.Fatalf("a re-entry of a hold a member lost = %v, want ErrLockLost", err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, fairlock.ErrLockLost) {
		t.Fatalf("Unlock after a member was lost = %v, want one wrapping ErrLockLost", err)
	}
	if held, _ := a.IsLocked(ctx); held {
		t.Fatal("the member still held after Unlock")
	}
	if err := l.Lock(ctx); err != nil {
		t.Fatalf("Lock after the lost hold's Unlock: %v", err)
	}
	_ = l.Unlock(ctx)
}

// Like its members, a Lock taken again while held counts it, and is held
// until as many Unlocks.
func TestReentry(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Real(t)
	ctx := context.Background()
	base := redistest.Name(t)
	a, b := fairOn(t, c, base+"-a"), reentrantOn(t, c, base+"-b")
	l, _ := multi.New(a, b)
	hctx, err := l.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Lock(hctx); err != nil { // a re-entry: the hold's context
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := a.HoldCount(ctx); n != 1 {
		t.Fatalf("after one of two Unlocks the member's count is %d, want 1", n)
	}
	if err := l.HoldContext().Err(); err != nil {
		t.Fatalf("the hold ended after one of two Unlocks: %v", context.Cause(l.HoldContext()))
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if held, _ := b.IsLocked(ctx); held {
		t.Fatal("a member still held after the last Unlock")
	}
	if err := l.Unlock(ctx); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("a third Unlock = %v, want ErrNotHeld", err)
	}
}

// Goroutines sharing a multi.Lock exclude each other: the second one's Lock
// waits for the first hold's Unlock.
func TestGoroutinesSharingALockExcludeEachOther(t *testing.T) {
	redistest.NoLeaks(t)
	c := redistest.Real(t)
	ctx := context.Background()
	base := redistest.Name(t)
	l, _ := multi.New(fairOn(t, c, base+"-a"), reentrantOn(t, c, base+"-b"))
	var inside, overlaps atomic.Int32
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				err := l.Do(ctx, func(ctx context.Context) error {
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					time.Sleep(100 * time.Microsecond)
					inside.Add(-1)
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d times two goroutines sharing a multi.Lock were inside it at once", n)
	}
}

// A Lock whose ctx's deadline passes while a member's server hangs rolls
// back the members it took; that roll-back may finish after Lock returned
// (the failed member's own clean-up used the deadline's grace), within the
// members' cleanup timeout, and Close of their owner waits for it.
func TestRollBackAfterADeadlineFinishesWithinTheCleanupTimeout(t *testing.T) {
	live := redistest.Real(t)
	owner, err := redistest.NewOwner(live, nil)
	if err != nil {
		t.Fatal(err)
	}
	hung := redis.NewClient(&redis.Options{Addr: hung.Server(t)})
	t.Cleanup(func() { _ = hung.Close() })
	base := redistest.Name(t)
	first, err := fair.New(owner, base+"-a")
	if err != nil {
		t.Fatal(err)
	}
	l, err := multi.New(first, fairOn(t, hung, base+"-b")) // taken in that order
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := l.Lock(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with a member's server hung: %v, want the deadline's error", err)
	}
	returned := time.Now()
	other := fairOn(t, live, base+"-a")
	var free time.Duration
	for {
		ok, err := other.TryLock(context.Background(), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			free = time.Since(returned)
			_ = other.Unlock(context.Background())
			break
		}
		if time.Since(returned) > core.DefaultCleanupTimeout {
			t.Fatalf("the member Lock took was still held %v after Lock returned", core.DefaultCleanupTimeout)
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("the member taken first was free %v after Lock returned", free.Round(time.Millisecond))

	// Again; Close of the member's owner waits for the roll-back.
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_ = l.Lock(ctx)
	cctx, ccancel := context.WithTimeout(context.Background(), core.DefaultCleanupTimeout)
	defer ccancel()
	if err := owner.Close(cctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if ok, err := other.TryLock(context.Background(), 0, 0); !ok || err != nil {
		t.Fatalf("the member was held after its owner's Close returned: %v, %v", ok, err)
	}
	_ = other.Unlock(context.Background())
}
