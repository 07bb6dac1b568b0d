package fair_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/fairlock/fairlock"
)

// A deploy that changes the semaphore's number in the code changes nothing
// while the semaphore is live (its number is Redis's): the handle's first
// acquisition warns, once, naming both numbers; SetPermits makes the change.
func TestADifferentNumberOfPermitsIsWarnedOf(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	old := e.semaphore(2)
	p, err := old.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	deployed := e.semaphore(5, fairlock.WithLogger(slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))))
	for range 2 {
		p, err := deployed.Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if n := strings.Count(out, "another number of permits"); n != 1 ||
		!strings.Contains(out, "redis_permits=2") || !strings.Contains(out, "handle_permits=5") {
		t.Errorf("log = %q, want one warning naming 2 in Redis and 5 in the handle", out)
	}
	if k, err := deployed.Permits(ctx); err != nil || k != 2 {
		t.Errorf("Permits = %d, %v; want Redis's 2", k, err)
	}
	if _, err := deployed.SetPermits(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if k, err := old.Permits(ctx); err != nil || k != 5 {
		t.Errorf("after SetPermits, Permits = %d, %v; want 5 for every handle", k, err)
	}
}
