package fair_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

const (
	lockName = "jobs"
	holdKey  = "fairlock:f:{jobs}"
	channel  = "fairlock:f:{jobs}:wake"
)

type env struct {
	t      *testing.T
	mr     *miniredis.Miniredis
	clk    *clock.Fake
	client *redis.Client
}

func newEnv(t *testing.T) *env {
	redistest.NoLeaks(t)
	mr, clk, client := redistest.Mini(t)
	return &env{t: t, mr: mr, clk: clk, client: client}
}

// process is a client of its own, as if on another machine: closing it
// is a crash.
func (e *env) process() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: e.mr.Addr(), MaxRetries: -1})
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (e *env) handleOn(c *redis.Client, opts ...fair.MutexOption) *fair.Mutex {
	e.t.Helper()
	m, err := fair.New(redistest.OwnerOn(c, e.clk, nil), lockName, opts...)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	return m
}

func (e *env) inspect() fair.State {
	e.t.Helper()
	s, err := fair.Inspect(context.Background(), e.client, lockName)
	if err != nil {
		e.t.Fatalf("Inspect: %v", err)
	}
	return s
}

// watch subscribes to every inbox of the lock (its channel's, one per
// client: transport.Inbox), for tests that count messages; the markers of the
// tests' own sync barrier are left out.
func (e *env) watch() <-chan *redis.Message {
	e.t.Helper()
	return watchInboxes(e.t, e.client, channel)
}

// watchInboxes subscribes to every inbox under channel.
func watchInboxes(t *testing.T, client *redis.Client, channel string) <-chan *redis.Message {
	t.Helper()
	ctx := context.Background()
	watch := client.PSubscribe(ctx, channel+":*")
	t.Cleanup(func() { _ = watch.Close() })
	if _, err := watch.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	out := make(chan *redis.Message, 100)
	go func() {
		defer close(out)
		for m := range watch.Channel() {
			if !strings.HasPrefix(m.Payload, redistest.SyncMarker) {
				out <- m
			}
		}
	}()
	return out
}

// checkInbox fails unless every note of m is for the client whose inbox m
// came on (transport.Inbox): a note reaches its waiter's client, no other.
func checkInbox(t *testing.T, m *redis.Message) {
	t.Helper()
	for note := range strings.SplitSeq(m.Payload, transport.NoteSeparator) {
		if want := transport.Inbox(m.Channel[:strings.LastIndexByte(m.Channel, ':')], transport.NoteTarget(note)); m.Channel != want {
			t.Fatalf("note %q came on %s, want %s", note, m.Channel, want)
		}
	}
}

// queued returns the labels of the queue's live waiters, in order.
func (e *env) queued() []string {
	var out []string
	for _, w := range e.inspect().Queue {
		if !w.Expired {
			out = append(out, w.Label)
		}
	}
	return out
}

// holder returns the holder's label, "" when free.
func (e *env) holder() string {
	if h := e.inspect().Holder; h != nil {
		return h.Label
	}
	return ""
}

// named returns a handle labelled name.
func (e *env) named(name string, opts ...fair.MutexOption) *fair.Mutex {
	return e.handleOn(e.client, append([]fair.MutexOption{fair.WithLabel(name)}, opts...)...)
}

type result struct {
	ok  bool
	err error
}

func tryLockAsync(m *fair.Mutex, ctx context.Context, wait, lease time.Duration) <-chan result {
	out := make(chan result, 1)
	go func() {
		ok, err := m.TryLock(ctx, wait, lease)
		out <- result{ok, err}
	}()
	return out
}

func await(t *testing.T, c <-chan result) result {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter did not return")
		return result{}
	}
}

func notYet(t *testing.T, c <-chan result, what string) {
	t.Helper()
	select {
	case r := <-c:
		t.Fatalf("%s returned early: %v, %v", what, r.ok, r.err)
	default:
	}
}

// waitUntil polls a condition on Redis or the handles; the bound only
// catches a hang.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// enqueue starts m's Lock and returns once Inspect shows n waiters queued
// and all of them asleep.
func (e *env) enqueue(m *fair.Mutex, n int) <-chan result {
	e.t.Helper()
	return e.enqueueCtx(context.Background(), m, n)
}

func (e *env) enqueueCtx(ctx context.Context, m *fair.Mutex, n int) <-chan result {
	e.t.Helper()
	got := tryLockAsync(m, ctx, time.Hour, 0)
	e.settle(n)
	return got
}

// settle waits until n waiters are queued and asleep.
func (e *env) settle(n int) {
	e.t.Helper()
	redistest.Quiet(e.t, "the waiters are queued and asleep", func() bool {
		return len(e.queued()) == n && redistest.Asleep() == n
	})
}

func mustLock(t *testing.T, m *fair.Mutex) {
	t.Helper()
	if err := m.Lock(context.Background()); err != nil {
		t.Fatalf("Lock: %v", err)
	}
}

// mustReenter re-enters m's hold, as a call chain holding it does: with
// the hold's context.
func mustReenter(t *testing.T, m *fair.Mutex) {
	t.Helper()
	if err := m.Lock(m.HoldContext()); err != nil {
		t.Fatalf("Lock with the hold's context (a re-entry): %v", err)
	}
}

func mustUnlock(t *testing.T, m *fair.Mutex) {
	t.Helper()
	if err := m.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

func unlockAll(m *fair.Mutex) {
	for m.Unlock(context.Background()) == nil {
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// onScript is a go-redis hook that calls f as each script call (EVAL,
// EVALSHA, FCALL) is handed to go-redis, before it goes out.
type onScript func()

func (onScript) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f onScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := strings.ToLower(cmd.Name()); strings.HasPrefix(name, "fcall") || strings.HasPrefix(name, "eval") {
			f()
		}
		return next(ctx, cmd)
	}
}

func (onScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
