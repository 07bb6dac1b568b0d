package faults

import (
	"context"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
)

// SIGKILL and the fair semaphore (2 permits). Each test reports its
// measured delay beside its bound.

func semaphoreOn(t *testing.T, addr, name, label string) *fair.Semaphore {
	t.Helper()
	s, err := fair.NewSemaphore(redistest.Owner(client(t, addr)), name, 2, fairlock.WithLease(killLease),
		fairlock.WithWaitTimeout(killWait), fair.WithLabel(label))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type permitResult struct {
	p   *fair.Permit
	err error
	at  time.Time
}

func acquireAsync(s *fair.Semaphore, n int) <-chan permitResult {
	out := make(chan permitResult, 1)
	go func() {
		p, err := s.Acquire(context.Background(), n)
		out <- permitResult{p, err, time.Now()}
	}()
	return out
}

func queueLabels(t *testing.T, addr, name string) []string {
	st, err := fair.InspectSemaphore(context.Background(), client(t, addr), name)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, w := range st.Queue {
		out = append(out, w.Label)
	}
	return out
}

// A holder killed with all permits gives them back within its lease: the
// waiter gets one then, with a greater token.
func TestKilledSemaphoreHolderGivesPermitsBack(t *testing.T) {
	srv := sharedServer(t)
	name := lockName(t)
	w := startWorker(t, workerSpec{Lock: "semaphore", Addr: srv.Addr, Name: name, Lease: killLease, Wait: killWait, Label: "holder"})
	token := w.held(30 * time.Second)
	s := semaphoreOn(t, srv.Addr, name, "waiter")
	done := acquireAsync(s, 1)
	eventually(t, 5*time.Second, "the waiter queued", func() bool {
		q := queueLabels(t, srv.Addr, name)
		return len(q) == 1 && q[0] == "waiter"
	})
	time.Sleep(killLease / 2) // a renewal or so
	w.kill()
	killed := time.Now()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	delay := r.at.Sub(killed)
	t.Logf("semaphore: permits back %v after SIGKILL; lease %v (bound)", delay.Round(time.Millisecond), killLease)
	if delay > killLease+slack {
		t.Errorf("permits came back after %v: want within the lease %v plus slack %v", delay, killLease, slack)
	}
	if r.p.Token() <= token {
		t.Errorf("token %d after the dead holder's %d", r.p.Token(), token)
	}
	_ = r.p.Release(context.Background())
}

// The first waiter killed while it waits for permits is passed over within
// one wait timeout: the waiter behind it gets the permits once they are free.
func TestKilledFirstSemaphoreWaiterIsPassedOver(t *testing.T) {
	srv := sharedServer(t)
	name := lockName(t)
	s := semaphoreOn(t, srv.Addr, name, "holder")
	ctx := context.Background()
	held, err := s.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	w := startWorker(t, workerSpec{Lock: "semaphore", Addr: srv.Addr, Name: name, Lease: killLease, Wait: killWait, Label: "first"})
	eventually(t, 5*time.Second, "the worker queued first", func() bool {
		q := queueLabels(t, srv.Addr, name)
		return len(q) == 1 && q[0] == "first"
	})
	done := acquireAsync(semaphoreOn(t, srv.Addr, name, "second"), 1)
	eventually(t, 5*time.Second, "the second waiter queued", func() bool {
		return len(queueLabels(t, srv.Addr, name)) == 2
	})
	w.kill()
	killed := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	delay := r.at.Sub(killed)
	t.Logf("semaphore: dead first waiter passed over %v after SIGKILL; wait timeout %v (bound)", delay.Round(time.Millisecond), killWait)
	if delay > killWait+slack {
		t.Errorf("passed over after %v: want within the wait timeout %v plus slack %v", delay, killWait, slack)
	}
	_ = r.p.Release(ctx)
}
