package fair_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// The waiter of BenchmarkHandOffAcrossProcesses lives in a process of its
// own, as it does in production: in one process, the waiter's wake-up
// competes with the releasing goroutine for the Go scheduler and its
// network poller, which BenchmarkHandOff measures too.
const handOffChildEnv = "FAIRLOCK_HANDOFF_CHILD" // "<addr> <lock name>"

// handOffPause is how long both sides sit idle before each sample, so that
// neither finds Redis or the processes warmer than the other.
const handOffPause = 2 * time.Millisecond

// BenchmarkHandOffAcrossProcesses measures a hand-off from Unlock called in
// this process to Lock returning in another, against a bare PUBLISH from
// this process to a subscriber in that other one, sampled in turn in the
// same run. Before each, both sides sit idle for the same pause, so that
// neither finds Redis or the processes warmer than the other. It reports
// the hand-off's p50 and p99 as ratios to the PUBLISH's.
func BenchmarkHandOffAcrossProcesses(b *testing.B) {
	client := redistest.Real(b)
	opts := client.Options()
	name := redistest.Name(b)
	ctx := context.Background()
	child := startHandOffChild(b, opts.Addr+" "+name)
	holder, err := fair.New(redistest.Owner(client), name)
	if err != nil {
		b.Fatal(err)
	}
	var handOffs, publishes []time.Duration
	// The timer is left running: b.StartTimer reads the memory statistics,
	// a stop of the world just before the sample. ns/op means nothing here;
	// the reported figures are the samples'.
	for b.Loop() {
		child.queueBehind(ctx, b, holder, client, name)
		start := time.Now()
		if err := holder.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		handOffs = append(handOffs, child.at(b).Sub(start))
		child.unlock(b)

		child.send(b, "listen")
		child.expect(b, "listening")
		time.Sleep(handOffPause)
		start = time.Now()
		if err := client.Publish(ctx, name+":probe", "x").Err(); err != nil {
			b.Fatal(err)
		}
		publishes = append(publishes, child.at(b).Sub(start))
	}
	child.close(b)
	p50, p99 := percentile(handOffs, 50), percentile(handOffs, 99)
	b.ReportMetric(float64(p50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(p50)/float64(percentile(publishes, 50)), "p50-vs-publish")
	b.ReportMetric(float64(p99)/float64(percentile(publishes, 99)), "p99-vs-publish")
}

// BenchmarkHandOffTimeline splits BenchmarkHandOffAcrossProcesses's
// hand-off in three, by when each step is done, from Unlock called (all
// p50s, in µs):
//
//   - sent-µs: the release is handed to go-redis (a hook on the releasing
//     client), so what Unlock does before it is out;
//   - inbox-µs: the grant reaches a bare subscriber of the lock's inboxes
//     in a third process, so Redis's part is done;
//   - p50-µs: Lock returns in the waiter's process, which heard the same
//     message through its hub.
//
// In turn, after the same pause, it times two references to the same
// listener: minimal-µs, a script that does the least a hand-off could (an
// LPOP, a SET and the PUBLISH), and publish-µs, a bare PUBLISH.
//
// The third process shares the 2 cores with the other two, so its figures
// are a little slower than BenchmarkHandOffAcrossProcesses's own; compare
// them with each other.
func BenchmarkHandOffTimeline(b *testing.B) {
	client := redistest.Real(b)
	opts := client.Options()
	name := redistest.Name(b)
	ctx := context.Background()
	child := startHandOffChild(b, opts.Addr+" "+name)
	listener := startHandOffChild(b, opts.Addr+" "+name+" "+inboxListener)
	// A client of its own for the hook (not opts, which go-redis's client
	// keeps state in).
	releasing := redis.NewClient(&redis.Options{Addr: opts.Addr})
	defer func() { _ = releasing.Close() }()
	var sent atomic.Int64 // when the release was handed to go-redis, Unix ns
	releasing.AddHook(onScript(func() { sent.Store(time.Now().UnixNano()) }))
	holder, err := fair.New(redistest.Owner(releasing), name)
	if err != nil {
		b.Fatal(err)
	}
	var toSent, toInbox, toLock, toMinimal, toPublish []time.Duration
	probe := transport.Inbox(transport.Channel(transport.FairBase(name)), "probe")
	for b.Loop() {
		child.queueBehind(ctx, b, holder, client, name)
		start := time.Now()
		if err := holder.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		toSent = append(toSent, time.Unix(0, sent.Load()).Sub(start))
		toLock = append(toLock, child.at(b).Sub(start))
		toInbox = append(toInbox, listener.at(b).Sub(start))
		child.unlock(b)

		// The references, to the same listener after the same pause.
		time.Sleep(handOffPause)
		start = time.Now()
		if err := minimal.Run(ctx, releasing, []string{name + ":m1", name + ":m2"}, probe).Err(); err != nil {
			b.Fatal(err)
		}
		toMinimal = append(toMinimal, listener.at(b).Sub(start))
		time.Sleep(handOffPause)
		start = time.Now()
		if err := releasing.Publish(ctx, probe, "x").Err(); err != nil {
			b.Fatal(err)
		}
		toPublish = append(toPublish, listener.at(b).Sub(start))
	}
	child.close(b)
	listener.close(b)
	b.ReportMetric(float64(percentile(toSent, 50).Microseconds()), "sent-µs")
	b.ReportMetric(float64(percentile(toInbox, 50).Microseconds()), "inbox-µs")
	b.ReportMetric(float64(percentile(toLock, 50).Microseconds()), "p50-µs")
	b.ReportMetric(float64(percentile(toMinimal, 50).Microseconds()), "minimal-µs")
	b.ReportMetric(float64(percentile(toPublish, 50).Microseconds()), "publish-µs")
}

// minimal is the least a hand-off script could do: pop the waiter, write
// the hold, publish the grant.
var minimal = redis.NewScript(`redis.call('LPOP', KEYS[1])
redis.call('SET', KEYS[2], 'x', 'PX', 60000)
return redis.call('PUBLISH', ARGV[1], 'x')`)

// percentile is the p-th percentile of d.
func percentile(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)*p/100, len(s)-1)]
}

// inboxListener, as the third word of handOffChildEnv, makes the other
// process a bare subscriber of the lock's inboxes.
const inboxListener = "inbox-listener"

// TestHandOffChild is the other process of BenchmarkHandOffAcrossProcesses
// and BenchmarkHandOffTimeline: it does nothing unless one of them started
// it. It reads one command a line: "lock" (Lock, then print the time it
// returned), "unlock", "listen" (print "listening", then the time a message
// on the probe channel came). As an inbox listener it reads no commands: it
// prints the time each message to an inbox of the lock came, until its
// input is closed.
func TestHandOffChild(t *testing.T) {
	spec := os.Getenv(handOffChildEnv)
	if spec == "" {
		t.Skip("run by BenchmarkHandOffAcrossProcesses and BenchmarkHandOffTimeline only")
	}
	addr, name, _ := strings.Cut(spec, " ")
	name, listen := strings.CutSuffix(name, " "+inboxListener)
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = client.Close() }()
	ctx := context.Background()
	m, err := fair.New(redistest.Owner(client), name)
	if err != nil {
		t.Fatal(err)
	}
	var ps *redis.PubSub
	if listen {
		ps = client.PSubscribe(ctx, transport.Inbox(transport.Channel(transport.FairBase(name)), "*"))
	} else {
		ps = client.Subscribe(ctx, name+":probe")
	}
	defer func() { _ = ps.Close() }()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewWriter(os.Stdout)
	say := func(s string) {
		_, _ = out.WriteString(s + "\n")
		_ = out.Flush()
	}
	say("ready")
	if listen {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			_ = ps.Close() // the benchmark is done
		}()
		for {
			if _, err := ps.ReceiveMessage(ctx); err != nil {
				return
			}
			say("at " + strconv.FormatInt(time.Now().UnixNano(), 10))
		}
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "lock":
			if err := m.Lock(ctx); err != nil {
				say("error " + err.Error())
				continue
			}
			say("at " + strconv.FormatInt(time.Now().UnixNano(), 10))
		case "unlock":
			if err := m.Unlock(ctx); err != nil {
				say("error " + err.Error())
				continue
			}
			say("unlocked")
		case "listen":
			say("listening")
			if _, err := ps.ReceiveMessage(ctx); err != nil {
				say("error " + err.Error())
				continue
			}
			say("at " + strconv.FormatInt(time.Now().UnixNano(), 10))
		}
	}
}

// handOffChild is the benchmark's end of the other process.
type handOffChild struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startHandOffChild(b *testing.B, spec string) *handOffChild {
	cmd, in, out := redistest.StartChild(b, "^TestHandOffChild$", handOffChildEnv+"="+spec)
	c := &handOffChild{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	c.expect(b, "ready")
	return c
}

// queueBehind makes holder take the lock and the child's waiter queue
// behind it, then leaves everything idle for handOffPause (time, too, for
// the child's subscription to be confirmed): the next Unlock of holder is a
// hand-off to the other process.
func (c *handOffChild) queueBehind(ctx context.Context, b *testing.B, holder *fair.Mutex, client redis.UniversalClient, name string) {
	if err := holder.Lock(ctx); err != nil {
		b.Fatal(err)
	}
	c.send(b, "lock")
	redistest.Quiet(b, "the other process's waiter is queued", func() bool {
		st, err := fair.Inspect(ctx, client, name)
		return err == nil && len(st.Queue) == 1
	})
	time.Sleep(handOffPause)
}

// unlock makes the child release the lock it was handed.
func (c *handOffChild) unlock(b *testing.B) {
	c.send(b, "unlock")
	c.expect(b, "unlocked")
}

func (c *handOffChild) send(b *testing.B, line string) {
	if _, err := fmt.Fprintln(c.in, line); err != nil {
		b.Fatal(err)
	}
}

// expect reads lines until want; an error line fails the benchmark.
func (c *handOffChild) expect(b *testing.B, want string) string {
	for c.out.Scan() {
		line := c.out.Text()
		switch {
		case strings.HasPrefix(line, want):
			return line
		case strings.HasPrefix(line, "error "):
			b.Fatalf("the other process: %s", line)
		}
	}
	b.Fatalf("the other process ended before saying %q", want)
	return ""
}

// at reads the time the other process reports.
func (c *handOffChild) at(b *testing.B) time.Time {
	ns, err := strconv.ParseInt(strings.TrimPrefix(c.expect(b, "at "), "at "), 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return time.Unix(0, ns)
}

func (c *handOffChild) close(b *testing.B) {
	_ = c.in.Close()
	if err := c.cmd.Wait(); err != nil {
		b.Fatalf("the other process: %v", err)
	}
}
