package faults

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
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

var (
	sharedMu sync.Mutex
	shared   *Server
	names    int
)

// sharedServer is one redis-server for the tests that do not stop it. No
// redis-server on PATH skips the test, except under CI=true.
func sharedServer(t testing.TB) *Server {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil {
		var err error
		if shared, err = newServer(t); err != nil {
			t.Fatal(err)
		}
		// A server long in use: its first acquisition does not wait for a
		// fresh server's pause (hold.lua's settling), whichever test comes
		// first. Tests of that pause start servers of their own.
		if err := redistest.BootedServer(shared.Addr); err != nil {
			t.Fatal(err)
		}
	}
	return shared
}

// ownServer is a redis-server for one test alone, which it may stop.
func ownServer(t testing.TB) *Server {
	t.Helper()
	s, err := newServer(t)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func newServer(t testing.TB) (*Server, error) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server is not installed; CI must run the fault tests")
		}
		t.Skip("the fault tests need redis-server on PATH")
	}
	return StartServer()
}

// holdKey is where a lock of kind lock ("fair" or "reentrant") keeps its
// hold: tests that corrupt or observe it name it here only.
func holdKey(lock, name string) string {
	if lock == "fair" {
		return "fairlock:f:{" + name + "}"
	}
	return "fairlock:r:{" + name + "}"
}

// lockName is a name no other test uses.
// holdOf reads a hold key's text (internal/lua/hold.lua): its owner and
// token, "" and 0 when nobody holds it or the text is not a hold (a
// restarted server's "!settling" hold, which grants nothing, counts as
// nobody's).
func holdOf(raw string) (owner string, token int64) {
	fields, err := redistest.DecodeHold(raw)
	if err != nil {
		return "", 0
	}
	owner, _ = fields["o"].(string)
	if owner == "!settling" {
		return "", 0
	}
	f, _ := fields["f"].(string)
	token, _ = strconv.ParseInt(f, 10, 64)
	return owner, token
}

func lockName(t testing.TB) string {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	names++
	return fmt.Sprintf("faults-%d", names)
}

// client is a client of addr, closed when the test ends.
func client(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// queueOf returns the PIDs of the live queue entries of a fair lock, in
// queue order (this process's own entries included).
func queueOf(t testing.TB, c redis.UniversalClient, name string) []int {
	t.Helper()
	st, err := fair.Inspect(context.Background(), c, name)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, w := range st.Queue {
		if !w.Expired {
			pids = append(pids, w.PID)
		}
	}
	return pids
}

// eventually polls cond every 5 ms until it holds, failing after within.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// acquired runs lock in the background and reports when it returned.
func acquired(lock func(context.Context) error, within time.Duration) <-chan result {
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		err := lock(ctx)
		done <- result{at: time.Now(), err: err}
	}()
	return done
}

type result struct {
	at  time.Time
	err error
}

// lossClock notes when the library gave a hold up as lost: it logs "lock
// lost" on the goroutine that ends the hold, before Lost closes. A test's
// goroutine that waits on Lost and then reads the clock may run tens of ms
// late on a loaded machine, and see two believers where the library made
// none. A hold a timer ended (its jeopardy, its lease) is logged with how
// late that timer ran, if it did: lossClock keeps it.
type lossClock struct {
	at   atomic.Pointer[time.Time]
	late atomic.Int64
}

// option is the mutex option that has the handle log to l.
func (l *lossClock) option() fairlock.Option { return fairlock.WithLogger(slog.New(l)) }

// lostAt is when the hold was given up as lost; ok false if it was not.
func (l *lossClock) lostAt() (at time.Time, ok bool) {
	if p := l.at.Load(); p != nil {
		return *p, true
	}
	return time.Time{}, false
}

// take is lostAt, and forgets it: the next loss of the handle's holds is
// noted afresh.
func (l *lossClock) take() (at time.Time, ok bool) {
	if p := l.at.Swap(nil); p != nil {
		return *p, true
	}
	return time.Time{}, false
}

// lateness is the most a holder's process ran late that a test allows for
// (twoBelievers): what timerLateness measured (late), or how late the
// timer that gave the hold up said it ran, whichever is more. The sampler
// sees only its own sleeps; the timer's goroutine, and the locks it takes
// before it logs, may wait longer on a loaded machine (75 ms against 68 ms
// sampled, under -race beside four busy loops).
func (l *lossClock) lateness(late func() time.Duration) time.Duration {
	return max(late(), time.Duration(l.late.Load()))
}

func (l *lossClock) Enabled(context.Context, slog.Level) bool { return true }

func (l *lossClock) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "fairlock: lock lost") {
		now := time.Now()
		if l.at.CompareAndSwap(nil, &now) {
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "late" {
					// Up to now: the handler runs after the library read its clock.
					l.late.Store(int64(a.Value.Duration() + now.Sub(r.Time)))
				}
				return true
			})
		}
	}
	return nil
}

func (l *lossClock) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *lossClock) WithGroup(string) slog.Handler      { return l }

// sessionMargin is how long before any waiter can have counted the grace a
// holder whose presence broke stops believing (its jeopardy; core's
// sessionMargin, docs/presence.md): the bound on two believers assumes the
// holder's process runs that timer less late than this.
const sessionMargin = 20 * time.Millisecond

// timerLateness measures how late this process's timers run while t
// works: a goroutine sleeps 2 ms at a time until t ends, and the function
// returned says the most a sleep has overrun so far. A holder's jeopardy is
// such a timer, so on a machine loaded past its cores two believers may
// overlap by up to that, less sessionMargin (docs/presence.md); a test
// allows no more.
func timerLateness(t testing.TB) (worst func() time.Duration) {
	var most atomic.Int64
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-done:
				return
			default:
			}
			start := time.Now()
			time.Sleep(2 * time.Millisecond)
			if late := int64(time.Since(start) - 2*time.Millisecond); late > most.Load() {
				most.Store(late)
			}
		}
	}()
	t.Cleanup(func() {
		close(done)
		<-exited
	})
	return func() time.Duration { return time.Duration(most.Load()) }
}

// twoBelievers says what is wrong when a waiter's Lock returned at took while
// the holder gave its hold up as lost at lost, and the process's timers ran
// up to late late: an overlap beyond late less sessionMargin ("" if none).
func twoBelievers(took, lost time.Time, late time.Duration) string {
	overlap := lost.Sub(took)
	if overlap <= 0 || overlap <= late-sessionMargin {
		return ""
	}
	return fmt.Sprintf("the waiter held at %v, %v before the holder gave its hold up (its timers ran up to %v late, less the %v margin)",
		took.Format("15:04:05.000"), overlap.Round(time.Millisecond), late.Round(time.Millisecond), sessionMargin)
}

// newOwner is fairlock.NewOwner(c, opts...), closed when the test ends.
func newOwner(t testing.TB, c *redis.Client, opts ...fairlock.OwnerOption) *fairlock.Owner {
	t.Helper()
	owner, err := fairlock.NewOwner(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = owner.Close(ctx)
	})
	return owner
}

// ownedHolder returns a fair lock handle on a new owner of c, made as
// fairlock.NewOwner makes it with opts (WithoutPresence: the restart check
// on a link of its own; by default, on its presence connection), that logs
// to the returned sink; the owner is closed when the test ends.
func ownedHolder(t testing.TB, c *redis.Client, opts ...fairlock.OwnerOption) (*fair.Mutex, *redistest.LogBuffer) {
	t.Helper()
	owner := newOwner(t, c, opts...)
	logs := &redistest.LogBuffer{}
	holder, err := fair.New(owner, lockName(t), fairlock.WithLogger(logs.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	return holder, logs
}
