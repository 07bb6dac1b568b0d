package faults

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/redis/go-redis/v9"
)

// handle is what both locks' handles offer.
type handle interface {
	Lock(context.Context) error
	TryLock(ctx context.Context, wait, lease time.Duration) (bool, error)
	Unlock(context.Context) error
	IsLocked(context.Context) (bool, error)
	HoldCount(context.Context) (int, error)
	TTL(context.Context) (time.Duration, error)
	Token() int64
	Lost() <-chan struct{}
	HoldContext() context.Context
}

func newHandle(t testing.TB, lock string, c redis.UniversalClient, name string, lease time.Duration, opts ...fairlock.Option) handle {
	t.Helper()
	var h handle
	var err error
	if lock == "fair" {
		fo := []fair.MutexOption{fairlock.WithLease(lease), fairlock.WithWaitTimeout(killWait)}
		for _, o := range opts {
			fo = append(fo, o)
		}
		h, err = fair.New(redistest.Owner(c), name, fo...)
	} else {
		ro := []reentrant.Option{fairlock.WithLease(lease)}
		for _, o := range opts {
			ro = append(ro, o)
		}
		h, err = reentrant.New(redistest.Owner(c), name, ro...)
	}
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// proxied starts a proxy to srv and a client through it, both closed when
// the test ends.
func proxied(t testing.TB, srv *Server, opts redis.Options) (*Proxy, *redis.Client) {
	t.Helper()
	p, err := NewProxy(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	opts.Addr = p.Addr()
	c := redis.NewClient(&opts)
	t.Cleanup(func() {
		_ = c.Close()
		p.Close()
	})
	return p, c
}

// holdState reads the hold as Redis has it, with state.lua (what IsLocked,
// HoldCount and TTL read), as an observer outside the proxy.
func holdState(t *testing.T, c redis.UniversalClient, lock, name string) transport.HoldState {
	t.Helper()
	v, err := lua.Default().State.Run(context.Background(), c, nil, []string{holdKey(lock, name)}).Result()
	if err != nil {
		t.Fatal(err)
	}
	st, err := transport.DecodeState(v)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Scenario 1: a holder cut off from Redis for longer than its lease sees
// Lost() close before the hold ends on the server, as an observer outside
// the proxy sees it; the next holder's token is greater.
func TestHolderCutOffLongerThanItsLease(t *testing.T) {
	const lease = 3 * time.Second
	for _, lock := range []string{"fair", "reentrant"} {
		t.Run(lock, func(t *testing.T) {
			srv := sharedServer(t)
			direct := client(t, srv.Addr)
			p, viaProxy := proxied(t, srv, redis.Options{ReadTimeout: time.Second})
			name := lockName(t)
			holder := newHandle(t, lock, viaProxy, name, lease)
			if err := holder.Lock(context.Background()); err != nil {
				t.Fatal(err)
			}
			token := holder.Token()
			next := newHandle(t, lock, direct, name, lease)
			done := acquired(next.Lock, 5*lease)

			time.Sleep(lease / 2) // a renewal or two first
			p.Hold()
			held := time.Now()
			lost := make(chan time.Time, 1)
			go func() { <-holder.Lost(); lost <- time.Now() }()
			// The hold ends on the server at the latest of (send time +
			// TTL) over the observer's polls of this very hold (its token:
			// the waiter takes the lock within a millisecond of the end): a
			// lower bound of its end.
			var serverEnd time.Time
			for {
				sent := time.Now()
				st := holdState(t, direct, lock, name)
				if st.Owner == "" || st.Token != token || st.TTL <= 0 {
					break
				}
				if end := sent.Add(st.TTL); end.After(serverEnd) {
					serverEnd = end
				}
				if time.Since(held) > 3*lease {
					t.Fatal("the hold never ended on the server")
				}
				time.Sleep(2 * time.Millisecond)
			}
			var lostAt time.Time
			select {
			case lostAt = <-lost:
			case <-time.After(lease):
				t.Fatal("Lost() did not close")
			}
			t.Logf("%s: cut off %v after the lock; Lost() closed %v after the cut, %v before the server's hold ended (lease %v)",
				lock, lease/2, lostAt.Sub(held).Round(time.Millisecond), serverEnd.Sub(lostAt).Round(time.Millisecond), lease)
			if !lostAt.Before(serverEnd) {
				t.Errorf("Lost() closed at %v, not before the server's hold ended (%v)", lostAt, serverEnd)
			}
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			if next.Token() <= token {
				t.Errorf("the next holder's token %d is not greater than the cut-off holder's %d", next.Token(), token)
			}
			p.Release()
			if err := holder.Unlock(context.Background()); !errors.Is(err, fairlock.ErrLockLost) {
				t.Errorf("the cut-off holder's Unlock = %v, want ErrLockLost", err)
			}
			if ok, err := next.IsLocked(context.Background()); err != nil || !ok {
				t.Errorf("IsLocked after the stale Unlock = %v, %v: the next holder's hold must stand", ok, err)
			}
			_ = next.Unlock(context.Background())
		})
	}
}

// Scenario 2: a request reaches Redis but its reply is cut, and go-redis
// sends it again. The stored answer makes the retry a no-op: Lock, re-entry
// and Unlock each apply once, the token is issued once, and giving up leaves
// no queue entry behind.
func TestAmbiguousOutcomesApplyOnce(t *testing.T) {
	for _, lock := range []string{"fair", "reentrant"} {
		t.Run(lock, func(t *testing.T) {
			srv := sharedServer(t)
			direct := client(t, srv.Addr)
			p, viaProxy := proxied(t, srv, redis.Options{MaxRetries: 3})
			name := lockName(t)
			h := newHandle(t, lock, viaProxy, name, 10*time.Second)
			ctx := context.Background()
			acquire, release := "_"+lock+"_acquire", "_"+lock+"_release"
			// Load the scripts first: the fault must hit the call itself.
			if err := h.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := h.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			count := func(want int, after string) {
				t.Helper()
				n, err := h.HoldCount(ctx)
				if err != nil || n != want {
					t.Fatalf("after %s whose reply was cut: hold count %d, %v; want %d", after, n, err, want)
				}
			}
			step := func(what, match string, call func() error) {
				t.Helper()
				cut := p.DropReplyTo(match)
				if err := call(); err != nil {
					t.Fatalf("%s whose reply was cut: %v (go-redis retries it)", what, err)
				}
				select {
				case <-cut:
				default:
					t.Fatalf("%s: the proxy never cut a reply: the test proves nothing", what)
				}
			}
			step("Lock", acquire, func() error { return h.Lock(ctx) })
			count(1, "Lock")
			token := h.Token()
			if lock == "fair" {
				st, err := fair.Inspect(ctx, direct, name)
				if err != nil || st.Holder == nil || st.Holder.Token != token || st.Holder.Count != 1 {
					t.Fatalf("Inspect after a cut Lock: %+v, %v; want one hold with token %d", st.Holder, err, token)
				}
			}
			step("re-entry", acquire, func() error { return h.Lock(h.HoldContext()) })
			count(2, "re-entry")
			if h.Token() != token {
				t.Errorf("a re-entry changed the token: %d, was %d", h.Token(), token)
			}
			step("Unlock", release, func() error { return h.Unlock(ctx) })
			count(1, "Unlock")
			step("the last Unlock", release, func() error { return h.Unlock(ctx) })
			if ok, err := newHandle(t, lock, direct, name, time.Second).IsLocked(ctx); err != nil || ok {
				t.Fatalf("after the last Unlock whose reply was cut: IsLocked %v, %v", ok, err)
			}
			if lock != "fair" {
				return
			}
			// Giving up: the leave's reply is cut while another holds.
			other := newHandle(t, lock, direct, name, 10*time.Second)
			if err := other.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			cut := p.DropReplyTo("_fair_leave")
			ok, err := h.TryLock(ctx, 300*time.Millisecond, 0)
			if ok || err != nil {
				t.Fatalf("TryLock on a held lock = %v, %v; want false, nil", ok, err)
			}
			<-cut
			if q := queueOf(t, direct, name); len(q) != 0 {
				t.Errorf("the queue after a give-up whose reply was cut: %v; want empty", q)
			}
			_ = other.Unlock(ctx)
		})
	}
}

// Without retries the caller gets the error, and the library undoes what
// the request may have done: the lock is free at once, not after a lease.
func TestLostReplyWithoutRetryIsUndone(t *testing.T) {
	for _, lock := range []string{"fair", "reentrant"} {
		t.Run(lock, func(t *testing.T) {
			srv := sharedServer(t)
			direct := client(t, srv.Addr)
			p, viaProxy := proxied(t, srv, redis.Options{MaxRetries: -1})
			name := lockName(t)
			h := newHandle(t, lock, viaProxy, name, 10*time.Second)
			ctx := context.Background()
			if err := h.Lock(ctx); err != nil { // loads the scripts
				t.Fatal(err)
			}
			if err := h.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			cut := p.DropReplyTo("_" + lock + "_acquire")
			if err := h.Lock(ctx); err == nil {
				t.Fatal("Lock whose reply was cut, without retries, returned nil")
			}
			<-cut
			if ok, err := newHandle(t, lock, direct, name, time.Second).IsLocked(ctx); err != nil || ok {
				t.Errorf("after a Lock whose reply was lost: IsLocked %v, %v; want free (undone)", ok, err)
			}
			if lock == "fair" {
				if q := queueOf(t, direct, name); len(q) != 0 {
					t.Errorf("queue after a lost Lock reply: %v; want empty", q)
				}
			}
		})
	}
}

// A final release whose reply is cut is retried by go-redis only after
// another handle took the lock and released it (its requests overwrite the
// stored answer): Unlock still reports success, and nothing is released
// twice.
func TestReleaseRetriedAfterOthersHeld(t *testing.T) {
	for _, lock := range []string{"fair", "reentrant"} {
		t.Run(lock, func(t *testing.T) {
			srv := sharedServer(t)
			direct := client(t, srv.Addr)
			p, viaProxy := proxied(t, srv, redis.Options{MaxRetries: 3})
			name := lockName(t)
			ctx := context.Background()
			a := newHandle(t, lock, viaProxy, name, 10*time.Second)
			b := newHandle(t, lock, direct, name, 10*time.Second)
			if err := a.Lock(ctx); err != nil { // loads the scripts
				t.Fatal(err)
			}
			bDone := acquired(b.Lock, 10*time.Second)
			if lock == "fair" {
				eventually(t, 5*time.Second, "b queued", func() bool { return len(queueOf(t, direct, name)) == 1 })
			}
			cut := p.DropReplyAndHold("_" + lock + "_release")
			unlocked := make(chan error, 1)
			go func() { unlocked <- a.Unlock(ctx) }()
			<-cut
			if r := <-bDone; r.err != nil {
				t.Fatalf("b's Lock: %v", r.err)
			}
			if err := b.Unlock(ctx); err != nil {
				t.Fatalf("b's Unlock: %v", err)
			}
			p.Release() // now a's retry reaches Redis
			if err := <-unlocked; err != nil {
				t.Errorf("a's Unlock, whose release ran but whose retry came after b's hold: %v, want nil", err)
			}
			if ok, err := b.IsLocked(ctx); err != nil || ok {
				t.Errorf("IsLocked at the end: %v, %v; want free", ok, err)
			}
		})
	}
}
