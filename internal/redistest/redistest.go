// Package redistest gives fairlock's tests their Redis: miniredis whose
// clock is the library's fake clock, and real deployments of redis-server
// processes (Deployments: a plain server, a one-node cluster, a cluster of 3
// masters with a replica each, a master and replica behind 3 sentinels) for
// concurrency tests.
//
// Real deployments come from FAIRLOCK_REDIS_ADDR, FAIRLOCK_CLUSTER_ADDR,
// FAIRLOCK_CLUSTER3_ADDRS and FAIRLOCK_SENTINEL_ADDRS (as .ci/run sets
// them), or are started by the test binary, once, when redis-server (or
// the server FAIRLOCK_SERVER_BIN names, valkey-server say) is on PATH. Without either a test that needs them is skipped, except under
// CI=true, where it fails.
package redistest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/core"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// Epoch is where every fake clock starts.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Mini starts a miniredis whose TIME and key expiry follow a fake clock, and
// returns both and a client. Everything is closed when the test ends.
func Mini(t testing.TB) (*miniredis.Miniredis, *clock.Fake, *redis.Client) {
	t.Helper()
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		t.Fatalf("starting miniredis: %v", err)
	}
	mr.ClockTTL(true)
	Booted(mr)
	clk := clock.NewFake(Epoch, mr.SetTime)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() {
		_ = client.Close()
		mr.Close()
	})
	return mr, clk, client
}

// NoLeaks checks, when the test ends, that no goroutine it started is left.
// Call it first, so it runs after every other cleanup.
func NoLeaks(t testing.TB) {
	t.Helper()
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		CloseOwners() // pub/sub connections linger by design
		// goleak retries for a while: goroutines that are returning may finish.
		if err := goleak.Find(before); err != nil {
			t.Errorf("background goroutines outlived the test: %v", err)
		}
	})
}

var (
	startMu sync.Mutex
	started = map[string]string{} // kind -> address
)

// Real returns a client of a plain real Redis, closed when the test ends.
func Real(t testing.TB) *redis.Client {
	t.Helper()
	addr := address(t, string(Single), envSingle)
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Cluster returns a client of a real one-node Redis Cluster owning all slots.
func Cluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	addr := address(t, string(Cluster1), envCluster1)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, PoolSize: 64})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func address(t testing.TB, kind, env string) string {
	t.Helper()
	if a := os.Getenv(env); a != "" {
		return a
	}
	startMu.Lock()
	defer startMu.Unlock()
	if a, ok := started[kind]; ok {
		return a
	}
	a, err := startDeployment(serverBin(t), kind)
	if err != nil {
		t.Fatalf("starting redis-server (%s): %v", kind, err)
	}
	started[kind] = a
	return a
}

// freePort returns a loopback port free now. A cluster node also listens on
// its port + 10000 (the cluster bus), so for one the port must be at most
// 55535 and both must be free.
func freePort(cluster bool) (int, error) {
	if !cluster {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer func() { _ = l.Close() }()
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	for range 1000 {
		port := 20000 + rand.IntN(55535-20000+1)
		a, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		b, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000))
		_ = a.Close()
		if err != nil {
			continue
		}
		_ = b.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port pair for a cluster node")
}

// start starts a plain server, or a one-node cluster that owns every slot.
func start(bin string, cluster bool) (string, error) {
	addr, err := startServer(&shared, bin, cluster)
	if err != nil || !cluster {
		return addr, err
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = c.Close() }()
	ctx := context.Background()
	if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		return "", err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, _ := c.ClusterInfo(ctx).Result()
		if strings.Contains(info, "cluster_state:ok") {
			return addr, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("cluster on %s did not become ok", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Main runs a package's tests and stops the servers they started.
func Main(m *testing.M) int {
	code := m.Run()
	startMu.Lock()
	shared.stop()
	startMu.Unlock()
	return code
}

// RealOrMini returns a client of the Redis server CI names
// (FAIRLOCK_REDIS_ADDR), or else of an embedded miniredis, closed when the
// test ends: for the nested modules' tests, which need one server and
// start none of their own. Give each test's lock a Name.
func RealOrMini(t testing.TB) *redis.Client {
	t.Helper()
	addr := os.Getenv(envSingle)
	if addr == "" {
		mr := miniredis.RunT(t)
		Booted(mr)
		addr = mr.Addr()
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Name returns a lock name unique to this test and run, so tests sharing a
// real server never meet.
func Name(t testing.TB) string {
	return fmt.Sprintf("%s-%d", strings.NewReplacer("/", "-", "{", "(", "}", ")").Replace(t.Name()), time.Now().UnixNano())
}

// Exit runs a package's tests, stops the servers they started and exits.
func Exit(m *testing.M) { os.Exit(Main(m)) }

// Fataler is the part of testing.TB (and of *rapid.T) that Quiet uses.
type Fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Quiet waits until cond holds with no wake-up on its way to a waiter: every
// message Redis published has been read by its hub (core.SyncHubs) and taken
// by its waiter (core.Unread). Tests call it before moving a fake clock, so
// a waiter's reaction to a message (arming a timer, say) happens at the fake
// time the message was sent. The bound only catches a hang.
func Quiet(t Fataler, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	synced := false
	for {
		if cond() && Unread() == 0 && Background() == 0 {
			if synced {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			SyncHubs(ctx)
			cancel()
			synced = true
			continue
		}
		synced = false
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// Named returns a client of the same server as c that names its
// connections, so that KillPubSub can cut them alone: other test binaries
// share the server. It is closed when the test ends.
func Named(t testing.TB, c *redis.Client) (client *redis.Client, name string) {
	t.Helper()
	opts := *c.Options()
	opts.ClientName = fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	client = redis.NewClient(&opts)
	t.Cleanup(func() { _ = client.Close() })
	return client, opts.ClientName
}

// KillPubSub closes, on the server admin talks to, the pub/sub connections
// of the clients named name (see Named), and says how many it closed.
func KillPubSub(ctx context.Context, admin *redis.Client, name string) (int, error) {
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		return 0, err
	}
	killed := 0
	for _, line := range strings.Split(list, "\n") {
		if !strings.Contains(line, " name="+name+" ") || strings.Contains(line, " sub=0 ") {
			continue
		}
		id := strings.TrimPrefix(strings.Fields(line)[0], "id=")
		if err := admin.ClientKillByFilter(ctx, "ID", id).Err(); err != nil {
			return killed, err
		}
		killed++
	}
	return killed, nil
}

// Booted marks mr as a server that has served fairlock since long ago
// (core.BootKey): its first acquisitions do not wait for the pause of a
// server that lost its data (hold.lua's settling), which a test's fake
// clock would never reach.
func Booted(mr *miniredis.Miniredis) {
	_ = mr.Set(core.BootKey, "0")
	mr.SetTTL(core.BootKey, 30*24*time.Hour)
}

// LockKeys returns mr's keys but core.BootKey, which outlives every lock
// by design (30 days, refreshed by acquisitions): what a lock leaves.
func LockKeys(mr *miniredis.Miniredis) []string {
	var keys []string
	for _, k := range mr.Keys() {
		if k != core.BootKey {
			keys = append(keys, k)
		}
	}
	return keys
}

// BootedServer is Booted for a real server at addr.
func BootedServer(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = c.Close() }()
	return c.Set(context.Background(), core.BootKey, "0", 30*24*time.Hour).Err()
}

// InboxGoes checks that a lock's inbox channel, subscribed by a wait just
// ended, goes 30 s after that wait however often the lock is taken
// meanwhile: pair (a Lock that takes the lock at once, and its Unlock)
// runs once a second of clk for 40 s, then the inbox channels on mr must
// be gone. A Lock registers on a live channel before its first try (a
// busy lock then needs no second try); one held at that try waited for
// nothing, and must not keep the channel subscribed, or every Lock of a
// lock ever contended would pay to register for as long as it is used.
func InboxGoes(t Fataler, mr *miniredis.Miniredis, clk *clock.Fake, pair func()) {
	t.Helper()
	inboxes := func() []string { return mr.PubSubChannels("*:wake:*") }
	if got := inboxes(); len(got) != 1 {
		t.Fatalf("inbox channels after a wait: %q, want one", got)
	}
	for range 40 {
		pair()
		clk.Advance(time.Second)
	}
	Quiet(t, "the inbox channel unsubscribed 30 s after the last wait", func() bool { return len(inboxes()) == 0 })
	pair()
	if got := inboxes(); len(got) != 0 {
		t.Fatalf("inbox channels after a Lock of a free lock: %q, want none", got)
	}
}
