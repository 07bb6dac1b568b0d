package faults

// Presence on Sentinel (docs/presence.md, "Failovers"). SENTINEL FAILOVER
// under a holder that keeps a presence (a process of its own), with a
// waiter queued (an owner of the test's, made with the defaults): the new
// master has the hold and none of the subscriptions. The waiter must not
// end the live hold, however its subscription and the holder's move; once
// both have followed the master, a SIGKILL of the holder must pass the
// lock on within presenceBound, as on a single server.
//
// FAULTS_FAILOVERS sets the number of failovers (5 unless set; the closing
// notes' figures are of 20): each waits for the old master to be a linked
// replica again, about 10 s.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// failoverWatch is how long a run watches the live hold after Sentinel
// names the new master: ten graces, and the time a client takes to learn
// of the switch many times over.
const failoverWatch = 2 * time.Second

func failoverRuns(t *testing.T) int {
	t.Helper()
	if v := os.Getenv("FAULTS_FAILOVERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("FAULTS_FAILOVERS=%q: want a positive number", v)
		}
		return n
	}
	return 5
}

func TestPresenceSentinelFailoverEndsNoLiveHold(t *testing.T) {
	g := redistest.NewSentinelGroup(t)
	ctx := context.Background()
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: g.Sentinels[0]})
	defer func() { _ = sentinel.Close() }()
	newClient := func() *redis.Client {
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.SentinelMaster, SentinelAddrs: g.Sentinels})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	probe := newClient()
	owner, err := fairlock.NewOwner(newClient())
	must(t, err)
	defer func() { _ = owner.Close(ctx) }()
	if !owner.KeepsPresence() {
		t.Fatal("an owner made with the defaults on Sentinel keeps no presence")
	}
	addr := "sentinel=" + strings.Join(g.Sentinels, ",")
	runs := failoverRuns(t)
	var delays []time.Duration
	for i := range runs {
		name := fmt.Sprintf("%s-%d", lockName(t), i)
		w := startWorker(t, workerSpec{Lock: "fair+presence", Addr: addr, Name: name, Lease: presenceLease, Wait: killWait, Label: "holder"})
		token := w.held(30 * time.Second)
		next, err := fair.New(owner, name, fairlock.WithLease(presenceLease), fairlock.WithWaitTimeout(killWait))
		must(t, err)
		done := acquired(next.Lock, time.Minute)
		queue := transport.QueueKeys(transport.FairBase(name))[1]
		eventually(t, 5*time.Second, "the waiter queued", func() bool {
			n, err := probe.LLen(ctx, queue).Result()
			return err == nil && n == 1
		})
		from := masterOf(t, sentinel)
		must(t, probe.Do(ctx, "WAIT", 1, 5000).Err()) // the replica has the hold
		eventually(t, 30*time.Second, "SENTINEL FAILOVER accepted", func() bool { return sentinel.Failover(ctx, redistest.SentinelMaster).Err() == nil })
		eventually(t, 30*time.Second, "Sentinel names the promoted replica", func() bool { return masterOf(t, sentinel) != from })
		to := masterOf(t, sentinel)

		// The holder lives: its hold stays, on the new master, while the
		// subscriptions move; then the holder dies.
		liveHoldSurvives(t, i, done, to, holdKey("fair", name), token, "Sentinel named "+to)
		delays = append(delays, killedPassesOn(t, i, w, token, next, done, "the waiter's Lock on the new master"))
		must(t, next.Unlock(ctx))
		if i < runs-1 {
			settled(t, sentinel, from)
		}
	}
	slices.Sort(delays)
	t.Logf("Sentinel: %d failovers under a live holder with a waiter queued: no live hold ended; a holder SIGKILLed after each passed on in %v (min), %v (median), %v (max); bound %v",
		runs, delays[0].Round(time.Millisecond), delays[len(delays)/2].Round(time.Millisecond), delays[len(delays)-1].Round(time.Millisecond), presenceBound)
}

// liveHoldSurvives watches, for failoverWatch after a failover (what, for
// the message), that done (the waiter's Lock) does not return while the
// holder of token lives; then checks that the new master at addr has that
// live hold under key, and waits for both the holder's and the waiter's
// presence subscriptions to be there.
func liveHoldSurvives(t *testing.T, run int, done <-chan result, addr, key string, token int64, what string) {
	t.Helper()
	watchEnd := time.Now().Add(failoverWatch)
	for time.Now().Before(watchEnd) {
		select {
		case r := <-done:
			t.Fatalf("run %d: the waiter took the lock (err %v) %v after %s, while its holder lived",
				run, r.err, failoverWatch-time.Until(watchEnd), what)
		case <-time.After(20 * time.Millisecond):
		}
	}
	direct := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = direct.Close() }()
	hold, err := direct.Get(context.Background(), key).Result()
	if owner, held := holdOf(hold); err != nil || owner == "" || held != token {
		t.Fatalf("run %d: the new master %s has %q (%v), not the live holder's hold (token %d)", run, addr, hold, err, token)
	}
	eventually(t, 10*time.Second, "the holder's and the waiter's subscriptions on the new master", func() bool {
		return len(presenceChannels(t, addr)) >= 2
	})
}

// presenceChannels are the presence channels subscribed on the server at
// addr (a Cluster node counts its own clients only).
func presenceChannels(t *testing.T, addr string) []string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = c.Close() }()
	chans, err := c.PubSubChannels(context.Background(), "fairlock:presence:*").Result()
	if err != nil {
		t.Fatalf("PUBSUB CHANNELS on %s: %v", addr, err)
	}
	return chans
}

// masterOf is the master Sentinel names.
func masterOf(t *testing.T, s *redis.SentinelClient) string {
	t.Helper()
	addr, err := s.GetMasterAddrByName(context.Background(), redistest.SentinelMaster).Result()
	if err != nil || len(addr) != 2 {
		return ""
	}
	return addr[0] + ":" + addr[1]
}

// settled waits until old, the master before the last failover, is a
// replica with its link up again, so that the next failover can promote it.
func settled(t *testing.T, s *redis.SentinelClient, old string) {
	t.Helper()
	eventually(t, 60*time.Second, old+" a linked replica again", func() bool {
		replicas, err := s.Replicas(context.Background(), redistest.SentinelMaster).Result()
		if err != nil {
			return false
		}
		for _, r := range replicas {
			if r["ip"]+":"+r["port"] == old && r["flags"] == "slave" && r["master-link-status"] == "ok" {
				return true
			}
		}
		return false
	})
}

// A worker pool keeps its pace through a Sentinel failover. Four goroutines
// of one owner (go-redis's defaults) take turns on one lock, each Lock with
// a 10 s deadline, each hold 20 ms, while SENTINEL FAILOVER runs without
// WAIT: the releases and leaves sent between the promotion and the
// clients' switch reach only the old master. Before, the new master kept
// those holds and entries (its owner lives: nobody passes them over) and
// the waiters' hub stayed on the old master: the pool stopped for 9-10 s
// after each failover and Locks timed out. Now the owner replays its exits
// and moves its hub when it learns of the switch: the largest gap between
// two acquisitions must stay under a quarter of the wait timeout (a stale
// entry would cost the wait timeout, a stale hold the lease), with tokens
// rising. A hold the old master granted in that second is lost, and
// another goroutine may take the lock on the new master: each goroutine
// works as docs/reliability.md says, watching Lost, and no two may be in
// the critical section with neither hold lost (the owner ends the lost
// one before it returns the other's Lock).
func TestSentinelFailoverDoesNotStopAPool(t *testing.T) {
	g := redistest.NewSentinelGroup(t)
	ctx := context.Background()
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: g.Sentinels[0]})
	defer func() { _ = sentinel.Close() }()
	client := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.SentinelMaster, SentinelAddrs: g.Sentinels})
	defer func() { _ = client.Close() }()
	poolThroughFailover(t, "Sentinel", client, func() {
		from := masterOf(t, sentinel)
		eventually(t, 30*time.Second, "SENTINEL FAILOVER accepted", func() bool { return sentinel.Failover(ctx, redistest.SentinelMaster).Err() == nil })
		eventually(t, 30*time.Second, "Sentinel names the promoted replica", func() bool { return masterOf(t, sentinel) != from })
	})
}

// poolThroughFailover runs four goroutines of one owner on client taking
// turns on one lock, runs failover (which returns once the new master is
// named) two seconds in, goes on five seconds more, and checks the pool's
// pace: no two goroutines counting on a hold at once, tokens rising, no
// Lock error, and no gap between two acquisitions longer than a quarter of
// the wait timeout.
func poolThroughFailover(t *testing.T, deployment string, client redis.UniversalClient, failover func(), opts ...fairlock.OwnerOption) {
	t.Helper()
	ctx := context.Background()
	owner, err := fairlock.NewOwner(client, opts...)
	must(t, err)
	defer func() { _ = owner.Close(ctx) }()
	name := lockName(t)

	type acq struct {
		at    time.Time
		token int64
	}
	var mu sync.Mutex
	var acqs []acq
	var overlaps, cutShort atomic.Int32
	var lockErrs []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// working is, per goroutine, the Lost of the hold it works under; nil
	// outside the critical section.
	var working [4]atomic.Pointer[<-chan struct{}]
	believed := func(lost *<-chan struct{}) bool {
		if lost == nil {
			return false
		}
		select {
		case <-*lost:
			return false
		default:
			return true
		}
	}
	for i := range working {
		m, err := fair.New(owner, name)
		must(t, err)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := m.Lock(lctx)
				cancel()
				if err != nil {
					mu.Lock()
					lockErrs = append(lockErrs, err.Error())
					mu.Unlock()
					continue
				}
				lost := m.Lost()
				working[i].Store(&lost) // in first, then look: of two at once, the later sees the earlier
				for j := range working {
					if j != i && believed(working[j].Load()) && believed(&lost) {
						overlaps.Add(1)
					}
				}
				mu.Lock()
				acqs = append(acqs, acq{time.Now(), m.Token()})
				mu.Unlock()
				select {
				case <-time.After(20 * time.Millisecond):
				case <-lost:
					cutShort.Add(1)
				}
				working[i].Store(nil)
				_ = m.Unlock(ctx) // ErrLockLost once: a hold the new master never had
			}
		})
	}
	time.Sleep(2 * time.Second)
	failover()
	named := time.Now()
	time.Sleep(5 * time.Second) // the clients' switch (about a second), and a wait timeout's half after it
	close(stop)
	stopped := time.Now()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	var maxGap time.Duration
	var after int
	for i := 1; i < len(acqs); i++ {
		if acqs[i].token <= acqs[i-1].token {
			t.Errorf("token %d after %d: tokens must rise", acqs[i].token, acqs[i-1].token)
		}
		maxGap = max(maxGap, acqs[i].at.Sub(acqs[i-1].at))
		if acqs[i].at.After(named) {
			after++
		}
	}
	if len(acqs) > 0 {
		maxGap = max(maxGap, stopped.Sub(acqs[len(acqs)-1].at)) // a pool that stopped for good
	}
	t.Logf("%s failover under a pool of 4: %d acquisitions (%d after the new master was named), largest gap %v, %d Lock errors, %d holds lost while worked under, %d overlaps",
		deployment, len(acqs), after, maxGap.Round(time.Millisecond), len(lockErrs), cutShort.Load(), overlaps.Load())
	if n := overlaps.Load(); n > 0 {
		t.Errorf("%d acquisitions while another goroutine counted on a hold of the lock", n)
	}
	if bound := fairlock.DefaultWaitTimeout / 4; maxGap > bound {
		t.Errorf("the pool stopped for %v (bound %v): a stale hold or entry, or a hub left on the old master", maxGap, bound)
	}
	if len(lockErrs) > 0 {
		t.Errorf("Lock failed %d times across the failover: %v", len(lockErrs), lockErrs[0])
	}
}
