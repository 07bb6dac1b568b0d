package main

// The election's failover benchmark (-election N): three candidate
// processes (this binary, started again as a child) campaign for one
// election; the current leader resigns, closes its owner, or is killed
// (SIGKILL), N times each, and the next leader is timed from that moment
// to the moment its Campaign returned, as is an observer in this process
// (Observe) from that moment to the news. The same is done with the
// election built by hand on a fair.Mutex (Lock to campaign, Unlock to
// resign, standbys polling fair.Inspect every 100 ms), as a user would
// build it without fair.Election. Each child reports on stdout with its
// wall clock; all run on one machine.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/redis/go-redis/v9"
)

const (
	electionLease = 3 * time.Second
	pollEvery     = 100 * time.Millisecond
	childEnv      = "FAIRLOCK_BENCH_CANDIDATE"
)

// candidateMain runs a child candidate if this process is one; it reports
// whether it was.
func candidateMain() bool {
	spec := os.Getenv(childEnv) // "<impl> <addr> <name> <value>"
	if spec == "" {
		return false
	}
	f := strings.Fields(spec)
	if err := candidate(f[0], f[1], f[2], f[3]); err != nil {
		fmt.Fprintln(os.Stderr, "candidate:", err)
		os.Exit(1)
	}
	return true
}

func candidate(impl, addr, name, value string) error {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: addr})
	owner, err := fairlock.NewOwner(client)
	if err != nil {
		return err
	}
	var resign func() error
	if impl == "fairlock" {
		e, err := fair.NewElection(owner, name, fairlock.WithLease(electionLease), fair.WithLabel(value))
		if err != nil {
			return err
		}
		lead, err := e.Campaign(ctx, value)
		if err != nil {
			return err
		}
		resign = func() error { return e.Resign(lead) }
	} else {
		m, err := fair.New(owner, name, fairlock.WithLease(electionLease), fair.WithLabel(value))
		if err != nil {
			return err
		}
		lead, err := m.LockContext(ctx)
		if err != nil {
			return err
		}
		resign = func() error { return m.Unlock(lead) }
	}
	fmt.Printf("lead %d\n", time.Now().UnixNano())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "resign":
			fmt.Printf("acting %d\n", time.Now().UnixNano())
			if err := resign(); err != nil {
				return err
			}
			return owner.Close(ctx)
		case "close":
			fmt.Printf("acting %d\n", time.Now().UnixNano())
			return owner.Close(ctx)
		}
	}
	return nil
}

type child struct {
	value string
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

type childEvent struct {
	value string
	kind  string // lead or acting
	at    time.Time
}

// electionRun measures one implementation in one mode: n changes.
func electionRun(ctx context.Context, addr, impl, mode string, n int) (failover, notify []time.Duration, err error) {
	name := fmt.Sprintf("bench-%s-%s-%d", impl, mode, time.Now().UnixNano())
	events := make(chan childEvent, 64)
	var children []*child
	defer func() {
		for _, c := range children {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
	}()
	spawned := 0
	spawn := func() error {
		spawned++
		value := fmt.Sprintf("c%d", spawned)
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %s %s", childEnv, impl, addr, name, value))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		children = append(children, &child{value: value, cmd: cmd, stdin: stdin})
		go func() {
			s := bufio.NewScanner(stdout)
			for s.Scan() {
				kind, ns, _ := strings.Cut(s.Text(), " ")
				v, _ := strconv.ParseInt(ns, 10, 64)
				events <- childEvent{value: value, kind: kind, at: time.Unix(0, v)}
			}
		}()
		return nil
	}

	// The observer, in this process.
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = client.Close() }()
	owner, err := fairlock.NewOwner(client)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = owner.Close(context.Background()) }()
	octx, stop := context.WithCancel(ctx)
	defer stop()
	seen := make(chan childEvent, 64)
	if impl == "fairlock" {
		e, err := fair.NewElection(owner, name)
		if err != nil {
			return nil, nil, err
		}
		ch := e.Observe(octx)
		go func() {
			for l := range ch {
				seen <- childEvent{value: l.Value, at: time.Now()}
			}
		}()
	} else {
		go func() {
			last := ""
			t := time.NewTicker(pollEvery)
			defer t.Stop()
			for {
				select {
				case <-octx.Done():
					return
				case <-t.C:
				}
				st, err := fair.Inspect(octx, client, name)
				v := ""
				if err == nil && st.Holder != nil {
					v = st.Holder.Label
				}
				if v != last {
					last = v
					seen <- childEvent{value: v, at: time.Now()}
				}
			}
		}()
	}

	// waitFor returns the first event of c, arrived or to come, that ok
	// accepts; the others are kept for later calls. Events of two children
	// may arrive out of order (the new leader's before the old one's
	// "acting"), so nothing is dropped.
	backlog := map[<-chan childEvent][]childEvent{}
	waitFor := func(what string, c <-chan childEvent, ok func(childEvent) bool) (childEvent, error) {
		for i, ev := range backlog[c] {
			if ok(ev) {
				backlog[c] = slices.Delete(backlog[c], i, i+1)
				return ev, nil
			}
		}
		deadline := time.After(4 * electionLease)
		for {
			select {
			case ev := <-c:
				if ok(ev) {
					return ev, nil
				}
				backlog[c] = append(backlog[c], ev)
			case <-deadline:
				return childEvent{}, fmt.Errorf("%s %s: timed out waiting for %s", impl, mode, what)
			case <-ctx.Done():
				return childEvent{}, ctx.Err()
			}
		}
	}
	// Three candidates, in order.
	var leader string
	for i := range 3 {
		if err := spawn(); err != nil {
			return nil, nil, err
		}
		if i == 0 {
			ev, err := waitFor("the first leader", events, func(ev childEvent) bool { return ev.kind == "lead" })
			if err != nil {
				return nil, nil, err
			}
			leader = ev.value
		}
		time.Sleep(200 * time.Millisecond) // queued before the next joins
	}
	if _, err := waitFor("the observer to see the first leader", seen, func(ev childEvent) bool { return ev.value == leader }); err != nil {
		return nil, nil, err
	}
	for range n {
		i := slices.IndexFunc(children, func(c *child) bool { return c.value == leader })
		old := children[i]
		var t0 time.Time
		switch mode {
		case "kill":
			t0 = time.Now()
			_ = old.cmd.Process.Kill()
		default:
			if _, err := io.WriteString(old.stdin, mode+"\n"); err != nil {
				return nil, nil, err
			}
			ev, err := waitFor("the leader to act", events, func(ev childEvent) bool { return ev.kind == "acting" && ev.value == old.value })
			if err != nil {
				return nil, nil, err
			}
			t0 = ev.at
		}
		ev, err := waitFor("the next leader", events, func(ev childEvent) bool { return ev.kind == "lead" && ev.value != old.value })
		if err != nil {
			return nil, nil, err
		}
		failover = append(failover, ev.at.Sub(t0))
		leader = ev.value
		obs, err := waitFor("the observer to see the next leader", seen, func(o childEvent) bool { return o.value == leader })
		if err != nil {
			return nil, nil, err
		}
		notify = append(notify, obs.at.Sub(t0))
		_ = old.cmd.Wait()
		children = slices.Delete(children, i, i+1)
		if err := spawn(); err != nil { // a new standby at the tail
			return nil, nil, err
		}
		// Queued before the next change, at a moment drawn at random, so
		// that a poller's phase does not line up with the changes.
		time.Sleep(200*time.Millisecond + rand.N(pollEvery))
	}
	return failover, notify, nil
}

// electionBench prints the failover table: p50 and p99 of each
// implementation and mode.
func electionBench(ctx context.Context, addr string, n int, stdout, stderr io.Writer) error {
	fmt.Fprintf(stdout, "\nLeader election, 3 candidate processes, lease %v, %d changes each (ms)\n\n", electionLease, n)
	fmt.Fprintln(stdout, "| implementation | leader gone by | failover p50 | failover p99 | observer p50 | observer p99 |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|---|")
	for _, mode := range []string{"resign", "close", "kill"} {
		for _, impl := range []string{"fairlock", "hand-built"} {
			fmt.Fprintf(stderr, "election: %s, %s\n", impl, mode)
			f, o, err := electionRun(ctx, addr, impl, mode, n)
			if err != nil {
				return err
			}
			what := map[string]string{"resign": "Resign / Unlock", "close": "Owner.Close", "kill": "SIGKILL"}[mode]
			fmt.Fprintf(stdout, "| %s | %s | %s | %s | %s | %s |\n", impl, what, ms(pct(f, 50)), ms(pct(f, 99)), ms(pct(o, 50)), ms(pct(o, 99)))
		}
	}
	return nil
}

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64)
}
