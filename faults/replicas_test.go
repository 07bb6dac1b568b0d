package faults

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/redis/go-redis/v9"
)

// sentinelClient is a client of g's master through its sentinels, logged in
// as appUser, closed when the test ends.
func sentinelClient(t *testing.T, g *redistest.SentinelGroup) *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.SentinelMaster,
		SentinelAddrs: g.Sentinels, Username: appUser, Password: appPassword})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// WithReplicas: a Lock returns once the replica has the hold. With the
// replica's link cut, it returns ErrNotReplicated after the timeout, and
// the acquisition is undone: the lock is free (fair: the hand-off is passed
// on), nobody holds a hold that a failover would lose.
func TestWithReplicasWaitsForTheReplica(t *testing.T) {
	g := redistest.NewSentinelGroup(t)
	addAppUser(t, g.Master, g.Replica)
	c := sentinelClient(t, g)
	replica := redis.NewClient(&redis.Options{Addr: g.Replica, Username: appUser, Password: appPassword})
	defer replica.Close()
	ctx := context.Background()
	const timeout = 300 * time.Millisecond

	type locker interface {
		Lock(context.Context) error
		Unlock(context.Context) error
		IsLocked(context.Context) (bool, error)
	}
	kinds := map[string]func(name string) (locker, string){
		"fair": func(name string) (locker, string) {
			m, err := fair.New(redistest.Owner(c), name, fairlock.WithReplicas(1, timeout))
			must(t, err)
			return m, holdKey("fair", name)
		},
		"reentrant": func(name string) (locker, string) {
			m, err := reentrant.New(redistest.Owner(c), name, fairlock.WithReplicas(1, timeout))
			must(t, err)
			return m, holdKey("reentrant", name)
		},
	}
	for _, kind := range []string{"fair", "reentrant"} {
		m, key := kinds[kind](lockName(t))
		must(t, m.Lock(ctx))
		// WAIT returned: the replica has the hold, read there at once.
		if v, err := replica.Get(ctx, key).Result(); err != nil || v == "" {
			t.Fatalf("%s: the replica does not have the hold when Lock returns: %q, %v", kind, v, err)
		}
		must(t, m.Unlock(ctx))
	}

	cutReplicas(t, g.Master)
	defer restoreDefault(t, g.Master)
	for _, kind := range []string{"fair", "reentrant"} {
		m, _ := kinds[kind](lockName(t))
		start := time.Now()
		err := m.Lock(ctx)
		took := time.Since(start)
		if !errors.Is(err, fairlock.ErrNotReplicated) {
			t.Fatalf("%s: Lock with the replica cut off = %v, want ErrNotReplicated", kind, err)
		}
		if took < timeout {
			t.Fatalf("%s: Lock failed after %v, before the %v WAIT timeout", kind, took, timeout)
		}
		if held, err := m.IsLocked(ctx); held || err != nil {
			t.Fatalf("%s: after the undone acquisition the lock is held: %v, %v", kind, held, err)
		}
		t.Logf("%s: ErrNotReplicated after %v: %v", kind, took.Round(time.Millisecond), err)
	}

	// A hand-off from the queue is claimed with WAIT before Lock returns;
	// not acknowledged, it is passed on, to nobody here: the lock is free.
	name := lockName(t)
	a, err := fair.New(redistest.Owner(c), name)
	must(t, err)
	b, err := fair.New(redistest.Owner(c), name, fairlock.WithReplicas(1, timeout))
	must(t, err)
	must(t, a.Lock(ctx))
	waiting := acquired(b.Lock, 10*time.Second)
	eventually(t, 5*time.Second, "b is queued", func() bool { return len(queueOf(t, c, name)) == 1 })
	must(t, a.Unlock(ctx))
	r := <-waiting
	if !errors.Is(r.err, fairlock.ErrNotReplicated) {
		t.Fatalf("a waiter handed an unreplicated hold: Lock = %v, want ErrNotReplicated", r.err)
	}
	if held, err := a.IsLocked(ctx); held || err != nil {
		t.Fatalf("after the hand-off was passed on the lock is held: %v, %v", held, err)
	}
}

// BenchmarkLockUnlockReplicas is the cost of WithReplicas: Lock and Unlock
// of a fair lock on a Sentinel master with one replica on loopback,
// without and with WAIT 1.
func BenchmarkLockUnlockReplicas(b *testing.B) {
	g := redistest.NewSentinelGroup(b)
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.SentinelMaster, SentinelAddrs: g.Sentinels})
	defer c.Close()
	ctx := context.Background()
	for _, replicas := range []int{0, 1} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			var opts []fair.MutexOption
			if replicas > 0 {
				opts = append(opts, fairlock.WithReplicas(replicas, time.Second))
			}
			m, err := fair.New(redistest.Owner(c), fmt.Sprintf("bench-%d-%d", replicas, time.Now().UnixNano()), opts...)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := m.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := m.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
