package faults

// Failovers during holds, on Sentinel and on a 3-master Redis Cluster
// (docs/deployments.md). Each test owns its deployment.
//
// "Gentle": the replica has every write when it is promoted (Sentinel:
// SENTINEL FAILOVER after WAIT; Cluster: CLUSTER FAILOVER, which waits for
// the replica to catch up). The hold survives: its renewals go to the new
// master and succeed.
//
// "Forced": the replica's link is cut first, so an acquisition made after
// the cut exists on the old master only, and the promotion loses it (as a
// crash of a master under asynchronous replication can). The link is cut by
// disabling the default user on the master, which the replica (and nothing
// else) logs in as; the test's clients log in as their own user. The loser
// must find out at its next renewal (Lost closes), the next holder's token
// must be above every token seen before, and so no hold is ever silently
// doubled with a token that does not rise.
//
// An owner made with the defaults keeps a presence on Sentinel and on
// Cluster (presenceKept), and these tests' holders do: the gentle run's
// hold survives with its subscription following the master
// (sentinel_presence_test.go and cluster_presence_test.go have the runs
// that count).

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

const (
	appUser     = "app"
	appPassword = "app-secret"
	// failLease is the lease of the holds that live through a failover:
	// renewed every second, so a lost hold is noticed within a second of
	// the new master serving.
	failLease = 3 * time.Second
)

// addAppUser creates the clients' user on every node: ACLs are not
// replicated.
func addAppUser(t *testing.T, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n})
		err := c.Do(context.Background(), "ACL", "SETUSER", appUser, "on", ">"+appPassword, "~*", "&*", "+@all").Err()
		_ = c.Close()
		if err != nil {
			t.Fatalf("ACL SETUSER on %s: %v", n, err)
		}
	}
}

// cutReplicas stops replication from master: the default user, which its
// replica logs in as, is disabled, and the replica's link is dropped. The
// test's clients, logged in as appUser, go on writing to master alone.
func cutReplicas(t *testing.T, master string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: master, Username: appUser, Password: appPassword})
	defer c.Close()
	ctx := context.Background()
	must(t, c.Do(ctx, "ACL", "SETUSER", "default", "off").Err())
	must(t, c.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err())
	eventually(t, 5*time.Second, "the replica's link is down", func() bool {
		info, _ := c.Info(ctx, "replication").Result()
		return strings.Contains(info, "connected_slaves:0")
	})
}

// restoreDefault lets the default user in again on node.
func restoreDefault(t *testing.T, node string) {
	c := redis.NewClient(&redis.Options{Addr: node, Username: appUser, Password: appPassword})
	defer c.Close()
	_ = c.Do(context.Background(), "ACL", "SETUSER", "default", "on").Err()
}

// usableAgain measures how long after start a fair lock on c can be used
// again (one script call succeeds on the new master, as newMaster says).
func usableAgain(t *testing.T, c redis.UniversalClient, start time.Time, newMaster func() bool) time.Duration {
	t.Helper()
	name := lockName(t)
	m, err := fair.New(redistest.Owner(c), name)
	if err != nil {
		t.Fatal(err)
	}
	var took time.Duration
	eventually(t, 30*time.Second, "the lock is usable on the new master", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if !newMaster() {
			return false
		}
		ok, err := m.TryLock(ctx, 0, time.Second)
		if err != nil || !ok {
			return false
		}
		took = time.Since(start)
		_ = m.Unlock(ctx)
		return true
	})
	return took
}

// afterFailover checks a hold that lived through a failover, and the next
// hold: gentle, the hold survives its renewals on the new master and the
// next holder waits for its Unlock; forced, its acquisition is gone, Lost
// closes at its next renewal, and the next holder's token is above every
// token seen before.
func afterFailover(t *testing.T, forced bool, a *fair.Mutex, tokA int64, b *fair.Mutex) {
	t.Helper()
	ctx := context.Background()
	if forced {
		select {
		case <-a.Lost():
		case <-time.After(failLease + 5*time.Second):
			t.Fatal("the holder whose acquisition the failover lost never saw Lost()")
		}
		ok, err := b.TryLock(ctx, 10*time.Second, 0)
		if !ok || err != nil {
			t.Fatalf("the next holder after a forced failover: %v, %v", ok, err)
		}
	} else {
		time.Sleep(failLease / 3 * 2) // two renewals on the new master
		if isClosed(a.Lost()) {
			t.Fatal("a hold the promoted replica had was lost in a gentle failover")
		}
		if ok, err := b.TryLock(ctx, 0, 0); ok || err != nil {
			t.Fatalf("a second holder beside a hold that survived the failover: %v, %v", ok, err)
		}
		must(t, a.Unlock(ctx))
		ok, err := b.TryLock(ctx, 10*time.Second, 0)
		if !ok || err != nil {
			t.Fatalf("the next holder after a gentle failover: %v, %v", ok, err)
		}
	}
	if tokB := b.Token(); tokB <= tokA {
		t.Fatalf("token %d after the failover, not above %d before it", tokB, tokA)
	}
	must(t, b.Unlock(ctx))
}

func TestSentinelFailoverDuringAHold(t *testing.T) {
	for _, forced := range []bool{false, true} {
		t.Run(map[bool]string{false: "gentle", true: "forced"}[forced], func(t *testing.T) {
			g := redistest.NewSentinelGroup(t)
			addAppUser(t, g.Master, g.Replica)
			newClient := func() *redis.Client {
				c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.SentinelMaster,
					SentinelAddrs: g.Sentinels, Username: appUser, Password: appPassword})
				t.Cleanup(func() { _ = c.Close() })
				return c
			}
			ca, cb, probe := newClient(), newClient(), newClient()
			presenceKept(t, "Sentinel", ca)
			ctx := context.Background()
			name := lockName(t)
			a, err := fair.New(redistest.Owner(ca), name, fairlock.WithLease(failLease))
			must(t, err)
			b, err := fair.New(redistest.Owner(cb), name)
			must(t, err)
			if forced {
				cutReplicas(t, g.Master)
				defer restoreDefault(t, g.Master)
			}
			must(t, a.Lock(ctx))
			tokA := a.Token()
			if !forced {
				// The replica has the hold before it is promoted.
				must(t, probe.Do(ctx, "WAIT", 1, 5000).Err())
			}

			sentinel := redis.NewSentinelClient(&redis.Options{Addr: g.Sentinels[0]})
			defer sentinel.Close()
			start := time.Now()
			must(t, sentinel.Failover(ctx, redistest.SentinelMaster).Err())
			took := usableAgain(t, probe, start, func() bool {
				addr, err := sentinel.GetMasterAddrByName(ctx, redistest.SentinelMaster).Result()
				return err == nil && addr[0]+":"+addr[1] == g.Replica
			})
			t.Logf("Sentinel, %s failover: the lock was usable again %v after SENTINEL FAILOVER", map[bool]string{false: "gentle", true: "forced"}[forced], took.Round(time.Millisecond))
			afterFailover(t, forced, a, tokA, b)
		})
	}
}

func TestClusterFailoverDuringAHold(t *testing.T) {
	for _, forced := range []bool{false, true} {
		t.Run(map[bool]string{false: "gentle", true: "forced"}[forced], func(t *testing.T) {
			g := redistest.NewClusterGroup(t)
			addAppUser(t, g.Nodes...)
			newClient := func() *redis.ClusterClient {
				c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: g.Nodes, Username: appUser, Password: appPassword})
				t.Cleanup(func() { _ = c.Close() })
				return c
			}
			ca, cb, probe := newClient(), newClient(), newClient()
			presenceKept(t, "Cluster", ca)
			ctx := context.Background()
			name := lockName(t)
			key := holdKey("fair", name)
			master, replica := shardOf(t, probe, key)
			a, err := fair.New(redistest.Owner(ca), name, fairlock.WithLease(failLease))
			must(t, err)
			b, err := fair.New(redistest.Owner(cb), name)
			must(t, err)
			if forced {
				cutReplicas(t, master)
				defer restoreDefault(t, master)
			}
			must(t, a.Lock(ctx))
			tokA := a.Token()

			rc := redis.NewClient(&redis.Options{Addr: replica, Username: appUser, Password: appPassword})
			defer rc.Close()
			start := time.Now()
			if forced {
				must(t, rc.Do(ctx, "CLUSTER", "FAILOVER", "FORCE").Err())
			} else {
				must(t, rc.Do(ctx, "CLUSTER", "FAILOVER").Err())
			}
			took := usableAgain(t, probe, start, func() bool {
				role, err := rc.Do(ctx, "ROLE").Slice()
				return err == nil && len(role) > 0 && role[0] == "master"
			})
			t.Logf("Cluster, %s failover: the lock was usable again %v after CLUSTER FAILOVER%s", map[bool]string{false: "gentle", true: "forced"}[forced],
				took.Round(time.Millisecond), map[bool]string{false: "", true: " FORCE"}[forced])
			afterFailover(t, forced, a, tokA, b)
		})
	}
}

// presenceKept checks that an owner made with the defaults on c, a client
// of the deployment named, keeps a presence, as WithPresence does.
func presenceKept(t *testing.T, deployment string, c redis.UniversalClient) {
	t.Helper()
	for _, opts := range [][]fairlock.OwnerOption{nil, {fairlock.WithPresence()}} {
		o, err := fairlock.NewOwner(c, opts...)
		if err != nil {
			t.Fatalf("%s: NewOwner(client, %d options) = %v", deployment, len(opts), err)
		}
		if !o.KeepsPresence() {
			t.Errorf("%s: an owner made with %d options keeps no presence", deployment, len(opts))
		}
		_ = o.Close(context.Background())
	}
}

// shardOf returns the master that serves key and its replica.
func shardOf(t *testing.T, c *redis.ClusterClient, key string) (master, replica string) {
	t.Helper()
	ctx := context.Background()
	slot, err := c.ClusterKeySlot(ctx, key).Result()
	must(t, err)
	shards, err := c.ClusterShards(ctx).Result()
	must(t, err)
	for _, sh := range shards {
		mine := false
		for _, r := range sh.Slots {
			if slot >= r.Start && slot <= r.End {
				mine = true
			}
		}
		if !mine {
			continue
		}
		for _, n := range sh.Nodes {
			addr := fmt.Sprintf("%s:%d", n.IP, n.Port)
			if n.Role == "master" {
				master = addr
			} else {
				replica = addr
			}
		}
	}
	if master == "" || replica == "" {
		t.Fatalf("no master and replica for slot %d: %+v", slot, shards)
	}
	return master, replica
}
