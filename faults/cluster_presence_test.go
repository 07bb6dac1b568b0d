package faults

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// The presence on Cluster (docs/presence.md, "Where it applies"): an owner
// keeps a subscription on every master, since a script sees only its own
// node's. A holder SIGKILLed passes its lock on within the grace and two
// polls whichever master serves the lock; a CLUSTER FAILOVER under a live
// holder with a waiter queued ends no live hold, and a holder killed after
// it passes on as fast on the promoted replica.

// clusterOf starts a 3-master cluster of the test's own and returns the
// address a worker takes for it, and a new client of it per call.
func clusterOf(t *testing.T) (addr string, newClient func() *redis.ClusterClient) {
	t.Helper()
	g := redistest.NewClusterGroup(t)
	return "cluster=" + strings.Join(g.Nodes, ","), func() *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: g.Nodes})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
}

// queued is true once the fair lock name has n waiters queued.
func queued(t *testing.T, c redis.UniversalClient, name string, n int) func() bool {
	return func() bool { return waitingFor(t, "fair", c, name) == n }
}

func TestPresenceClusterKilledHolderPassesOnOnEveryMaster(t *testing.T) {
	addr, newClient := clusterOf(t)
	probe := newClient()
	owner, err := fairlock.NewOwner(newClient())
	must(t, err)
	defer func() { _ = owner.Close(context.Background()) }()
	if !owner.KeepsPresence() {
		t.Fatal("an owner made with the defaults on Cluster keeps no presence")
	}
	// Lock names served by each master, perMaster of each.
	const perMaster = 7
	byMaster := map[string][]string{}
	var masters []string
	full := func() bool {
		for _, m := range masters {
			if len(byMaster[m]) < perMaster {
				return false
			}
		}
		return len(masters) == 3
	}
	for i := 0; !full(); i++ {
		name := fmt.Sprintf("%s-%d", lockName(t), i)
		m, _ := shardOf(t, probe, holdKey("fair", name))
		if _, ok := byMaster[m]; !ok {
			masters = append(masters, m)
		}
		if len(byMaster[m]) < perMaster {
			byMaster[m] = append(byMaster[m], name)
		}
	}
	// The waiters' owner keeps a subscription on every master from its
	// first acquisition on, and so does each worker (checked below, with
	// its holder's).
	first, err := fair.New(owner, lockName(t)+"-first")
	must(t, err)
	must(t, first.Lock(context.Background()))
	must(t, first.Unlock(context.Background()))
	for _, m := range masters {
		if chans := presenceChannels(t, m); len(chans) != 1 {
			t.Fatalf("master %s has presence channels %q, want the owner's one", m, chans)
		}
	}
	var all []time.Duration
	for _, m := range masters {
		var delays []time.Duration
		for i, name := range byMaster[m] {
			w := startWorker(t, workerSpec{Lock: "fair+presence", Addr: addr, Name: name, Lease: presenceLease, Wait: killWait, Label: "holder"})
			token := w.held(30 * time.Second)
			next, err := fair.New(owner, name, fairlock.WithLease(presenceLease), fairlock.WithWaitTimeout(killWait))
			must(t, err)
			done := acquired(next.Lock, presenceLease/2)
			eventually(t, 5*time.Second, "the waiter queued", queued(t, probe, name, 1))
			if i == 0 {
				for _, each := range masters {
					if chans := presenceChannels(t, each); len(chans) != 2 {
						t.Fatalf("master %s has presence channels %q, want the owner's and the holder's", each, chans)
					}
				}
			}
			delays = append(delays, killedPassesOn(t, i, w, token, next, done, "the waiter's Lock on "+m))
			must(t, next.Unlock(context.Background()))
		}
		slices.Sort(delays)
		t.Logf("Cluster, locks on master %s: passed on after SIGKILL in %v (min), %v (median), %v (max) over %d runs",
			m, delays[0].Round(time.Millisecond), delays[len(delays)/2].Round(time.Millisecond), delays[len(delays)-1].Round(time.Millisecond), len(delays))
		all = append(all, delays...)
	}
	slices.Sort(all)
	t.Logf("Cluster, 3 masters: passed on after SIGKILL in %v (median), %v (p95), %v (max) over %d runs; bound %v",
		all[len(all)/2].Round(time.Millisecond), all[len(all)*95/100].Round(time.Millisecond), all[len(all)-1].Round(time.Millisecond), len(all), presenceBound)
}

func TestPresenceClusterFailoverEndsNoLiveHold(t *testing.T) {
	addr, newClient := clusterOf(t)
	probe := newClient()
	ctx := context.Background()
	owner, err := fairlock.NewOwner(newClient())
	must(t, err)
	defer func() { _ = owner.Close(ctx) }()
	runs := failoverRuns(t)
	var delays, tookOver []time.Duration
	for i := range runs {
		name := fmt.Sprintf("%s-%d", lockName(t), i)
		key := holdKey("fair", name)
		w := startWorker(t, workerSpec{Lock: "fair+presence", Addr: addr, Name: name, Lease: presenceLease, Wait: killWait, Label: "holder"})
		token := w.held(30 * time.Second)
		next, err := fair.New(owner, name, fairlock.WithLease(presenceLease), fairlock.WithWaitTimeout(killWait))
		must(t, err)
		done := acquired(next.Lock, time.Minute)
		eventually(t, 5*time.Second, "the waiter queued", queued(t, probe, name, 1))
		master, replica := shardOf(t, probe, key)
		rc := redis.NewClient(&redis.Options{Addr: replica, OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			return cn.ReadOnly(ctx).Err()
		}})
		eventually(t, 5*time.Second, "the replica has the hold and the queue", func() bool {
			n, err := rc.LLen(ctx, transport.QueueKeys(transport.FairBase(name))[1]).Result()
			hold, herr := rc.Get(ctx, key).Result()
			_, held := holdOf(hold)
			return err == nil && n == 1 && herr == nil && held == token
		})
		start := time.Now()
		must(t, rc.Do(ctx, "CLUSTER", "FAILOVER").Err())
		eventually(t, 30*time.Second, "the replica promoted", func() bool {
			role, err := rc.Do(ctx, "ROLE").Slice()
			return err == nil && len(role) > 0 && role[0] == "master"
		})
		tookOver = append(tookOver, time.Since(start))

		// The holder lives: its hold stays, on the promoted replica, while
		// the subscriptions move there; then the holder dies.
		_ = rc.Close()
		liveHoldSurvives(t, i, done, replica, key, token, replica+" was promoted in place of "+master)
		delays = append(delays, killedPassesOn(t, i, w, token, next, done, "the waiter's Lock on the promoted replica"))
		must(t, next.Unlock(ctx))
	}
	slices.Sort(delays)
	slices.Sort(tookOver)
	t.Logf("Cluster: %d CLUSTER FAILOVERs (promoted in %v median) under a live holder with a waiter queued: no live hold ended; "+
		"a holder SIGKILLed after each passed on in %v (min), %v (median), %v (max); bound %v",
		runs, tookOver[len(tookOver)/2].Round(time.Millisecond), delays[0].Round(time.Millisecond),
		delays[len(delays)/2].Round(time.Millisecond), delays[len(delays)-1].Round(time.Millisecond), presenceBound)
}

// A worker pool keeps its pace through a CLUSTER FAILOVER of the master
// that serves its lock, as through Sentinel's (poolThroughFailover).
func TestClusterFailoverDoesNotStopAPool(t *testing.T) {
	g := redistest.NewClusterGroup(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: g.Nodes})
	defer func() { _ = client.Close() }()
	ctx := context.Background()
	poolThroughFailover(t, "Cluster", client, func() {
		_, replica := shardOf(t, client, holdKey("fair", lockName(t)))
		rc := redis.NewClient(&redis.Options{Addr: replica})
		defer func() { _ = rc.Close() }()
		must(t, rc.Do(ctx, "CLUSTER", "FAILOVER").Err())
		eventually(t, 30*time.Second, "the replica promoted", func() bool {
			role, err := rc.Do(ctx, "ROLE").Slice()
			return err == nil && len(role) > 0 && role[0] == "master"
		})
	})
}

// Dead waiters are passed over on Cluster as on a single server: three
// waiters whose processes keep a presence are SIGKILLed (and reaped) just
// before the holder's release, and the live waiter behind them (an owner
// without presence) holds within the grace and two polls of it.
func TestPresenceClusterDeadWaitersArePassedOver(t *testing.T) {
	addr, newClient := clusterOf(t)
	probe := newClient()
	ctx := context.Background()
	holders, err := fairlock.NewOwner(newClient())
	must(t, err)
	defer func() { _ = holders.Close(ctx) }()
	live, err := fairlock.NewOwner(newClient(), fairlock.WithoutPresence())
	must(t, err)
	defer func() { _ = live.Close(ctx) }()
	const runs = 6
	var delays []time.Duration
	for i := range runs {
		name := fmt.Sprintf("%s-%d", lockName(t), i)
		holder, err := fair.New(holders, name)
		must(t, err)
		must(t, holder.Lock(ctx))
		var dead []*worker
		for j := range 3 {
			dead = append(dead, startWorker(t, workerSpec{Lock: "fair+presence", Addr: addr, Name: name,
				Lease: presenceLease, Wait: 10 * time.Second, Label: fmt.Sprintf("dead%d", j)}))
			eventually(t, 5*time.Second, "the dead-to-be queued", queued(t, probe, name, j+1))
		}
		next, err := fair.New(live, name, fairlock.WithWaitTimeout(10*time.Second))
		must(t, err)
		done := acquired(next.Lock, presenceLease/2)
		eventually(t, 5*time.Second, "the live waiter queued", queued(t, probe, name, 4))
		for _, w := range dead {
			w.kill()
		}
		released := time.Now()
		must(t, holder.Unlock(ctx))
		delays = append(delays, passedOver(t, i, done, released))
		must(t, next.Unlock(ctx))
	}
	slices.Sort(delays)
	t.Logf("Cluster, three waiters killed just before the release: the live one behind them held after %v (min), %v (median), %v (max) over %d runs; bound %v",
		delays[0].Round(time.Millisecond), delays[runs/2].Round(time.Millisecond), delays[runs-1].Round(time.Millisecond), runs, presenceBound)
}

// An ACL user refused CLUSTER SHARDS (as some managed services leave it
// out) still keeps a presence on Cluster: the masters are read from
// CLUSTER SLOTS instead, which go-redis needs anyway.
func TestPresenceClusterWithoutClusterShards(t *testing.T) {
	g := redistest.NewClusterGroup(t)
	ctx := context.Background()
	for _, n := range g.Nodes {
		c := redis.NewClient(&redis.Options{Addr: n})
		err := c.Do(ctx, "ACL", "SETUSER", "noshards", "on", ">pw", "~*", "&*", "+@all", "-cluster|shards").Err()
		_ = c.Close()
		must(t, err)
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: g.Nodes, Username: "noshards", Password: "pw"})
	defer func() { _ = client.Close() }()
	if err := client.ClusterShards(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("CLUSTER SHARDS as the user: %v, want NOPERM", err)
	}
	owner, err := fairlock.NewOwner(client)
	must(t, err)
	defer func() { _ = owner.Close(ctx) }()
	m, err := fair.New(owner, lockName(t))
	must(t, err)
	must(t, m.Lock(ctx))
	must(t, m.Unlock(ctx))
	for _, n := range g.Nodes {
		c := redis.NewClient(&redis.Options{Addr: n})
		role, err := c.Do(ctx, "ROLE").Slice()
		_ = c.Close()
		must(t, err)
		if chans := presenceChannels(t, n); role[0] == "master" && len(chans) != 1 {
			t.Errorf("master %s has presence channels %q, want the owner's", n, chans)
		}
	}
}
