package faults

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/reentrant"
	"github.com/redis/go-redis/v9"
)

// The test binary is also the worker: started with FAULTS_WORKER set, it
// runs one worker instead of the tests. A worker exits when its stdin closes
// (the test ended, or died), so none outlives its test.
func TestMain(m *testing.M) {
	if spec := os.Getenv("FAULTS_WORKER"); spec != "" {
		os.Exit(runWorker(spec))
	}
	code := m.Run()
	if shared != nil {
		shared.Close()
	}
	os.Exit(code)
}

// workerSpec says what a worker does: "<lock> <addr> <name> <lease> <wait
// timeout> <label>", addr as workerClient takes it, lock being fair or reentrant, fair+presence (a fair
// lock on an owner made WithPresence), election+presence (a candidate of
// an election on such an owner, campaigning with the label as its value),
// reentrant+presence (a reentrant lock on such an owner), or semaphore (all 2 permits of a semaphore of 2), or semaphore+presence
// (the same on an owner made WithPresence). It takes the lock with Lock (the watchdog
// keeping the lease), prints "held <token>", and holds it until killed or
// until its stdin closes.
type workerSpec struct {
	Lock        string // "fair", "fair+presence", "election+presence", "reentrant", "reentrant+presence", "rwmutex+presence" (a writer), "semaphore" or "semaphore+presence"
	Addr, Name  string
	Lease, Wait time.Duration
	Label       string
}

func (s workerSpec) String() string {
	return fmt.Sprintf("%s %s %s %s %s %s", s.Lock, s.Addr, s.Name, s.Lease, s.Wait, s.Label)
}

type locker interface {
	Lock(ctx context.Context) error
	Token() int64
}

func runWorker(spec string) int {
	f := strings.Fields(spec)
	if len(f) > 0 && f[0] == "soak" {
		return runSoakWorker(f)
	}
	if len(f) != 6 {
		fmt.Fprintln(os.Stderr, "bad FAULTS_WORKER:", spec)
		return 2
	}
	lease, _ := time.ParseDuration(f[3])
	wait, _ := time.ParseDuration(f[4])
	c := workerClient(f[1])
	var m locker
	var err error
	switch f[0] {
	case "fair":
		m, err = fair.New(redistest.Owner(c), f[2], fairlock.WithLease(lease), fairlock.WithWaitTimeout(wait), fair.WithLabel(f[5]))
	case "fair+presence", "election+presence":
		var o *fairlock.Owner
		if o, err = fairlock.NewOwner(c, fairlock.WithPresence()); err == nil && f[0] == "fair+presence" {
			m, err = fair.New(o, f[2], fairlock.WithLease(lease), fairlock.WithWaitTimeout(wait), fair.WithLabel(f[5]))
		} else if err == nil {
			var e *fair.Election
			e, err = fair.NewElection(o, f[2], fairlock.WithLease(lease), fairlock.WithWaitTimeout(wait))
			m = &candidate{e: e, value: f[5]}
		}
	case "semaphore", "semaphore+presence":
		o := redistest.Owner(c)
		if f[0] == "semaphore+presence" {
			o, err = fairlock.NewOwner(c, fairlock.WithPresence())
		}
		var s *fair.Semaphore
		if err == nil {
			s, err = fair.NewSemaphore(o, f[2], 2, fairlock.WithLease(lease), fairlock.WithWaitTimeout(wait), fair.WithLabel(f[5]))
		}
		m = &permits{s: s, n: 2}
	case "rwmutex+presence":
		var o *fairlock.Owner
		if o, err = fairlock.NewOwner(c, fairlock.WithPresence()); err == nil {
			m, err = fair.NewRWMutex(o, f[2], fairlock.WithLease(lease), fairlock.WithWaitTimeout(wait), fair.WithLabel(f[5]))
		}
	case "reentrant+presence":
		var o *fairlock.Owner
		if o, err = fairlock.NewOwner(c, fairlock.WithPresence()); err == nil {
			m, err = reentrant.New(o, f[2], fairlock.WithLease(lease), fairlock.WithWaitTimeout(wait))
		}
	default:
		m, err = reentrant.New(redistest.Owner(c), f[2], fairlock.WithLease(lease))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	go func() { // the test is gone: so is the worker
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	if err := m.Lock(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("held %d\n", m.Token())
	select {}
}

// workerClient is a worker's client of addr: a server's address,
// "sentinel=<addr>,<addr>..." for the master of a Sentinel group
// (redistest.SentinelMaster) through its sentinels, or
// "cluster=<addr>,<addr>..." for a Cluster through its nodes.
func workerClient(addr string) redis.UniversalClient {
	if list, ok := strings.CutPrefix(addr, "sentinel="); ok {
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.SentinelMaster, SentinelAddrs: strings.Split(list, ",")})
	}
	if list, ok := strings.CutPrefix(addr, "cluster="); ok {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(list, ",")})
	}
	return redis.NewClient(&redis.Options{Addr: addr})
}

// candidate campaigns in an election as its Lock, its term the token.
type candidate struct {
	e     *fair.Election
	value string
	lead  context.Context
}

func (c *candidate) Lock(ctx context.Context) (err error) {
	c.lead, err = c.e.Campaign(ctx, c.value)
	return err
}

func (c *candidate) Token() int64 { return c.e.Term(c.lead) }

// permits takes n permits of a semaphore as one Lock.
type permits struct {
	s *fair.Semaphore
	n int
	p *fair.Permit
}

func (a *permits) Lock(ctx context.Context) (err error) {
	a.p, err = a.s.Acquire(ctx, a.n)
	return err
}

func (a *permits) Token() int64 { return a.p.Token() }

// worker is a running worker process.
type worker struct {
	t     testing.TB
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	once  sync.Once
}

// startWorker starts a worker; it is killed when the test ends.
func startWorker(t testing.TB, spec fmt.Stringer) *worker {
	t.Helper()
	cmd, stdin, stdout := redistest.StartChild(t, "^$", "FAULTS_WORKER="+spec.String())
	w := &worker{t: t, cmd: cmd, stdin: stdin, lines: make(chan string, 1024)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		close(w.lines)
	}()
	t.Cleanup(w.kill)
	return w
}

// held waits for the worker's "held <token>" line.
func (w *worker) held(within time.Duration) int64 {
	w.t.Helper()
	select {
	case line, ok := <-w.lines:
		tok, found := strings.CutPrefix(line, "held ")
		if !ok || !found {
			w.t.Fatalf("worker %d: want \"held <token>\", got %q (open %v)", w.cmd.Process.Pid, line, ok)
		}
		n, _ := strconv.ParseInt(tok, 10, 64)
		return n
	case <-time.After(within):
		w.t.Fatalf("worker %d did not take the lock within %v", w.cmd.Process.Pid, within)
	}
	return 0
}

// kill sends SIGKILL and reaps the process.
func (w *worker) kill() {
	w.once.Do(func() {
		_ = w.cmd.Process.Kill()
		_ = w.cmd.Wait()
		_ = w.stdin.Close()
	})
}

func (w *worker) pid() int { return w.cmd.Process.Pid }
