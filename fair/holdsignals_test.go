package fair_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fairlock/fairlock/fair"
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
	if hc.Err() == nil || !errors.Is(context.Cause(hc), fair.ErrLockLost) {
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
	if hc.Err() == nil || !errors.Is(context.Cause(hc), fair.ErrReleased) {
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
	if !errors.Is(context.Cause(hc), fair.ErrReleased) {
		t.Fatalf("after ForceUnlock, HoldContext's cause is %v, want ErrReleased", context.Cause(hc))
	}
}
