package fairlocktest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/fairlocktest"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A hold is lost once the server's clock passes its lease: the test moves
// the clock instead of waiting the lease out.
func Example() {
	s, err := fairlocktest.New()
	if err != nil {
		panic(err)
	}
	defer s.Close()
	ctx := context.Background()

	m, _ := fair.New(s.Owner, "jobs", fairlock.WithLease(300*time.Millisecond))
	if err := m.Lock(ctx); err != nil {
		panic(err)
	}
	s.Advance(time.Second) // the lease runs out in Redis
	<-m.Lost()             // at the watchdog's next renewal, within 100 ms
	fmt.Println(errors.Is(context.Cause(m.HoldContext()), fairlock.ErrLockLost))
	fmt.Println(m.Unlock(ctx))
	// Output:
	// true
	// fairlock: fair lock "jobs": lock lost
}

// The handles under test use the server's owner; a second handle on the
// same name does not get the lock while the first holds it.
func TestAHandleOnTheServer(t *testing.T) {
	s := fairlocktest.Start(t) // a server, s.Client and s.Owner, closed when t ends
	ctx := context.Background()
	m, err := fair.New(s.Owner, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	other, _ := fair.New(s.Owner, "jobs")
	if ok, err := other.TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("a second handle took a held lock: %v, %v", ok, err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// The server's clock stands still until the test moves it, and key TTLs run
// out with it.
func TestTheClockMovesOnlyWhenTold(t *testing.T) {
	s := fairlocktest.Start(t)
	ctx := context.Background()
	start := s.Now()
	if err := s.Client.Set(ctx, "k", "v", time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	got, err := s.Client.Time(ctx).Result()
	if err != nil || !got.Equal(start) {
		t.Fatalf("TIME = %v, %v; want the start, %v", got, err, start)
	}
	s.Advance(999 * time.Millisecond)
	if n, _ := s.Client.Exists(ctx, "k").Result(); n != 1 {
		t.Fatal("the key expired before its TTL ran out")
	}
	s.Advance(time.Millisecond)
	if n, _ := s.Client.Exists(ctx, "k").Result(); n != 0 {
		t.Fatal("the key outlived its TTL")
	}
	if got, _ := s.Client.Time(ctx).Result(); !got.Equal(start.Add(time.Second)) {
		t.Fatalf("TIME = %v after one second, want %v", got, start.Add(time.Second))
	}
}

// A waiter's deadline in the queue does not run down while the clock
// stands still, and the lock is handed to it in its turn.
func TestTheQueueKeepsTheServersTime(t *testing.T) {
	s := fairlocktest.Start(t)
	ctx := context.Background()
	holder, _ := fair.New(s.Owner, "q")
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	waiter, _ := fair.New(s.Owner, "q", fairlock.WithWaitTimeout(time.Minute))
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(ctx) }()
	for {
		st, err := fair.Inspect(ctx, s.Client, "q")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Queue) == 1 {
			if st.Queue[0].Deadline != time.Minute {
				t.Fatalf("the waiter's deadline is %v from now, want a minute (the clock stands still)", st.Queue[0].Deadline)
			}
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if err := waiter.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// Every go block of docs/testing.md stands in this file as it is, so it is
// compiled (and the Example run).
func TestTestingPageCodeIsCompiled(t *testing.T) {
	redistest.CodeBlocksIn(t, "../docs/testing.md", "fairlocktest_test.go", 2)
}

// docs/testing.md, "A miniredis of your own": a server you start yourself,
// marked as long in use, grants at once, though its clock stands still.
func TestWithMyOwnMiniredis(t *testing.T) {
	mr := miniredis.RunT(t)
	_ = mr.Set("fairlock:boot", "0")                        // a server long in use: no pause
	mr.SetTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) // its clock stands still
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	owner, err := fairlock.NewOwner(client)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(context.Background())
	m, err := fair.New(owner, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := m.TryLock(context.Background(), 0, 0); !ok || err != nil {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
}
