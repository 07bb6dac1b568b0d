package fair_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// shutdownChildEnv makes TestGracefulShutdownChild run: "<addr> <lock name>".
const shutdownChildEnv = "FAIRLOCK_SHUTDOWN_CHILD"

// shutdownBound is how soon, at most, the next in line must hold the lock
// once the one before it released it or closed its owner: a round trip and
// a process waking, with generous slack for a busy 2-core machine. Without
// Close, a queued process that exits holds up those behind it for a wait
// timeout (10 s by default) plus a heartbeat.
const shutdownBound = time.Second

// A rolling restart delays no one: three worker processes queue behind a
// holder; one closes its owner while queued and exits, one closes it while
// holding the lock. The others are served in their order, each within a
// round trip of its turn, and nothing of the closed processes is left in
// Redis: no queue entry, no deadline, no subscribed inbox.
func TestRealGracefulShutdown(t *testing.T) {
	client := redistest.Real(t)
	ctx := context.Background()
	name := redistest.Name(t)
	owner, err := fairlock.NewOwner(client)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = owner.Close(ctx) }()
	holder, _ := fair.New(owner, name)
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}

	addr := client.Options().Addr
	workers := make([]*shutdownChild, 3)
	for i := range workers {
		workers[i] = startShutdownChild(t, addr+" "+name)
		workers[i].send(t, "lock")
		// Queued in this order: each joins once the one before it has.
		waitFor(t, func() bool {
			st, err := fair.Inspect(ctx, client, name)
			return err == nil && len(st.Queue) == i+1
		}, fmt.Sprintf("worker %d to queue", i))
	}
	st, _ := fair.Inspect(ctx, client, name)
	clients := make([]string, len(st.Queue))
	for i, w := range st.Queue {
		clients[i] = transport.ClientOf(w.Owner)
	}

	// The middle worker shuts down while queued: once Close returned, its
	// entry is gone.
	workers[1].send(t, "close")
	workers[1].expect(t, "closed <nil>")
	workers[1].wait(t)
	st, err = fair.Inspect(ctx, client, name)
	if err != nil || len(st.Queue) != 2 || transport.ClientOf(st.Queue[0].Owner) != clients[0] || transport.ClientOf(st.Queue[1].Owner) != clients[2] {
		t.Fatalf("queue after the middle worker closed its owner = %+v, %v; want workers 0 and 2", st.Queue, err)
	}

	// The holder releases: the first worker is next.
	start := time.Now()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	workers[0].expect(t, "locked")
	first := time.Since(start)

	// The first worker shuts down holding the lock: the last is next.
	start = time.Now()
	workers[0].send(t, "close")
	workers[2].expect(t, "locked")
	last := time.Since(start)
	workers[0].expect(t, "closed <nil>")
	workers[0].wait(t)
	t.Logf("turns after a release and after a Close while holding: %v, %v", first, last)
	if first > shutdownBound || last > shutdownBound {
		t.Errorf("the next in line waited %v after a release and %v after a Close while holding; want at most %v", first, last, shutdownBound)
	}
	workers[2].send(t, "close")
	workers[2].expect(t, "closed <nil>")
	workers[2].wait(t)

	// Nothing of the closed processes is left: no hold, no queue entry, no
	// deadline (the queue's keys are gone), and what the lock keeps of its
	// fencing tokens runs out.
	keys := transport.QueueKeys(transport.FairBase(name))
	if n, err := client.Exists(ctx, keys[1:]...).Result(); err != nil || n != 0 {
		t.Errorf("%d of the queue's keys left after every process closed its owner (%v)", n, err)
	}
	if st, err := fair.Inspect(ctx, client, name); err != nil || st.Holder != nil {
		t.Errorf("held after every process closed its owner: %+v (%v)", st.Holder, err)
	}
	if ttl, err := client.PTTL(ctx, keys[0]).Result(); err != nil || ttl == -1 {
		t.Errorf("the lock's key has no TTL (%v, %v)", ttl, err)
	}
	for i, id := range clients {
		inbox := transport.Inbox(transport.Channel(transport.FairBase(name)), id)
		if subs, err := client.PubSubNumSub(ctx, inbox).Result(); err != nil || subs[inbox] != 0 {
			t.Errorf("worker %d's inbox has %d subscribers after it closed (%v)", i, subs[inbox], err)
		}
	}
}

// TestGracefulShutdownChild is one worker process of
// TestRealGracefulShutdown. On "lock" it queues for the lock and says
// "locked" once it holds it; on "close" it closes its owner, says "closed"
// and Close's error, and exits.
func TestGracefulShutdownChild(t *testing.T) {
	spec := os.Getenv(shutdownChildEnv)
	if spec == "" {
		t.Skip("run by TestRealGracefulShutdown only")
	}
	addr, name, _ := strings.Cut(spec, " ")
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = client.Close() }()
	owner, err := fairlock.NewOwner(client)
	if err != nil {
		t.Fatal(err)
	}
	m, err := fair.New(owner, name)
	if err != nil {
		t.Fatal(err)
	}
	locked := make(chan error, 1)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "lock":
			go func() {
				err := m.Lock(context.Background())
				if err == nil {
					fmt.Println("locked")
				}
				locked <- err
			}()
		case "close":
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := owner.Close(ctx)
			cancel()
			if lerr := <-locked; lerr != nil && !errors.Is(lerr, fairlock.ErrClosed) {
				t.Errorf("Lock = %v, want nil or ErrClosed", lerr)
			}
			fmt.Printf("closed %v\n", err)
			return
		}
	}
}

type shutdownChild struct {
	stdin  io.WriteCloser
	lines  *bufio.Scanner
	finish func() error
}

func startShutdownChild(t *testing.T, spec string) *shutdownChild {
	t.Helper()
	cmd, stdin, stdout := redistest.StartChild(t, "^TestGracefulShutdownChild$", shutdownChildEnv+"="+spec)
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return &shutdownChild{stdin: stdin, lines: bufio.NewScanner(stdout), finish: cmd.Wait}
}

func (c *shutdownChild) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// expect reads the child's next line of ours (go test's own are skipped).
func (c *shutdownChild) expect(t *testing.T, want string) {
	t.Helper()
	for c.lines.Scan() {
		line := c.lines.Text()
		if line == want {
			return
		}
		if strings.HasPrefix(line, "locked") || strings.HasPrefix(line, "closed") {
			t.Fatalf("worker said %q, want %q", line, want)
		}
	}
	t.Fatalf("worker ended before saying %q", want)
}

func (c *shutdownChild) wait(t *testing.T) {
	t.Helper()
	_ = c.stdin.Close()
	for c.lines.Scan() {
	}
	if err := c.finish(); err != nil {
		t.Fatalf("worker failed: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
