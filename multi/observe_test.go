package multi_test

import (
	"context"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/observe"
)

// A RedLock reports as one lock: one acquisition and one hold per Lock,
// not one per master.
func TestRedLockReportsAsOneLock(t *testing.T) {
	m := newMasters(t)
	rec := &redistest.Recorder{}
	r := m.redlock(fairlock.WithObserver(rec))
	ctx, err := r.LockContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	m.clk.Advance(2 * time.Second)
	for range 2 {
		if err := r.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := rec.Snapshot()
	if len(got.Acquisitions) != 2 || got.Acquisitions[0].Outcome != observe.Acquired ||
		got.Acquisitions[1].Outcome != observe.Reentered {
		t.Fatalf("acquisitions: %+v", got.Acquisitions)
	}
	for _, a := range got.Acquisitions {
		if a.Primitive != observe.RedLock || a.Lock != "orders" {
			t.Errorf("acquisition: %+v", a)
		}
	}
	if len(got.Holds) != 1 || got.Holds[0].End != observe.Released || got.Holds[0].Held != 2*time.Second ||
		got.Holds[0].Primitive != observe.RedLock {
		t.Fatalf("holds: %+v", got.Holds)
	}
	if len(got.Calls) != 4 { // two acquisitions, two releases
		t.Fatalf("spans: %+v", got.Calls)
	}
}
