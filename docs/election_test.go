package docs_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The code of election.md, compiled: every ```go block of the page stands
// in this file as it is (TestElectionCodeIsCompiled), and
// TestElectionSchedulerFencesAPausedLeader runs the page's scheduler.

// ErrStaleTerm is what the store answers a write from a term it has seen
// superseded.
var ErrStaleTerm = errors.New("store: a newer term has written")

// TickStore is where the scheduler's work lands. It fences by term: it keeps
// the highest term that wrote, and refuses any lower one.
type TickStore struct {
	mu    sync.Mutex
	term  int64
	ticks []string
}

// Write records one tick of the leader of term, unless a newer term has
// written already. In SQL the same check is one statement:
// UPDATE schedule SET ..., term = $1 WHERE id = $2 AND term <= $1.
func (s *TickStore) Write(term int64, tick string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if term < s.term {
		return ErrStaleTerm
	}
	s.term = term
	s.ticks = append(s.ticks, tick)
	return nil
}

// runScheduler campaigns, leads until its leadership ends, and campaigns
// again, until ctx ends: each machine runs it, one leads at a time.
func runScheduler(ctx context.Context, owner *fairlock.Owner, addr string, store *TickStore, every time.Duration) error {
	e, err := fair.NewElection(owner, "scheduler", fairlock.WithLease(3*time.Second))
	if err != nil {
		return err
	}
	for {
		lead, err := e.Campaign(ctx, addr) // waits until this machine leads
		if err != nil {
			return err // ctx ended: shutting down
		}
		term := e.Term(lead) // the fencing token of this term
		for lead.Err() == nil {
			if err := store.Write(term, addr); errors.Is(err, ErrStaleTerm) {
				break // another machine leads now: stop at once
			}
			select {
			case <-lead.Done(): // resigned, lost, or ctx ended
			case <-time.After(every):
			}
		}
		_ = e.Resign(lead) // after the work stopped; a no-op error if the term already ended
	}
}

// followLeader keeps where the leader can be reached, for a machine that
// sends it work: the current leader at once, then every change.
func followLeader(ctx context.Context, e *fair.Election, route func(addr string)) {
	for l := range e.Observe(ctx) { // closed when ctx ends
		switch {
		case l.Err != nil:
			slog.Warn("cannot see who leads", "error", l.Err) // the last route may still be right
		case l.Term == 0:
			route("") // nobody leads: hold the work back
		default:
			route(l.Value)
		}
	}
}

// Every go block of election.md stands in this file as it is.
func TestElectionCodeIsCompiled(t *testing.T) {
	redistest.CodeBlocksIn(t, "election.md", "election_test.go", 3)
}

// The page's scheduler on three machines: one writes at a time, and when
// its ctx ends the next takes over; a leader paused past its lease is
// refused by the store once the next term has written.
func TestElectionSchedulerFencesAPausedLeader(t *testing.T) {
	redistest.NoLeaks(t)
	addr := redistest.Addrs(t, redistest.Single)[0]
	store := &TickStore{}
	var owners []*fairlock.Owner
	var wg sync.WaitGroup
	cancels := map[string]context.CancelFunc{}
	for _, host := range []string{"host-a:8080", "host-b:8080", "host-c:8080"} {
		client := redis.NewClient(&redis.Options{Addr: addr})
		defer client.Close()
		owner, err := fairlock.NewOwner(client)
		if err != nil {
			t.Fatal(err)
		}
		owners = append(owners, owner)
		ctx, cancel := context.WithCancel(context.Background())
		cancels[host] = cancel
		wg.Go(func() { _ = runScheduler(ctx, owner, host, store, 5*time.Millisecond) })
	}
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
		wg.Wait()
		for _, o := range owners {
			_ = o.Close(context.Background())
		}
	}()
	watcher, err := fair.NewElection(owners[0], "scheduler")
	if err != nil {
		t.Fatal(err)
	}
	routed := make(chan string, 100)
	fctx, stop := context.WithCancel(context.Background())
	defer stop()
	go followLeader(fctx, watcher, func(addr string) { routed <- addr })

	first := waitRouted(t, routed, func(a string) bool { return a != "" })
	cancels[first]() // its machine shuts down: it resigns
	second := waitRouted(t, routed, func(a string) bool { return a != "" && a != first })
	// Observers may hear of a term before its leader's Campaign has
	// returned, and the first leader may have resigned before it wrote:
	// wait for the second's first tick.
	waitTicked(t, store, second)
	store.mu.Lock()
	n := len(store.ticks)
	term := store.term
	store.mu.Unlock()
	if n == 0 || term == 0 {
		t.Fatal("nothing was written")
	}
	// A leader of an older term, paused past its lease, writes on resume:
	// refused.
	if err := store.Write(term-1, first); !errors.Is(err, ErrStaleTerm) {
		t.Fatalf("a write of an older term: %v, want ErrStaleTerm", err)
	}
	// One writer at a time: the ticks change hands once, from first to second.
	store.mu.Lock()
	defer store.mu.Unlock()
	changes := 0
	for i := 1; i < len(store.ticks); i++ {
		if store.ticks[i] != store.ticks[i-1] {
			changes++
			if store.ticks[i-1] != first || store.ticks[i] != second {
				t.Fatalf("ticks went from %s to %s", store.ticks[i-1], store.ticks[i])
			}
		}
	}
	if changes > 1 {
		t.Fatalf("the ticks changed hands %d times, want once", changes)
	}
}

// waitTicked waits until the store holds a tick of addr.
func waitTicked(t *testing.T, store *TickStore, addr string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		store.mu.Lock()
		ticked := slices.Contains(store.ticks, addr)
		store.mu.Unlock()
		if ticked {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s leads but never wrote a tick", addr)
		}
	}
}

func waitRouted(t *testing.T, routed <-chan string, ok func(string) bool) string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case a := <-routed:
			if ok(a) {
				return a
			}
		case <-deadline:
			t.Fatal("the leader never changed")
		}
	}
}
