package fair_test

import (
	"context"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
)

// observeGrace is fair's: a watch reads who leads this long after the
// expiry its last news gave (docs/election.md, "How the news travels").
const observeGrace = 50 * time.Millisecond

// takeover is a leader a that dies (its client closes: nothing of it
// reaches Redis again) with a candidate b queued behind it on a client the
// test may cut off, and an observer on a third client, all on the fake
// clock; expiry is a's lease's end.
type takeover struct {
	e      *env
	b      *fair.Election
	cut    *redistest.Partition
	gotB   <-chan campaigned
	ch     <-chan fair.Leadership
	expiry time.Time
	led    bool // b's Campaign returned
}

func newTakeover(t *testing.T) *takeover {
	e := newEnv(t)
	const lease = 3 * time.Second
	ac, bc := e.process(), e.process()
	cut := &redistest.Partition{}
	bc.AddHook(cut)
	a := e.candidate(ac, "a", fairlock.WithLease(lease))
	b := e.candidate(bc, "b", fairlock.WithLease(lease))
	w := e.candidate(e.process(), "w", fairlock.WithLease(lease))
	if _, err := a.Campaign(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	expiry := e.clk.Now().Add(lease) // a renews nothing: it dies before the clock moves
	ch := w.Observe(t.Context())
	if l := next(t, ch); l.Value != "a" {
		t.Fatalf("observed %+v, want a", l)
	}
	gotB := campaignAsync(context.Background(), b, "b")
	e.candidates(1, 1)
	_ = ac.Close()
	return &takeover{e: e, b: b, cut: cut, gotB: gotB, ch: ch, expiry: expiry}
}

// to moves the clock to at, in steps of 1 ms, letting the candidate and
// the watch act on each; it returns when b leads, if it does by then.
func (tk *takeover) to(t *testing.T, at time.Time) (lead context.Context) {
	t.Helper()
	for tk.e.clk.Now().Before(at) {
		tk.e.clk.Advance(time.Millisecond)
		redistest.Quiet(t, "the candidate and the watch act on the clock", func() bool {
			return redistest.Asleep() == 2 || len(tk.gotB) == 1
		})
		if len(tk.gotB) == 1 {
			tk.led = true
			return awaitLead(t, tk.gotB)
		}
	}
	return nil
}

// heard returns what the observer was told since it last looked, the last
// value (or false: nothing), once every message on its way was read and
// the watch, and b while it campaigns, sleep again.
func (tk *takeover) heard(t *testing.T) (fair.Leadership, bool) {
	t.Helper()
	sleepers := 2
	if len(tk.gotB) == 0 && tk.led {
		sleepers = 1
	}
	redistest.Quiet(t, "the watch read its news", func() bool { return redistest.Asleep() == sleepers })
	select {
	case l := <-tk.ch:
		return l, true
	default:
		return fair.Leadership{}, false
	}
}

// A leader that dies is followed, at its lease's end, by the candidate
// behind it, and the observer hears of the takeover from the message of
// the script that made it: with no fake time passing after the new
// leader's Campaign returns, long before its own read at the expiry and
// observeGrace, and with no "nobody" in between.
func TestElectionObserverHearsALeaseExpiryTakeoverByItsMessage(t *testing.T) {
	tk := newTakeover(t)
	if tk.to(t, tk.expiry.Add(-time.Millisecond)) != nil {
		t.Fatal("b led before the dead leader's lease ended")
	}
	if l, ok := tk.heard(t); ok {
		t.Fatalf("observed %+v before the dead leader's lease ended", l)
	}
	lead := tk.to(t, tk.expiry.Add(observeGrace-time.Millisecond))
	if lead == nil {
		t.Fatal("b did not lead within observeGrace of the dead leader's expiry")
	}
	took := tk.e.clk.Now()
	l, ok := tk.heard(t)
	if !ok || l.Value != "b" || l.Term != tk.b.Term(lead) {
		t.Fatalf("observed %+v (%v) once b led, with the clock still; want b's term, by its message", l, ok)
	}
	t.Logf("b led %v after the dead leader's expiry; the observer heard at once (fake clock), not by its read %v after the expiry",
		took.Sub(tk.expiry), observeGrace)
	if err := tk.b.Resign(lead); err != nil {
		t.Fatal(err)
	}
}

// With the candidate behind cut off at the dead leader's expiry, nothing
// publishes the lease's end: the observer reads who leads observeGrace
// after the expiry it was told of (not sooner) and is told "nobody"; once
// the candidate takes over, later, the observer hears of it by message,
// with no fake time passing after the new leader's Campaign returns.
func TestElectionObserverSeesNobodyAtTheGraceThenALateTakeover(t *testing.T) {
	tk := newTakeover(t)
	tk.to(t, tk.expiry.Add(-time.Millisecond))
	tk.cut.On.Store(true)
	if tk.to(t, tk.expiry.Add(observeGrace-time.Millisecond)) != nil {
		t.Fatal("b led while cut off")
	}
	if l, ok := tk.heard(t); ok {
		t.Fatalf("observed %+v before observeGrace after the expiry", l)
	}
	tk.to(t, tk.expiry.Add(observeGrace))
	if l, ok := tk.heard(t); !ok || l != (fair.Leadership{}) {
		t.Fatalf("observed %+v (%v) observeGrace after the expiry, b cut off; want nobody", l, ok)
	}
	tk.cut.On.Store(false)
	lead := tk.to(t, tk.expiry.Add(10*time.Second))
	if lead == nil {
		t.Fatal("b did not lead once it could reach Redis again")
	}
	l, ok := tk.heard(t)
	if !ok || l.Value != "b" || l.Term != tk.b.Term(lead) {
		t.Fatalf("observed %+v (%v) once b led late, with the clock still; want b's term, by its message", l, ok)
	}
	if err := tk.b.Resign(lead); err != nil {
		t.Fatal(err)
	}
}
