package fair_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
)

// A hold makes its Lost channel and HoldContext only when asked for them
// (most holds never are). Asked for only after the hold ended, they report
// that end as if they had been made with the hold: Lost closed for a lost
// hold and open for a released one; HoldContext ended with the cause.
func TestLostAndHoldContextAskedForAfterTheHoldEnded(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()

	lost := e.named("lost")
	if ok, err := lost.TryLock(ctx, 0, time.Second); !ok || err != nil {
		t.Fatalf("TryLock: %v, %v", ok, err)
	}
	e.clk.Advance(2 * time.Second) // the fixed lease runs out: the loss timer ends the hold
	select {
	case <-lost.Lost():
	default:
		t.Fatal("Lost, first asked for after the lease ran out, is not closed")
	}
	hc := lost.HoldContext()
	if hc.Err() == nil || !errors.Is(context.Cause(hc), fairlock.ErrLockLost) {
		t.Fatalf("HoldContext of a lost hold: %v, cause %v; want ended with ErrLockLost", hc.Err(), context.Cause(hc))
	}

	released := e.named("released")
	if err := released.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := released.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-released.Lost():
		t.Fatal("Lost of a released hold is closed")
	default:
	}
	hc = released.HoldContext()
	if hc.Err() == nil || !errors.Is(context.Cause(hc), fairlock.ErrReleased) {
		t.Fatalf("HoldContext of a released hold: %v, cause %v; want ended with ErrReleased", hc.Err(), context.Cause(hc))
	}

	// Asked for during the hold, they are the ones its end closes.
	if err := released.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	ch, hc := released.Lost(), released.HoldContext()
	if hc.Err() != nil {
		t.Fatal("HoldContext of a live hold has ended")
	}
	if released.Lost() != ch || released.HoldContext() != hc {
		t.Fatal("asked twice, a hold gave two different Lost channels or contexts")
	}
	if _, err := released.ForceUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(hc), fairlock.ErrReleased) {
		t.Fatalf("after ForceUnlock, HoldContext's cause is %v, want ErrReleased", context.Cause(hc))
	}
}

// A lost hold's log line is written before Lost closes and the hold's
// context ends: whoever reacts to them finds why in the log, even with a
// slow log sink. The fake clock runs the loss timer when it is due, so
// the log says nothing of lateness (TestALateLossSaysHowLate).
func TestLossIsLoggedBeforeLostCloses(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var logs bytes.Buffer
	var mu sync.Mutex
	sink := &slowWriter{lockedWriter{w: &logs, mu: &mu}}
	m := e.named("logged", fairlock.WithLogger(slog.New(slog.NewTextHandler(sink, nil))))
	if ok, err := m.TryLock(ctx, 0, time.Second); !ok || err != nil {
		t.Fatalf("TryLock: %v, %v", ok, err)
	}
	lost, hc := m.Lost(), m.HoldContext()
	seen := make(chan [2]string)
	go func() {
		<-lost
		mu.Lock()
		atLost := logs.String()
		mu.Unlock()
		<-hc.Done()
		mu.Lock()
		atDone := logs.String()
		mu.Unlock()
		seen <- [2]string{atLost, atDone}
	}()
	e.clk.Advance(2 * time.Second) // the fixed lease runs out: the loss timer ends the hold
	got := <-seen
	for i, when := range []string{"Lost closed", "the hold's context ended"} {
		if !strings.Contains(got[i], "lock lost") {
			t.Errorf("when %s the log held %q, want the loss said", when, got[i])
		}
	}
	if strings.Contains(got[0], "late=") {
		t.Errorf("a loss timer that ran on time was logged as late: %q", got[0])
	}
}

// slowWriter is a log sink that takes its time.
type slowWriter struct{ lockedWriter }

func (s *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(20 * time.Millisecond)
	return s.lockedWriter.Write(p)
}
