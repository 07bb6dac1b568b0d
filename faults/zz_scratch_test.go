package faults

import (
	"context"
	"github.com/fairlock/fairlock"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func scratchOpts() []fairlock.OwnerOption {
	if os.Getenv("NOPRES") != "" {
		return []fairlock.OwnerOption{fairlock.WithoutPresence()}
	}
	return nil
}

func TestScratchClusterHungMasterPool(t *testing.T) {
	g := redistest.NewClusterGroup(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: g.Nodes})
	defer func() { _ = client.Close() }()
	ctx := context.Background()
	var pid int
	poolThroughFailover(t, "Cluster (master SIGSTOPped)", client, func() {
		master, replica := shardOf(t, client, holdKey("fair", lockName(t)))
		mc := redis.NewClient(&redis.Options{Addr: master})
		info, err := mc.Info(ctx, "server").Result()
		must(t, err)
		_ = mc.Close()
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
				pid, _ = strconv.Atoi(v)
			}
		}
		must(t, syscall.Kill(pid, syscall.SIGSTOP))
		stopped := time.Now()
		rc := redis.NewClient(&redis.Options{Addr: replica})
		defer func() { _ = rc.Close() }()
		eventually(t, 60*time.Second, "the replica promoted", func() bool {
			role, err := rc.Do(ctx, "ROLE").Slice()
			return err == nil && len(role) > 0 && role[0] == "master"
		})
		t.Logf("promoted %v after SIGSTOP", time.Since(stopped).Round(time.Millisecond))
	}, scratchOpts()...)
	_ = syscall.Kill(pid, syscall.SIGCONT)
}
