package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Deployment is a kind of real Redis that a test can run on.
type Deployment string

const (
	// Single is one plain redis-server.
	Single Deployment = "single"
	// Cluster1 is a Redis Cluster of one node that owns every slot.
	Cluster1 Deployment = "cluster"
	// Cluster3 is a Redis Cluster of 3 masters, each with a replica.
	Cluster3 Deployment = "cluster3"
	// Sentinel is a master with one replica, watched by 3 sentinels, the
	// master named SentinelMaster; clients find it through the sentinels.
	Sentinel Deployment = "sentinel"
)

// Deployments lists every deployment, for tests that run on each.
var Deployments = []Deployment{Single, Cluster1, Cluster3, Sentinel}

// SentinelMaster is the name the sentinels know the master by.
const SentinelMaster = "fairlock"

// The environment variables that name deployments already running (.ci/run
// starts them once for every test binary). Without them a test binary
// starts its own, once, and stops it when it exits.
const (
	envSingle   = "FAIRLOCK_REDIS_ADDR"
	envCluster1 = "FAIRLOCK_CLUSTER_ADDR"
	envCluster3 = "FAIRLOCK_CLUSTER3_ADDRS" // comma-separated nodes
	envSentinel = "FAIRLOCK_SENTINEL_ADDRS" // comma-separated sentinels
)

// Client returns a client of deployment d, closed when the test ends: a
// *redis.Client (Single, and Sentinel through redis.NewFailoverClient) or a
// *redis.ClusterClient (Cluster1, Cluster3).
func Client(t testing.TB, d Deployment) redis.UniversalClient {
	t.Helper()
	var c redis.UniversalClient
	switch d {
	case Single:
		return Real(t)
	case Cluster1:
		return Cluster(t)
	case Cluster3:
		addrs := Addrs(t, d)
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: 64})
	case Sentinel:
		addrs := Addrs(t, d)
		c = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: addrs, PoolSize: 64})
	default:
		t.Fatalf("unknown deployment %q", d)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// DefaultClient returns a client of deployment d with go-redis's default
// options, as a user's first program makes it, closed when the test ends.
func DefaultClient(t testing.TB, d Deployment) redis.UniversalClient {
	t.Helper()
	addrs := Addrs(t, d)
	var c redis.UniversalClient
	switch d {
	case Single:
		c = redis.NewClient(&redis.Options{Addr: addrs[0]})
	case Cluster1, Cluster3:
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	case Sentinel:
		c = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: addrs})
	default:
		t.Fatalf("unknown deployment %q", d)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Addrs returns the addresses a client of deployment d is given: the
// server, the cluster's nodes, or the sentinels.
func Addrs(t testing.TB, d Deployment) []string {
	t.Helper()
	env := map[Deployment]string{Single: envSingle, Cluster1: envCluster1, Cluster3: envCluster3, Sentinel: envSentinel}[d]
	if env == "" {
		t.Fatalf("unknown deployment %q", d)
	}
	return strings.Split(address(t, string(d), env), ",")
}

// Clients returns n clients of deployment d.
func Clients(t testing.TB, d Deployment, n int) []redis.UniversalClient {
	t.Helper()
	out := make([]redis.UniversalClient, n)
	for i := range out {
		out[i] = Client(t, d)
	}
	return out
}

// startDeployment starts deployment kind with the redis-server at bin and
// returns its address as its environment variable would give it.
func startDeployment(bin, kind string) (string, error) {
	switch Deployment(kind) {
	case Single:
		addr, err := start(bin, false)
		if err == nil {
			err = BootedServer(addr)
		}
		return addr, err
	case Cluster1:
		return start(bin, true)
	case Cluster3:
		g, err := startCluster3(&shared, bin)
		if err != nil {
			return "", err
		}
		return strings.Join(g.Nodes, ","), nil
	case Sentinel:
		g, err := startSentinel(&shared, bin)
		if err != nil {
			return "", err
		}
		return strings.Join(g.Sentinels, ","), nil
	}
	return "", fmt.Errorf("unknown deployment %q", kind)
}

// servers are processes started, and their directories, to stop and remove
// together.
type servers struct {
	procs []*exec.Cmd
	dirs  []string
}

func (s *servers) stop() {
	for _, p := range s.procs {
		_ = p.Process.Kill()
		_ = p.Wait()
	}
	for _, d := range s.dirs {
		_ = os.RemoveAll(d)
	}
	s.procs, s.dirs = nil, nil
}

// shared are the servers a test binary starts for all its tests, stopped
// by Main (under startMu).
var shared servers

// SentinelGroup is a master and its replica behind 3 sentinels, which know
// the master as SentinelMaster.
type SentinelGroup struct {
	Master, Replica string
	Sentinels       []string
}

// ClusterGroup is a Redis Cluster of 3 masters, each with a replica.
type ClusterGroup struct {
	Nodes []string
}

// NewSentinelGroup starts a Sentinel deployment of the test's own, for tests
// that fail it over; it is stopped when the test ends.
func NewSentinelGroup(t testing.TB) *SentinelGroup {
	t.Helper()
	var own servers
	t.Cleanup(own.stop)
	g, err := startSentinel(&own, serverBin(t))
	if err != nil {
		t.Fatalf("starting a Sentinel deployment: %v", err)
	}
	return g
}

// NewClusterGroup starts a cluster of 3 masters with a replica each, of the
// test's own, for tests that fail it over or move its slots; it is stopped
// when the test ends.
func NewClusterGroup(t testing.TB) *ClusterGroup {
	t.Helper()
	var own servers
	t.Cleanup(own.stop)
	g, err := startCluster3(&own, serverBin(t))
	if err != nil {
		t.Fatalf("starting a 3-master cluster: %v", err)
	}
	return g
}

// ServerBinEnv names the server the test binaries start when no running
// deployment is named: redis-server unless it says otherwise
// (valkey-server: .ci/run's Valkey pass).
const ServerBinEnv = "FAIRLOCK_SERVER_BIN"

// ServerBin is the server binary the test binaries start (ServerBinEnv).
func ServerBin() string {
	if b := os.Getenv(ServerBinEnv); b != "" {
		return b
	}
	return "redis-server"
}

func serverBin(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath(ServerBin())
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed; CI must run real-server tests", ServerBin())
		}
		t.Skip("needs real Redis: install redis-server, or name running servers in FAIRLOCK_REDIS_ADDR and the other FAIRLOCK_*_ADDR(S) variables")
	}
	return bin
}

// startServer starts one redis-server with args on a free port and waits
// until it answers.
func startServer(own *servers, bin string, cluster bool, args ...string) (string, error) {
	port, err := freePort(cluster)
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "fairlock-redis-")
	if err != nil {
		return "", err
	}
	own.dirs = append(own.dirs, dir)
	all := append([]string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}, args...)
	if cluster {
		all = append(all, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "2000")
	}
	cmd := exec.Command(bin, all...)
	if err := cmd.Start(); err != nil {
		return "", err
	}
	own.procs = append(own.procs, cmd)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	return addr, answers(addr)
}

func answers(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = c.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// startCluster3 starts 6 cluster nodes and makes them 3 masters with a
// replica each (redis-cli --cluster create), then waits until every node
// sees the cluster ok and every master has its replica.
func startCluster3(own *servers, bin string) (*ClusterGroup, error) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("a 3-master cluster needs redis-cli: %w", err)
	}
	var addrs []string
	for range 6 {
		addr, err := startServer(own, bin, true)
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		for {
			info, _ := c.ClusterInfo(ctx).Result()
			if strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:6") {
				break
			}
			if time.Now().After(deadline) {
				_ = c.Close()
				return nil, fmt.Errorf("cluster node %s: not ok: %s", addr, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = c.Close()
	}
	// Every node must agree on who serves each slot before tests route.
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer func() { _ = c.Close() }()
	for {
		var masters, replicas atomic.Int32 // the shards are asked at once
		err := c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
			role, err := n.Do(ctx, "ROLE").Slice()
			if err != nil || len(role) == 0 {
				return fmt.Errorf("ROLE: %v", err)
			}
			if role[0] == "master" {
				masters.Add(1)
				if links, _ := role[2].([]any); len(links) != 1 {
					return fmt.Errorf("master %s has %d replicas", n.Options().Addr, len(links))
				}
			} else {
				if err := linkUp(ctx, n); err != nil {
					return err
				}
				replicas.Add(1)
			}
			return nil
		})
		if err == nil && masters.Load() == 3 && replicas.Load() == 3 {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("cluster of %v: %d masters, %d replicas: %v", addrs, masters.Load(), replicas.Load(), err)
		}
		time.Sleep(50 * time.Millisecond)
		c.ReloadState(ctx)
	}
	return &ClusterGroup{Nodes: addrs}, nil
}

// linkUp reports whether the replica n has finished its sync with its
// master (WAIT counts it only then).
func linkUp(ctx context.Context, n *redis.Client) error {
	info, err := n.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "master_link_status:up") {
		return fmt.Errorf("replica %s: link to its master not up yet", n.Options().Addr)
	}
	return nil
}

// startSentinel starts a master, a replica of it, and 3 sentinels that
// monitor it as SentinelMaster (down after 1 s, so a failover test need not
// wait long), and waits until every sentinel knows the master and its
// replica.
func startSentinel(own *servers, bin string) (*SentinelGroup, error) {
	master, err := startServer(own, bin, false)
	if err != nil {
		return nil, err
	}
	host, port, _ := strings.Cut(master, ":")
	replica, err := startServer(own, bin, false, "--replicaof", host, port)
	if err != nil {
		return nil, err
	}
	var sentinels []string
	for range 3 {
		sport, err := freePort(false)
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "fairlock-sentinel-")
		if err != nil {
			return nil, err
		}
		own.dirs = append(own.dirs, dir)
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\n"+
			"sentinel monitor %s %s %s 2\n"+
			"sentinel down-after-milliseconds %s 1000\n"+
			"sentinel failover-timeout %s 5000\n"+
			"sentinel parallel-syncs %s 1\n",
			sport, dir, SentinelMaster, host, port, SentinelMaster, SentinelMaster, SentinelMaster)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return nil, err
		}
		cmd := exec.Command(bin, conf, "--sentinel")
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		own.procs = append(own.procs, cmd)
		addr := fmt.Sprintf("127.0.0.1:%d", sport)
		if err := answers(addr); err != nil {
			return nil, err
		}
		sentinels = append(sentinels, addr)
	}
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	rc := redis.NewClient(&redis.Options{Addr: replica})
	defer func() { _ = rc.Close() }()
	for linkUp(ctx, rc) != nil {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("replica %s: %v", replica, linkUp(ctx, rc))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, addr := range sentinels {
		s := redis.NewSentinelClient(&redis.Options{Addr: addr})
		for {
			got, err := s.GetMasterAddrByName(ctx, SentinelMaster).Result()
			replicas, _ := s.Replicas(ctx, SentinelMaster).Result()
			if err == nil && len(got) == 2 && got[0]+":"+got[1] == master && len(replicas) == 1 {
				break
			}
			if time.Now().After(deadline) {
				_ = s.Close()
				return nil, fmt.Errorf("sentinel %s does not know master %s and replica %s: %v %v", addr, master, replica, got, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = s.Close()
	}
	return &SentinelGroup{Master: master, Replica: replica, Sentinels: sentinels}, nil
}
