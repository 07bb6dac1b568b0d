package fair_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkHeadAcquisition measures what it costs Redis to hand the lock to
// the head of a queue N long, N = 0, 100, 1,000, 10,000, filled through the
// library with 10 % of the entries dead (half gave up and left tombstones,
// half crashed and passed their deadline). The figure is Redis's own time
// (INFO commandstats, reset just before the measured hand-offs): every
// script call per acquisition, release and claim included. It also reports
// the memory the queue keys take per waiter (MEMORY USAGE ... SAMPLES 0).
//
//	go test -run '^$' -bench HeadAcquisition -benchtime 1x ./fair/
func BenchmarkHeadAcquisition(b *testing.B) {
	for _, n := range []int{0, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("queued=%d", n), func(b *testing.B) {
			benchHeadAcquisition(b, n)
		})
	}
}

const measuredHandOffs = 50

func benchHeadAcquisition(b *testing.B, n int) {
	ctx := context.Background()
	client := redistest.Real(b)
	name := redistest.Name(b)
	keys := []string{"fairlock:f:{" + name + "}:queue", "fairlock:f:{" + name + "}:deadlines", "fairlock:f:{" + name + "}:waiters"}
	opts := []fair.Option{fair.WithWaitTimeout(5 * time.Minute)} // no heartbeat inside the measured window
	holder, _ := fair.New(client, name, opts...)
	if err := holder.Lock(ctx); err != nil {
		b.Fatal(err)
	}

	// The queue: live waiters, gave-up waiters, and crashed ones whose short
	// deadline will have passed.
	crashedClient := redis.NewClient(&redis.Options{Addr: client.Options().Addr, PoolSize: 64})
	type waiter struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	var waiters []*waiter
	live := 0
	acquired := make(chan *waiter, n) // whoever got the lock, in grant order
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		c, o := client, opts
		role := "live"
		switch i % 20 {
		case 7:
			role = "gives up"
		case 13:
			role, c, o = "crashes", crashedClient, []fair.Option{fair.WithWaitTimeout(time.Second)}
		}
		m, err := fair.New(c, name, o...)
		if err != nil {
			b.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		w := &waiter{cancel: cancel, done: make(chan struct{})}
		waiters = append(waiters, w)
		if role == "live" {
			live++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.Lock(wctx); err == nil {
				acquired <- w
				<-w.done
				_ = m.Unlock(ctx)
			}
		}()
		if role == "gives up" {
			defer cancel()
		}
	}
	waitQueued(b, client, name, n)
	for i, w := range waiters {
		if i%20 == 7 {
			w.cancel() // leaves a tombstone
		}
	}
	_ = crashedClient.Close() // its waiters fall silent
	time.Sleep(1500 * time.Millisecond)

	var bytes int64
	for _, k := range keys {
		v, _ := client.MemoryUsage(ctx, k, 0).Result()
		bytes += v
	}

	// Measured: measuredHandOffs acquisitions by the head, each a release
	// that hands the lock over plus the new holder's claim.
	k := min(measuredHandOffs, live)
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	acquisitions := 0
	if n == 0 {
		_ = holder.Unlock(ctx)
		for i := 0; i < measuredHandOffs; i++ {
			if err := holder.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			_ = holder.Unlock(ctx)
			acquisitions++
		}
	} else {
		_ = holder.Unlock(ctx)
		var last *waiter
		for i := 0; i < k; i++ {
			if last != nil {
				close(last.done) // its Unlock hands over to the next
			}
			select {
			case last = <-acquired:
			case <-time.After(30 * time.Second):
				b.Fatalf("hand-off %d never happened", i)
			}
			waitClaimed(b, client, name)
			acquisitions++
		}
		close(last.done)
	}
	b.StopTimer()
	usec, calls := scriptStats(b, client)

	// Everyone leaves; whoever still gets the lock meanwhile unlocks at once.
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case w := <-acquired:
				close(w.done)
			case <-stop:
				return
			}
		}
	}()
	for _, w := range waiters {
		w.cancel()
	}
	wg.Wait()
	close(stop)

	b.ReportMetric(usec/float64(acquisitions), "redis-µs/acq")
	b.ReportMetric(usec/float64(calls), "redis-µs/call")
	if n > 0 {
		b.ReportMetric(float64(bytes)/float64(n), "bytes/waiter")
	}
}

func waitQueued(b *testing.B, c *redis.Client, name string, n int) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st, err := fair.Inspect(context.Background(), c, name)
		if err != nil {
			b.Fatal(err)
		}
		if len(st.Queue) >= n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d waiters queued", len(st.Queue), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitClaimed waits until the new holder's background claim is done, so
// the measured window holds each hand-off's claim.
func waitClaimed(b *testing.B, c *redis.Client, name string) {
	for i := 0; ; i++ {
		if e, _ := c.HExists(context.Background(), "fairlock:f:{"+name+"}", "e").Result(); !e {
			return
		}
		if i > 10000 {
			b.Fatal("the hand-off was never claimed")
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// scriptStats sums Redis's own time and calls for scripts.
func scriptStats(b *testing.B, c *redis.Client) (usec float64, calls int64) {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		_, fields, _ := strings.Cut(line, ":")
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				n, _ := strconv.ParseInt(v, 10, 64)
				calls += n
			case "usec":
				u, _ := strconv.ParseFloat(v, 64)
				usec += u
			}
		}
	}
	return usec, calls
}
