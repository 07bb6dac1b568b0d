package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/redis/go-redis/v9"
)

// env is what every scenario gets: the server and the client options that
// every implementation shares.
type env struct {
	addr string
	opts redis.Options
}

func (e *env) client() *redis.Client {
	o := e.opts
	o.Addr = e.addr
	return redis.NewClient(&o)
}

var runID atomic.Int64

func lockName(scenario string) string {
	return fmt.Sprintf("bench-%s-%d-%d", scenario, time.Now().UnixNano(), runID.Add(1))
}

// rtt is the median PING round trip.
func (e *env) rtt(ctx context.Context) time.Duration {
	c := e.client()
	defer func() { _ = c.Close() }()
	var d []time.Duration
	for i := 0; i < 500; i++ {
		t := time.Now()
		_ = c.Ping(ctx).Err()
		d = append(d, time.Since(t))
	}
	return median(d)
}

// cpuCost is the CPU time one Lock+Unlock pair costs, in µs: the benchmark
// process's (the client side: go-redis, the lock, the kernel's network work
// done on its behalf), redis-server's (INFO cpu), and Redis's own time in
// the scripts (INFO commandstats: FCALL, EVALSHA and EVAL, what the scripts
// run inside them included; the rest of a pair's Redis CPU is the network
// and the command loop).
type cpuCost struct{ client, redis, scripts float64 }

// scriptUsec is Redis's time in scripts so far (INFO commandstats), in µs.
func scriptUsec(ctx context.Context, c *redis.Client) float64 {
	var total float64
	for _, cmd := range []string{"fcall", "evalsha", "eval"} {
		_, usec := commandStat(ctx, c, cmd)
		total += usec
	}
	return total
}

// processCPU is this process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is redis-server's user+system CPU time so far.
func redisCPU(ctx context.Context, c *redis.Client) time.Duration {
	info, _ := c.Info(ctx, "cpu").Result()
	var sec float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			sec += f
		}
	}
	return time.Duration(sec * float64(time.Second))
}

// pairs runs g goroutines, each with its own handle on its own name, each
// doing Lock+Unlock for dur. It returns pairs per second and what a pair
// cost in CPU.
func (e *env) pairs(ctx context.Context, im impl, g int, dur time.Duration) (float64, cpuCost, error) {
	c := e.client()
	defer func() { _ = c.Close() }()
	admin := e.client()
	defer func() { _ = admin.Close() }()
	handles := make([]locker, g)
	for i := range handles {
		h, err := im.new(c, lockName("pairs"))
		if err != nil {
			return 0, cpuCost{}, err
		}
		handles[i] = h
	}
	cpu0, redis0, scripts0 := processCPU(), redisCPU(ctx, admin), scriptUsec(ctx, admin)
	count, err := turns(ctx, handles, dur)
	n := float64(count)
	cost := cpuCost{
		client:  float64(processCPU()-cpu0) / float64(time.Microsecond) / n,
		redis:   float64(redisCPU(ctx, admin)-redis0) / float64(time.Microsecond) / n,
		scripts: (scriptUsec(ctx, admin) - scripts0) / n,
	}
	if err != nil {
		return 0, cost, fmt.Errorf("%s: %w", im.name, err)
	}
	return n / dur.Seconds(), cost, nil
}

// turns runs each of handles on a goroutine of its own for dur, taking
// Lock then Unlock on ctx in a loop, and returns the pairs they made, or
// the first error one of them met.
func turns(ctx context.Context, handles []locker, dur time.Duration) (int64, error) {
	var total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(handles))
	deadline := time.Now().Add(dur)
	for _, h := range handles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if err := h.Lock(ctx); err != nil {
					errs <- err
					return
				}
				if err := h.Unlock(ctx); err != nil {
					errs <- err
					return
				}
				total.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return total.Load(), <-errs // nil when none failed
}

// contention is the 8-handles-on-one-name scenario's outcome.
type contention struct {
	acqPerSec   float64
	handoffs    []time.Duration // Unlock called -> next holder's Lock returned
	outOfFIFO   int
	acquisition int
	maxMin      float64 // most / fewest acquisitions of one handle
	publishes   int64   // PUBLISH and SPUBLISH calls seen by Redis
	subConns    int     // pub/sub connections during the run
	clients     int
	outBytes    int64 // bytes Redis sent to its clients during the run (INFO total_net_output_bytes)
}

// netOut is the bytes Redis has sent to its clients so far.
func netOut(ctx context.Context, c *redis.Client) int64 {
	info, err := c.Info(ctx, "stats").Result()
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(field(info, "total_net_output_bytes"), 10, 64)
	return n
}

// lockTime is the median time of one uncontended Lock call of im: how long
// after calling Lock a handle's request has surely reached Redis.
func (e *env) lockTime(ctx context.Context, im impl) (time.Duration, error) {
	c := e.client()
	defer func() { _ = c.Close() }()
	h, err := im.new(c, lockName("locktime"))
	if err != nil {
		return 0, err
	}
	var d []time.Duration
	for i := 0; i < 200; i++ {
		t := time.Now()
		if err := h.Lock(ctx); err != nil {
			return 0, err
		}
		d = append(d, time.Since(t))
		if err := h.Unlock(ctx); err != nil {
			return 0, err
		}
	}
	return median(d), nil
}

// contend runs n handles, each on its own client (as if on its own machine),
// taking one lock in turn for dur with an empty critical section. An
// acquisition counts as out of FIFO when another handle that called Lock
// earlier, by more than one uncontended Lock call of this implementation (so
// its request had surely reached Redis first), is still waiting.
func (e *env) contend(ctx context.Context, im impl, n int, dur time.Duration) (contention, error) {
	slack, err := e.lockTime(ctx, im)
	if err != nil {
		return contention{}, err
	}
	admin := e.client()
	defer func() { _ = admin.Close() }()
	_ = admin.ConfigResetStat(ctx).Err()
	name := lockName("contended")
	var (
		mu         sync.Mutex
		waiting    = make([]bool, n)
		since      = make([]time.Time, n)
		counts     = make([]int, n)
		lastUnlock time.Time
		out        contention
		wg         sync.WaitGroup
	)
	out.clients = n
	out0 := netOut(ctx, admin)
	errs := make(chan error, n)
	deadline := time.Now().Add(dur)
	sampled := make(chan int, 1)
	for i := 0; i < n; i++ {
		c := e.client()
		defer func() { _ = c.Close() }()
		h, err := im.new(c, name)
		if err != nil {
			return out, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				mu.Lock()
				waiting[i], since[i] = true, time.Now()
				mu.Unlock()
				if err := h.Lock(ctx); err != nil {
					errs <- err
					return
				}
				now := time.Now()
				mu.Lock()
				waiting[i] = false
				counts[i]++
				out.acquisition++
				if !lastUnlock.IsZero() {
					out.handoffs = append(out.handoffs, now.Sub(lastUnlock))
				}
				// Out of FIFO: someone who asked more than one Lock call
				// earlier is still waiting.
				for j := range waiting {
					if j != i && waiting[j] && since[j].Before(since[i].Add(-slack)) {
						out.outOfFIFO++
						break
					}
				}
				lastUnlock = time.Now()
				mu.Unlock()
				if i == 0 && counts[0] == 5 {
					select {
					case sampled <- countSubscribers(ctx, admin):
					default:
					}
				}
				if err := h.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	out.outBytes = netOut(ctx, admin) - out0
	close(errs)
	for err := range errs {
		return out, fmt.Errorf("%s: %w", im.name, err)
	}
	select {
	case out.subConns = <-sampled:
	default:
	}
	out.acqPerSec = float64(out.acquisition) / dur.Seconds()
	lo, hi := slices.Min(counts), slices.Max(counts)
	if lo > 0 {
		out.maxMin = float64(hi) / float64(lo)
	} else {
		out.maxMin = float64(hi) // someone never got the lock: report max as is
	}
	out.publishes = commandCalls(ctx, admin, "publish") + commandCalls(ctx, admin, "spublish")
	return out, nil
}

// countSubscribers counts pub/sub connections on the server.
func countSubscribers(ctx context.Context, c *redis.Client) int {
	list, err := c.ClientList(ctx).Result()
	if err != nil {
		return -1
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		for _, f := range strings.Fields(line) {
			if (strings.HasPrefix(f, "sub=") || strings.HasPrefix(f, "ssub=")) && f[strings.IndexByte(f, '=')+1:] != "0" {
				n++
				break
			}
		}
	}
	return n
}

// commandCalls reads one command's call count from INFO commandstats.
func commandCalls(ctx context.Context, c *redis.Client, cmd string) int64 {
	calls, _ := commandStat(ctx, c, cmd)
	return calls
}

// commandStat returns a command's calls and usec from INFO commandstats.
func commandStat(ctx context.Context, c *redis.Client, cmd string) (calls int64, usec float64) {
	info, _ := c.Info(ctx, "commandstats").Result()
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "cmdstat_"+cmd+":") {
			continue
		}
		_, fields, _ := strings.Cut(line, ":")
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				usec, _ = strconv.ParseFloat(v, 64)
			}
		}
	}
	return calls, usec
}

// queueCost is the fair lock's head acquisition with n queued, and, measured
// back to back with it (this machine's speed drifts), with none queued.
type queueCost struct {
	queued        int
	usecPerAcq    float64
	usecEmpty     float64
	bytesPerWaitr float64
}

// headAcquisition fills a fair lock's queue with n waiters through the
// library (10 % dead: half gave up, half crashed past their deadline), then
// measures Redis's own time (INFO commandstats, reset around each chunk of 10)
// for 80 acquisitions by the head: each a release that hands the lock over
// (a hold this short is never claimed). With n = 0, 80 plain Lock+Unlock
// pairs. Chunks of the baseline (pairs on a lock nobody waits for) alternate
// with the measured ones.
func (e *env) headAcquisition(ctx context.Context, n int) (queueCost, error) {
	const measured, chunks = 80, 8
	res := queueCost{queued: n}
	client := e.client()
	defer func() { _ = client.Close() }()
	name := lockName("queue")
	opts := []fair.MutexOption{fairlock.WithWaitTimeout(5 * time.Minute)}
	holder, err := fair.New(ownerOf(client), name, opts...)
	if err != nil {
		return res, err
	}
	if err := holder.Lock(ctx); err != nil {
		return res, err
	}
	crashed := e.client()
	type waiter struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	var waiters []*waiter
	var last *waiter // the latest holder, until the measurement is read
	acquired := make(chan *waiter, n+1)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		c, o := client, opts
		if i%20 == 13 {
			c, o = crashed, []fair.MutexOption{fairlock.WithWaitTimeout(time.Second)}
		}
		m, err := fair.New(ownerOf(c), name, o...)
		if err != nil {
			return res, err
		}
		wctx, cancel := context.WithCancel(ctx)
		w := &waiter{cancel: cancel, done: make(chan struct{})}
		waiters = append(waiters, w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if m.Lock(wctx) == nil {
				acquired <- w
				<-w.done
				_ = m.Unlock(ctx)
			}
		}()
	}
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		st, err := fair.Inspect(ctx, client, name)
		if err != nil {
			return res, err
		}
		if len(st.Queue) >= n {
			break
		}
		if time.Since(start) > 3*time.Minute {
			return res, fmt.Errorf("only %d of %d waiters queued", len(st.Queue), n)
		}
	}
	for i, w := range waiters {
		if i%20 == 7 {
			w.cancel() // gives up: a tombstone
		}
	}
	_ = crashed.Close() // silent: their deadline passes
	time.Sleep(1500 * time.Millisecond)
	if n > 0 {
		var bytes int64
		for _, suffix := range []string{":queue", ":deadlines"} {
			b, _ := client.MemoryUsage(ctx, "fairlock:f:{"+name+"}"+suffix, 0).Result()
			bytes += b
		}
		res.bytesPerWaitr = float64(bytes) / float64(n)
	}

	// The baseline: Lock+Unlock on a lock nobody waits for, in chunks
	// interleaved with the measured ones (this machine's speed drifts).
	empty, err := fair.New(ownerOf(client), name+"-empty", opts...)
	if err != nil {
		return res, err
	}
	_ = empty.Lock(ctx) // loads the scripts
	_ = empty.Unlock(ctx)
	pairs := func(m *fair.Mutex) error {
		for i := 0; i < measured/chunks; i++ {
			if err := m.Lock(ctx); err != nil {
				return err
			}
			if err := m.Unlock(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	// Each measured acquisition costs Redis one acquisition and one release
	// (n = 0), or one release that hands the lock over (n > 0).
	handoffs := func() error {
		for i := 0; i < measured/chunks; i++ {
			if last != nil {
				close(last.done)
			} else if err := holder.Unlock(ctx); err != nil {
				return err
			}
			select {
			case last = <-acquired:
			case <-time.After(30 * time.Second):
				return fmt.Errorf("hand-off %d never happened", i)
			}
		}
		return nil
	}
	measure := func(f func() error) (float64, error) {
		_ = client.ConfigResetStat(ctx).Err()
		if err := f(); err != nil {
			return 0, err
		}
		var usec float64
		for _, cmd := range []string{"fcall", "evalsha", "eval"} {
			_, u := commandStat(ctx, client, cmd)
			usec += u
		}
		return usec, nil
	}
	if n == 0 {
		if err := holder.Unlock(ctx); err != nil {
			return res, err
		}
		handoffs = func() error { return pairs(holder) }
	}
	// No garbage collection while measuring: with 10,000 waiting goroutines
	// it would take CPU from Redis, whose time INFO commandstats measures.
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	var base, queued float64
	for c := 0; c < chunks; c++ {
		b, err := measure(func() error { return pairs(empty) })
		if err != nil {
			return res, err
		}
		q, err := measure(handoffs)
		if err != nil {
			return res, err
		}
		base, queued = base+b, queued+q
	}
	res.usecEmpty = base / measured
	res.usecPerAcq = queued / measured
	if last != nil {
		close(last.done)
	}

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
	return res, nil
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func medianF(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
