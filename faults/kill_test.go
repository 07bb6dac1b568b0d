package faults

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"
)

// Scenario 4: SIGKILL. Each test reports its measured delay beside its bound
// (go test -v -run Kill ./... prints them; docs/reliability.md has a run).

const (
	killLease = 2 * time.Second // the workers' lease
	killWait  = 2 * time.Second // the fair lock's wait timeout
	// slack covers process scheduling on a loaded 2-core machine; the bounds
	// themselves are the library's documented ones.
	slack = 750 * time.Millisecond
)

// A holder killed mid-hold passes the lock on within its lease: a waiter
// already waiting gets it within the hold's remaining TTL (plus 1 ms and a
// round trip), and with a greater token.
func TestKilledHolderPassesOnWithinItsLease(t *testing.T) {
	for _, lock := range []string{"fair", "reentrant"} {
		t.Run(lock, func(t *testing.T) {
			srv := sharedServer(t)
			c := client(t, srv.Addr)
			name := lockName(t)
			w := startWorker(t, workerSpec{Lock: lock, Addr: srv.Addr, Name: name, Lease: killLease, Wait: killWait, Label: "holder"})
			token := w.held(30 * time.Second)

			next := newHandle(t, lock, c, name, killLease)
			done := acquired(next.Lock, 10*killLease)
			if lock == "fair" {
				eventually(t, 5*time.Second, "the waiter queued", func() bool {
					return slices.Equal(queueOf(t, c, name), []int{os.Getpid()})
				})
			}
			// Let the watchdog renew at least once, then kill mid-lease.
			time.Sleep(killLease / 2)
			w.kill()
			killed := time.Now()
			ttl, err := next.TTL(context.Background())
			if err != nil || ttl <= 0 {
				t.Fatalf("TTL right after the kill = %v, %v; want the dead holder's remaining lease", ttl, err)
			}
			r := <-done
			if r.err != nil {
				t.Fatalf("the waiter's Lock: %v", r.err)
			}
			delay := r.at.Sub(killed)
			t.Logf("%s: lock passed on %v after SIGKILL; remaining TTL at the kill %v, lease %v (bound)", lock, delay.Round(time.Millisecond), ttl, killLease)
			if delay > killLease+slack || delay > ttl+slack {
				t.Errorf("passed on after %v: want within the remaining lease %v (lease %v) plus slack %v", delay, ttl, killLease, slack)
			}
			if next.Token() <= token {
				t.Errorf("the next holder's token %d is not greater than the dead holder's %d", next.Token(), token)
			}
			if err := next.Unlock(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Killed waiters at the head of a fair queue delay the live waiter behind
// them by at most the documented eviction bound (fair/doc.go, guarantee 4):
// one wait timeout plus one heartbeat interval (wait timeout / 3) and a
// round trip, whether one or five of them died, since they die together.
func TestKilledHeadWaitersDelayTheQueueByTheEvictionBound(t *testing.T) {
	bound := killWait + killWait/3
	for _, dead := range []int{1, 5} {
		t.Run(map[int]string{1: "one", 5: "five"}[dead], func(t *testing.T) {
			srv := sharedServer(t)
			c := client(t, srv.Addr)
			name := lockName(t)
			holder := newHandle(t, "fair", c, name, 30*time.Second)
			if err := holder.Lock(context.Background()); err != nil {
				t.Fatal(err)
			}
			var pids []int
			var workers []*worker
			for range dead {
				w := startWorker(t, workerSpec{Lock: "fair", Addr: srv.Addr, Name: name, Lease: killLease, Wait: killWait, Label: "doomed"})
				pids = append(pids, w.pid())
				workers = append(workers, w)
				// Join one at a time, so the queue order is known.
				eventually(t, 10*time.Second, "worker queued", func() bool { return slices.Equal(queueOf(t, c, name), pids) })
			}
			live := newHandle(t, "fair", c, name, 30*time.Second)
			done := acquired(live.Lock, 10*bound)
			eventually(t, 5*time.Second, "the live waiter queued last", func() bool {
				return slices.Equal(queueOf(t, c, name), append(slices.Clone(pids), os.Getpid()))
			})
			// Let every worker's heartbeat refresh its deadline at least
			// once, then kill them all and release at once: the hand-off
			// goes to a dead waiter Redis still counts as live.
			time.Sleep(killWait / 2)
			for _, w := range workers {
				w.kill()
			}
			killed := time.Now()
			if err := holder.Unlock(context.Background()); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatalf("the live waiter's Lock: %v", r.err)
			}
			delay := r.at.Sub(killed)
			t.Logf("%d dead head waiter(s): the live waiter behind them waited %v after the kill; bound %v (wait timeout %v + heartbeat %v)",
				dead, delay.Round(time.Millisecond), bound, killWait, killWait/3)
			if delay > bound+slack {
				t.Errorf("the live waiter got the lock %v after the kill: want at most %v plus slack %v", delay, bound, slack)
			}
			if err := live.Unlock(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A head waiter killed while the lock stays held is evicted by the live
// waiters' heartbeat before the release: the release then hands the lock to
// the live waiter at once.
func TestKilledWaiterIsEvictedWhileTheLockIsHeld(t *testing.T) {
	srv := sharedServer(t)
	c := client(t, srv.Addr)
	name := lockName(t)
	holder := newHandle(t, "fair", c, name, 30*time.Second)
	if err := holder.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	w := startWorker(t, workerSpec{Lock: "fair", Addr: srv.Addr, Name: name, Lease: killLease, Wait: killWait, Label: "doomed"})
	eventually(t, 10*time.Second, "worker queued", func() bool { return slices.Equal(queueOf(t, c, name), []int{w.pid()}) })
	live := newHandle(t, "fair", c, name, 30*time.Second)
	done := acquired(live.Lock, 30*time.Second)
	eventually(t, 5*time.Second, "the live waiter queued", func() bool {
		return slices.Equal(queueOf(t, c, name), []int{w.pid(), os.Getpid()})
	})
	w.kill()
	killed := time.Now()
	eventually(t, killWait+killWait/3+slack, "the dead waiter evicted", func() bool {
		return slices.Equal(queueOf(t, c, name), []int{os.Getpid()})
	})
	t.Logf("the dead waiter was gone from the queue %v after SIGKILL (bound %v)", time.Since(killed).Round(time.Millisecond), killWait+killWait/3)
	released := time.Now()
	if err := holder.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("hand-off to the live waiter took %v after the release", r.at.Sub(released).Round(time.Microsecond))
	if d := r.at.Sub(released); d > slack {
		t.Errorf("the live waiter got the lock %v after the release: the dead one should have been evicted already", d)
	}
	_ = live.Unlock(context.Background())
}
