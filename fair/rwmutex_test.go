package fair_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func (e *env) rw(label string) *fair.RWMutex {
	e.t.Helper()
	return e.rwOn(e.process(), label)
}

// rwOn is a read-write lock handle on client.
func (e *env) rwOn(client *redis.Client, label string) *fair.RWMutex {
	e.t.Helper()
	m, err := fair.NewRWMutex(redistest.OwnerOn(client, e.clk, nil), lockName, fair.WithLabel(label))
	if err != nil {
		e.t.Fatalf("NewRWMutex: %v", err)
	}
	return m
}

func (e *env) rwState() fair.SemaphoreState {
	e.t.Helper()
	st, err := fair.InspectRWMutex(context.Background(), e.client, lockName)
	if err != nil {
		e.t.Fatalf("InspectRWMutex: %v", err)
	}
	return st
}

// rwQueue waits until n waiters are queued and asleep.
func (e *env) rwQueue(n int) {
	e.t.Helper()
	redistest.Quiet(e.t, "the waiters are queued and asleep", func() bool {
		return len(e.rwState().Queue) == n && redistest.Asleep() == n
	})
}

func async(f func() error) <-chan error {
	out := make(chan error, 1)
	go func() { out <- f() }()
	return out
}

func done(t *testing.T, c <-chan error, what string) {
	t.Helper()
	select {
	case err := <-c:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return", what)
	}
}

func pending(t *testing.T, c <-chan error, what string) {
	t.Helper()
	select {
	case err := <-c:
		t.Fatalf("%s returned early: %v", what, err)
	default:
	}
}

func ok(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestRWMutexRefusesBadInput(t *testing.T) {
	e := newEnv(t)
	for _, name := range []string{"", "a{b"} {
		if _, err := fair.NewRWMutex(redistest.Owner(e.client), name); !errors.Is(err, fairlock.ErrInvalidArgument) {
			t.Errorf("name %q: %v", name, err)
		}
	}
	if _, err := fair.NewRWMutex(nil, "a"); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Errorf("nil client: %v", err)
	}
	m := e.rw("m")
	ctx := context.Background()
	if _, err := m.TryRLock(ctx, -time.Second, 0); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Errorf("negative wait: %v", err)
	}
	if _, err := m.TryLock(ctx, 0, -time.Second); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Errorf("negative lease: %v", err)
	}
	if err := m.RUnlock(ctx); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Errorf("RUnlock without RLock: %v", err)
	}
	if err := m.Unlock(ctx); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Errorf("Unlock without Lock: %v", err)
	}
	if c := context.Cause(m.HoldContext()); !errors.Is(c, fairlock.ErrNotHeld) {
		t.Errorf("HoldContext before a hold: %v", c)
	}
}

// Readers share; a writer waits for them, and readers who come after the
// writer wait for it: turns in arrival order, so writers do not starve.
func TestRWMutexTakesTurnsInArrivalOrder(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	r1, r2, w, r3 := e.rw("r1"), e.rw("r2"), e.rw("w"), e.rw("r3")
	ok(t, r1.RLock(ctx), "r1")
	ok(t, r2.RLock(ctx), "r2 beside r1")
	if got, err := w.TryLock(ctx, 0, 0); got || err != nil {
		t.Fatalf("a writer beside readers: %v, %v", got, err)
	}
	writer := async(func() error { return w.Lock(ctx) })
	e.rwQueue(1)
	reader := async(func() error { return r3.RLock(ctx) })
	e.rwQueue(2)
	if got, err := e.rw("late").TryRLock(ctx, 0, 0); got || err != nil {
		t.Fatalf("a reader passed the waiting writer: %v, %v", got, err)
	}
	ok(t, r1.RUnlock(ctx), "r1 RUnlock")
	pending(t, writer, "the writer, with r2 still reading")
	ok(t, r2.RUnlock(ctx), "r2 RUnlock")
	done(t, writer, "the writer")
	pending(t, reader, "the reader behind the writer")
	if st := e.rwState(); len(st.Holders) != 1 || st.Holders[0].Permits != fair.MaxPermits || st.Holders[0].Label != "w" {
		t.Fatalf("holders while writing: %+v", st.Holders)
	}
	ok(t, w.Unlock(ctx), "writer Unlock")
	done(t, reader, "the reader")
	ok(t, r3.RUnlock(ctx), "r3 RUnlock")
}

// When a writer unlocks, one script call wakes the whole run of readers at
// the head of the queue: the release serves them all, the first waiter (the
// gate's holder) and the readers queued behind it, and publishes their
// grants together, one message to each client with a reader served (to its
// inbox, and nowhere else): readers of one process get one message in all.
// The writer behind them gets the gate by one more message, to its own
// client, when the first reader gives it on.
func TestRWMutexOneMessageWakesTheReadersAtTheHead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		process bool // each reader a client of its own
	}{{"one client per reader", true}, {"readers of one client", false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			w1, w2 := e.rw("w1"), e.rw("w2")
			ok(t, w1.Lock(ctx), "w1 Lock")
			const readers = 5
			client := e.client // the readers' client, unless each has its own
			var reading []<-chan error
			var rs []*fair.RWMutex
			for i := range readers {
				if tc.process {
					client = e.process()
				}
				r := e.rwOn(client, fmt.Sprintf("r%d", i))
				rs = append(rs, r)
				reading = append(reading, async(func() error { return r.RLock(ctx) }))
				e.rwQueue(i + 1)
			}
			writing := async(func() error { return w2.Lock(ctx) })
			e.rwQueue(readers + 1)

			messages := watchInboxes(t, e.client, "fairlock:rw:{"+lockName+"}:gate:wake")
			ok(t, w1.Unlock(ctx), "w1 Unlock")
			for i, c := range reading {
				done(t, c, fmt.Sprintf("r%d", i))
			}
			e.rwQueue(1) // w2, now the gate's holder
			pending(t, writing, "w2, behind the readers")

			// The readers' grants (one message per client), w2's head
			// notice (w2 is a client of its own), and its gate.
			clients := 1
			if tc.process {
				clients = readers
			}
			want := clients + 2
			var got []*redis.Message
			for len(got) < want {
				select {
				case m := <-messages:
					checkInbox(t, m)
					got = append(got, m)
				case <-time.After(5 * time.Second):
					t.Fatalf("%d messages after the writer's Unlock, want %d", len(got), want)
				}
			}
			select {
			case m := <-messages:
				t.Fatalf("one message too many: %q on %s", m.Payload, m.Channel)
			case <-time.After(50 * time.Millisecond):
			}
			served, inboxes := 0, map[string]bool{}
			for _, m := range got[:clients] {
				served += strings.Count(m.Payload, " permits ")
				inboxes[m.Channel] = true
			}
			if served != readers || len(inboxes) != clients {
				t.Fatalf("the release's messages serve %d readers in %d inboxes, want %d in %d", served, len(inboxes), readers, clients)
			}
			if st := e.rwState(); st.InUse != readers {
				t.Fatalf("after the readers' turn: %+v", st)
			}
			for i, r := range rs {
				ok(t, r.RUnlock(ctx), fmt.Sprintf("r%d RUnlock", i))
			}
			done(t, writing, "w2")
			ok(t, w2.Unlock(ctx), "w2 Unlock")
		})
	}
}

func TestRWMutexReentryAndUpgrade(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.rw("m")
	rctx, err := m.RLockContext(ctx)
	ok(t, err, "RLockContext")
	ok(t, m.RLock(rctx), "RLock again, with the hold's context")
	if err := m.Lock(rctx); !errors.Is(err, fair.ErrUpgrade) {
		t.Fatalf("Lock with a read hold's context: %v, want ErrUpgrade", err)
	}
	ok(t, m.RUnlock(rctx), "RUnlock")
	if st := e.rwState(); st.InUse != 1 {
		t.Fatalf("released after one of two RUnlocks: %+v", st)
	}
	// Another reader on the same handle (another goroutine) takes a read
	// hold of its own: readers share the lock.
	ok(t, m.RLock(ctx), "a second reader's RLock")
	if st := e.rwState(); st.InUse != 2 || len(st.Holders) != 2 {
		t.Fatalf("two readers on one handle: %+v", st)
	}
	ok(t, m.RUnlock(ctx), "the second reader's RUnlock")
	if err := m.Unlock(ctx); !errors.Is(err, fairlock.ErrNotHeld) || !strings.Contains(err.Error(), "use RUnlock") {
		t.Fatalf("Unlock while holding only the read lock: %v, want ErrNotHeld saying to use RUnlock", err)
	}
	ok(t, m.RUnlock(rctx), "RUnlock")
	if st := e.rwState(); st.InUse != 0 {
		t.Fatalf("held after the last RUnlock: %+v", st)
	}
	if err := m.RUnlock(ctx); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("a third RUnlock: %v", err)
	}
	wctx, err := m.LockContext(ctx)
	ok(t, err, "LockContext")
	tok := m.Token()
	ok(t, m.Lock(wctx), "Lock again, with the hold's context")
	ok(t, m.Unlock(wctx), "Unlock")
	if m.Token() != tok || e.rwState().InUse != fair.MaxPermits {
		t.Fatal("released after one of two Unlocks")
	}
	ok(t, m.Unlock(wctx), "Unlock")
	if m.Token() != 0 || e.rwState().InUse != 0 {
		t.Fatal("held after the last Unlock")
	}
	if c := context.Cause(m.HoldContext()); !errors.Is(c, fairlock.ErrReleased) {
		t.Fatalf("HoldContext cause after Unlock: %v", c)
	}
}

// A writer that takes the read lock keeps it when it unlocks the write lock:
// waiting readers come in at once, no writer can come in between.
func TestRWMutexDowngrade(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m, other, w := e.rw("m"), e.rw("other"), e.rw("w")
	wctx, err := m.LockContext(ctx)
	ok(t, err, "LockContext")
	tok := m.Token()
	ok(t, m.RLock(wctx), "RLock by the writer, with its hold's context")
	reader := async(func() error { return other.RLock(ctx) })
	e.rwQueue(1)
	writer := async(func() error { return w.Lock(ctx) })
	e.rwQueue(2)
	ok(t, m.Unlock(wctx), "Unlock, keeping the read lock")
	done(t, reader, "the reader woken by the downgrade")
	pending(t, writer, "the writer")
	if m.Token() != tok {
		t.Fatalf("the downgraded hold has token %d, had %d", m.Token(), tok)
	}
	st := e.rwState()
	if st.InUse != 2 || len(st.Holders) != 2 {
		t.Fatalf("after the downgrade: %+v", st)
	}
	ok(t, m.RUnlock(ctx), "RUnlock")
	ok(t, other.RUnlock(ctx), "other RUnlock")
	done(t, writer, "the writer")
	ok(t, w.Unlock(ctx), "writer Unlock")
}

// A handle whose hold was lost gets ErrLockLost, then acquires afresh.
func TestRWMutexLoss(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m, err := fair.NewRWMutex(redistest.OwnerOn(e.client, e.clk, nil), lockName, fairlock.WithLease(time.Second))
	ok(t, err, "NewRWMutex")
	ok(t, m.Lock(ctx), "Lock")
	e.mr.Del("fairlock:rw:{jobs}")
	e.clk.Advance(time.Second)
	if !isClosed(m.Lost()) {
		t.Fatal("Lost is open after the hold was deleted")
	}
	if err := m.Unlock(ctx); !errors.Is(err, fairlock.ErrLockLost) {
		t.Fatalf("Unlock of a lost hold: %v", err)
	}
	ok(t, m.RLock(ctx), "RLock afresh")
	ok(t, m.RUnlock(ctx), "RUnlock")
}

// An RWMutex, a Semaphore and a Mutex of one name are three locks.
func TestRWMutexOwnKeys(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.rw("rw")
	ok(t, m.Lock(ctx), "Lock")
	p, err := e.semaphore(1).TryAcquire(ctx, 1, 0, 0)
	if err != nil || p == nil {
		t.Fatalf("the Semaphore of the same name: %v, %v", p, err)
	}
	if got, err := e.named("mutex").TryLock(ctx, 0, 0); !got || err != nil {
		t.Fatalf("the Mutex of the same name: %v, %v", got, err)
	}
	release(t, p)
	ok(t, m.Unlock(ctx), "Unlock")
}

// 16 handles on 4 clients, a quarter of them writers: never a reader beside
// a writer, never two writers, and everyone served.
func TestRealRWMutexExcludes(t *testing.T) {
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			redistest.NoLeaks(t)
			clients := redistest.Clients(t, kind, 4)
			name := redistest.Name(t)
			ctx := context.Background()
			const handles, rounds = 16, 30
			var readers, writers, sawReaders, served atomic.Int64
			var wg sync.WaitGroup
			for i := 0; i < handles; i++ {
				m, err := fair.NewRWMutex(redistest.Owner(clients[i%4]), name, fair.WithLabel(fmt.Sprint(i)))
				if err != nil {
					t.Fatal(err)
				}
				write := i%4 == 0
				wg.Add(1)
				go func() {
					defer wg.Done()
					for r := 0; r < rounds; r++ {
						if write {
							if err := m.Lock(ctx); err != nil {
								t.Error(err)
								return
							}
							if w := writers.Add(1); w != 1 || readers.Load() != 0 {
								t.Errorf("a writer beside %d writers and %d readers", w-1, readers.Load())
							}
							time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
							writers.Add(-1)
							if err := m.Unlock(ctx); err != nil {
								t.Error(err)
								return
							}
						} else {
							if err := m.RLock(ctx); err != nil {
								t.Error(err)
								return
							}
							if n := readers.Add(1); n > 1 {
								sawReaders.Add(1)
							}
							if writers.Load() != 0 {
								t.Error("a reader beside a writer")
							}
							time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
							readers.Add(-1)
							if err := m.RUnlock(ctx); err != nil {
								t.Error(err)
								return
							}
						}
						served.Add(1)
					}
				}()
			}
			wg.Wait()
			if got := served.Load(); got != handles*rounds {
				t.Fatalf("%d of %d turns served", got, handles*rounds)
			}
			t.Logf("%d turns; readers shared the lock %d times", served.Load(), sawReaders.Load())
		})
	}
}
