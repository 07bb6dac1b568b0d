package fair_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock/fairlock"
	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/fairlock/fairlock/observe"
	"github.com/redis/go-redis/v9"
)

const electionName = "scheduler"

// candidate is a handle on the test election, on a client of its own (a
// process of its own), labelled label.
func (e *env) candidate(c *redis.Client, label string, opts ...fair.Option) *fair.Election {
	e.t.Helper()
	el, err := fair.NewElection(redistest.OwnerOn(c, e.clk, nil), electionName, append([]fair.Option{fair.WithLabel(label)}, opts...)...)
	if err != nil {
		e.t.Fatalf("NewElection: %v", err)
	}
	return el
}

type campaigned struct {
	lead context.Context
	err  error
}

func campaignAsync(ctx context.Context, el *fair.Election, value string) <-chan campaigned {
	out := make(chan campaigned, 1)
	go func() {
		lead, err := el.Campaign(ctx, value)
		out <- campaigned{lead, err}
	}()
	return out
}

func awaitLead(t *testing.T, c <-chan campaigned) context.Context {
	t.Helper()
	select {
	case r := <-c:
		if r.err != nil {
			t.Fatalf("Campaign: %v", r.err)
		}
		return r.lead
	case <-time.After(10 * time.Second):
		t.Fatal("a candidate did not become leader")
		return nil
	}
}

func stillCampaigning(t *testing.T, c <-chan campaigned, who string) {
	t.Helper()
	select {
	case r := <-c:
		t.Fatalf("%s returned while another leads: %v", who, r.err)
	default:
	}
}

// candidates waits until n candidates are queued, and they and the
// clients' watches (one per client with observers) are asleep: nothing is
// left to do until a message or the clock moves.
func (e *env) candidates(n, watches int) {
	e.t.Helper()
	redistest.Quiet(e.t, "the candidates are queued and asleep", func() bool {
		s, err := fair.InspectElection(context.Background(), e.client, electionName)
		return err == nil && len(s.Candidates) == n && redistest.Asleep() == n+watches
	})
}

func mustLeader(t *testing.T, el *fair.Election) fair.Leadership {
	t.Helper()
	l, err := el.Leader(context.Background())
	if err != nil {
		t.Fatalf("Leader: %v", err)
	}
	return l
}

// next returns the next leadership an observer receives.
func next(t *testing.T, ch <-chan fair.Leadership) fair.Leadership {
	t.Helper()
	select {
	case l, ok := <-ch:
		if !ok {
			t.Fatal("the observer's channel closed")
		}
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no leadership was observed")
		return fair.Leadership{}
	}
}

// until returns the first leadership an observer receives for which want
// holds: a reader may be shown values that were current a moment before.
func until(t *testing.T, ch <-chan fair.Leadership, what string, want func(fair.Leadership) bool) fair.Leadership {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-ch:
			if !ok {
				t.Fatalf("the observer's channel closed before %s", what)
			}
			if want(l) {
				return l
			}
		case <-deadline:
			t.Fatalf("never observed %s", what)
		}
	}
}

func TestElectionCandidatesLeadInCampaignOrderWithGrowingTerms(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.candidate(e.process(), "a")
	b := e.candidate(e.process(), "b")
	c := e.candidate(e.process(), "c")

	if _, err := a.Leader(ctx); !errors.Is(err, fair.ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v, want ErrNoLeader", err)
	}
	leadA, err := a.Campaign(ctx, "host-a:8080")
	if err != nil {
		t.Fatal(err)
	}
	gotB := campaignAsync(ctx, b, "host-b:8080")
	e.candidates(1, 0)
	gotC := campaignAsync(ctx, c, "host-c:8080")
	e.candidates(2, 0)
	stillCampaigning(t, gotB, "b")
	stillCampaigning(t, gotC, "c")

	first := mustLeader(t, c)
	if first.Value != "host-a:8080" || first.Origin.Label != "a" || first.Term == 0 || !first.Since.Equal(e.clk.Now().Truncate(time.Millisecond)) {
		t.Fatalf("Leader = %+v, want a's value, label and a term since now", first)
	}
	if got := a.Term(leadA); got != first.Term {
		t.Fatalf("Term(lead) = %d, Leader says term %d", got, first.Term)
	}
	if got := a.Term(ctx); got != 0 {
		t.Fatalf("Term of a context with no leadership = %d, want 0", got)
	}
	if err := a.Resign(leadA); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	if got := a.Term(leadA); got != first.Term {
		t.Fatalf("Term(lead) after Resign = %d, want the term it had, %d", got, first.Term)
	}
	if !errors.Is(context.Cause(leadA), fair.ErrResigned) {
		t.Fatalf("cause of a resigned leadership: %v", context.Cause(leadA))
	}
	leadB := awaitLead(t, gotB)
	second := mustLeader(t, a)
	if second.Value != "host-b:8080" || second.Term <= first.Term {
		t.Fatalf("after a resigned: %+v, want b with a term above %d", second, first.Term)
	}
	stillCampaigning(t, gotC, "c")
	if err := b.Resign(leadB); err != nil {
		t.Fatal(err)
	}
	leadC := awaitLead(t, gotC)
	third := mustLeader(t, a)
	if third.Value != "host-c:8080" || third.Term <= second.Term {
		t.Fatalf("after b resigned: %+v, want c with a term above %d", third, second.Term)
	}
	if err := c.Resign(leadC); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Leader(ctx); !errors.Is(err, fair.ErrNoLeader) {
		t.Fatalf("Leader once all resigned: %v, want ErrNoLeader", err)
	}
}

func TestElectionValuesKeepEveryByte(t *testing.T) {
	e := newEnv(t)
	a := e.candidate(e.process(), "a b;c|d%")
	b := e.candidate(e.process(), "b")
	odd := "a b;c|d%20\t\n=é"
	lead, err := a.Campaign(context.Background(), odd)
	if err != nil {
		t.Fatal(err)
	}
	gotB := campaignAsync(context.Background(), b, odd+"|b")
	e.candidates(1, 0)
	s, err := fair.InspectElection(context.Background(), e.client, electionName)
	if err != nil {
		t.Fatal(err)
	}
	if s.Leader.Value != odd || s.Leader.Origin.Label != "a b;c|d%" || s.Candidates[0].Value != odd+"|b" {
		t.Fatalf("InspectElection = %+v", s)
	}
	ch := b.Observe(t.Context())
	if l := next(t, ch); l.Value != odd || l.Origin.Label != "a b;c|d%" {
		t.Fatalf("observed %+v", l)
	}
	if err := a.Resign(lead); err != nil {
		t.Fatal(err)
	}
	awaitLead(t, gotB)
	if l := next(t, ch); l.Value != odd+"|b" {
		t.Fatalf("observed %+v after the hand-over", l)
	}
}

func TestElectionProclaimChangesTheValueNotTheTerm(t *testing.T) {
	e := newEnv(t)
	a := e.candidate(e.process(), "a")
	watcher := e.candidate(e.process(), "w")
	ctx := context.Background()
	lead, err := a.Campaign(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	ch := watcher.Observe(t.Context())
	before := next(t, ch)
	if err := a.Proclaim(lead, "v2"); err != nil {
		t.Fatalf("Proclaim: %v", err)
	}
	after := next(t, ch)
	if after.Value != "v2" || after.Term != before.Term || !after.Since.Equal(before.Since) {
		t.Fatalf("after Proclaim: %+v, want v2 in the same term as %+v", after, before)
	}
	if got := mustLeader(t, watcher); got != after {
		t.Fatalf("Leader = %+v, observed %+v", got, after)
	}
	// Not the leadership's context: refused, nothing changes.
	if err := a.Proclaim(ctx, "v3"); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("Proclaim with a context that carries no leadership: %v, want ErrNotHeld", err)
	}
	if err := a.Proclaim(lead, strings.Repeat("x", fair.MaxValueLen+1)); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Fatalf("Proclaim of a value too long: %v", err)
	}
	if got := mustLeader(t, watcher); got.Value != "v2" {
		t.Fatalf("a refused Proclaim changed the value: %+v", got)
	}
	if err := a.Resign(lead); err != nil {
		t.Fatal(err)
	}
	if err := a.Proclaim(lead, "v4"); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("Proclaim after Resign: %v, want ErrNotHeld", err)
	}
}

func TestElectionCampaignWithTheLeadershipReturnsItAtOnce(t *testing.T) {
	e := newEnv(t)
	var scripts redistest.ScriptCounter
	c := e.process()
	c.AddHook(&scripts)
	a := e.candidate(c, "a")
	lead, err := a.Campaign(context.Background(), "v1")
	if err != nil {
		t.Fatal(err)
	}
	term := mustLeader(t, a).Term
	calls := scripts.Scripts.Load()
	again, err := a.Campaign(lead, "ignored")
	if err != nil {
		t.Fatalf("Campaign with the leadership's context: %v", err)
	}
	if n := scripts.Scripts.Load() - calls; n != 0 {
		t.Fatalf("a re-entering Campaign made %d script calls, want 0", n)
	}
	if l := mustLeader(t, a); l.Term != term || l.Value != "v1" {
		t.Fatalf("after re-entry: %+v, want term %d and value v1", l, term)
	}
	// One Resign ends it: a re-entry is not counted.
	if err := a.Resign(again); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Leader(context.Background()); !errors.Is(err, fair.ErrNoLeader) {
		t.Fatalf("after one Resign: %v, want ErrNoLeader", err)
	}
	if lead.Err() == nil || again.Err() == nil {
		t.Fatal("the leadership's contexts outlived it")
	}
	// Its context, once it ended, says why rather than campaign again.
	if _, err := a.Campaign(lead, "v2"); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("Campaign with the context of a resigned leadership: %v, want ErrNotHeld", err)
	}
}

// The hold's-context contract, for an election: the end of the campaign's
// ctx ends lead (the leader's code stops) but not the term, which lasts
// until Resign, so nobody else leads while the old leader's code may still
// act; Resign with lead then hands over.
func TestElectionEndOfTheCampaignContextEndsLeadNotTheTerm(t *testing.T) {
	e := newEnv(t)
	a := e.candidate(e.process(), "a")
	b := e.candidate(e.process(), "b")
	ctxA, cancelA := context.WithCancel(context.Background())
	lead, err := a.Campaign(ctxA, "a")
	if err != nil {
		t.Fatal(err)
	}
	gotB := campaignAsync(context.Background(), b, "b")
	e.candidates(1, 0)
	cancelA()
	if !errors.Is(context.Cause(lead), context.Canceled) {
		t.Fatalf("cause of the leadership's context: %v, want the campaign's", context.Cause(lead))
	}
	if l := mustLeader(t, a); l.Value != "a" {
		t.Fatalf("leader after a's ctx ended, before its Resign: %+v, want a (the term lasts until Resign)", l)
	}
	if err := a.Resign(lead); err != nil {
		t.Fatalf("Resign after the campaign's ctx ended: %v", err)
	}
	awaitLead(t, gotB)
	if l := mustLeader(t, a); l.Value != "b" {
		t.Fatalf("leader after a resigned: %+v", l)
	}
}

func TestElectionCampaignThatGivesUpLeavesTheQueue(t *testing.T) {
	e := newEnv(t)
	a := e.candidate(e.process(), "a")
	b := e.candidate(e.process(), "b")
	c := e.candidate(e.process(), "c")
	lead, err := a.Campaign(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	ctxB, cancelB := context.WithCancel(context.Background())
	gotB := campaignAsync(ctxB, b, "b")
	e.candidates(1, 0)
	gotC := campaignAsync(context.Background(), c, "c")
	e.candidates(2, 0)
	cancelB()
	if r := <-gotB; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("b's Campaign: %v, want context.Canceled", r.err)
	}
	e.candidates(1, 0)
	if err := a.Resign(lead); err != nil {
		t.Fatal(err)
	}
	awaitLead(t, gotC)
	if l := mustLeader(t, a); l.Value != "c" {
		t.Fatalf("leader: %+v, want c (b gave up)", l)
	}
}

func TestElectionLeaderThatDiesIsFollowedWithinItsLease(t *testing.T) {
	e := newEnv(t)
	lease := 3 * time.Second
	ac, bc := e.process(), e.process()
	a := e.candidate(ac, "a", fairlock.WithLease(lease))
	b := e.candidate(bc, "b", fairlock.WithLease(lease))
	watcher := e.candidate(e.process(), "w", fairlock.WithLease(lease))
	leadA, err := a.Campaign(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	ch := watcher.Observe(t.Context())
	if l := next(t, ch); l.Value != "a" {
		t.Fatalf("observed %+v", l)
	}
	gotB := campaignAsync(context.Background(), b, "b")
	e.candidates(1, 1)
	_ = ac.Close() // a crashes: nothing of it reaches Redis again

	e.clk.Advance(lease - 10*time.Millisecond)
	redistest.Quiet(t, "b waits for the lease's end", func() bool { return true })
	stillCampaigning(t, gotB, "b")
	e.clk.Advance(20 * time.Millisecond)
	leadB := awaitLead(t, gotB)
	if !errors.Is(context.Cause(leadA), fairlock.ErrLockLost) {
		t.Fatalf("the dead leader's leadership: cause %v, want ErrLockLost", context.Cause(leadA))
	}
	if l := next(t, ch); l.Value != "b" {
		t.Fatalf("observed %+v after the failover", l)
	}

	// b dies too, with nobody behind it: its lease runs out, which
	// publishes nothing; the observer's fallback reads it at the expiry.
	_ = bc.Close()
	for range 4 {
		e.clk.Advance(lease / 3)
		redistest.Quiet(t, "the clock moved", func() bool { return true })
	}
	if !errors.Is(context.Cause(leadB), fairlock.ErrLockLost) {
		t.Fatalf("b's leadership: cause %v, want ErrLockLost", context.Cause(leadB))
	}
	if l := next(t, ch); l != (fair.Leadership{}) {
		t.Fatalf("observed %+v once every leader died, want the zero Leadership", l)
	}
}

func TestElectionObserversEndOnTheLatestAndCloseWithTheirContext(t *testing.T) {
	e := newEnv(t)
	a := e.candidate(e.process(), "a")
	c := e.process()
	w := e.candidate(c, "w")
	w2 := e.candidate(c, "w2") // another handle of the same owner
	ctx, cancel := context.WithCancel(context.Background())
	slow := w.Observe(ctx)
	if l := next(t, slow); l != (fair.Leadership{}) {
		t.Fatalf("first value with nobody leading: %+v, want the zero Leadership", l)
	}
	lead, err := a.Campaign(context.Background(), "v0")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 20; i++ {
		if err := a.Proclaim(lead, "v"+string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
	}
	late := w2.Observe(ctx)
	if l := next(t, late); l.Term == 0 {
		t.Fatalf("an observer started late got %+v first, want the current leader", l)
	} else if l.Value != "vu" { // the client's news of it was on its way
		until(t, late, "the last value", func(l fair.Leadership) bool { return l.Value == "vu" })
	}
	// The slow reader skipped values, but ends on the latest.
	redistest.Quiet(t, "the news is read", func() bool { return true })
	var last fair.Leadership
	for {
		select {
		case l := <-slow:
			last = l
			continue
		default:
		}
		break
	}
	if last.Value != "vu" {
		t.Fatalf("the slow observer ended on %+v, want vu", last)
	}
	cancel()
	for _, ch := range []<-chan fair.Leadership{slow, late} {
		select {
		case _, ok := <-ch:
			for ok {
				_, ok = <-ch
			}
		case <-time.After(10 * time.Second):
			t.Fatal("an observer's channel outlived its context")
		}
	}
	if err := a.Resign(lead); err != nil {
		t.Fatal(err)
	}
}

func TestElectionObserversCloseWithTheirOwner(t *testing.T) {
	e := newEnv(t)
	owner, err := redistest.NewOwner(e.process(), e.clk)
	if err != nil {
		t.Fatal(err)
	}
	el, err := fair.NewElection(owner, electionName)
	if err != nil {
		t.Fatal(err)
	}
	ch := el.Observe(context.Background())
	next(t, ch)
	lead, err := el.Campaign(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(lead), fairlock.ErrClosed) {
		t.Fatalf("leadership after Close: cause %v, want ErrClosed", context.Cause(lead))
	}
	deadline := time.After(10 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-ch:
		case <-deadline:
			t.Fatal("the observer's channel stayed open after Close")
		}
	}
	if _, ok := <-el.Observe(context.Background()); ok {
		t.Fatal("Observe on a closed owner gave an open channel")
	}
	if _, err := el.Campaign(context.Background(), "y"); !errors.Is(err, fairlock.ErrClosed) {
		t.Fatalf("Campaign on a closed owner: %v", err)
	}
}

func TestElectionBadInput(t *testing.T) {
	e := newEnv(t)
	owner := redistest.OwnerOn(e.client, e.clk, nil)
	if _, err := fair.NewElection(nil, "x"); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Fatalf("nil owner: %v", err)
	}
	for _, name := range []string{"", "a{b", "a}b"} {
		if _, err := fair.NewElection(owner, name); !errors.Is(err, fairlock.ErrInvalidArgument) {
			t.Fatalf("name %q: %v", name, err)
		}
	}
	if _, err := fair.NewElection(owner, "x", fairlock.WithLease(-time.Second)); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Fatalf("negative lease: %v", err)
	}
	el, err := fair.NewElection(owner, "x")
	if err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1012 a nil ctx is the bad input under test
	if _, err := el.Campaign(nil, "v"); !errors.Is(err, fairlock.ErrInvalidArgument) { //nolint:staticcheck
		t.Fatalf("nil ctx: %v", err)
	}
	if _, err := el.Campaign(context.Background(), strings.Repeat("x", fair.MaxValueLen+1)); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Fatalf("value too long: %v", err)
	}
	if err := el.Resign(context.Background()); !errors.Is(err, fairlock.ErrNotHeld) {
		t.Fatalf("Resign with no leadership: %v", err)
	}
	var zero *fair.Election
	if _, err := zero.Campaign(context.Background(), "v"); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Fatalf("nil Election: %v", err)
	}
	if _, err := zero.Leader(context.Background()); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Fatalf("nil Election's Leader: %v", err)
	}
	if _, ok := <-zero.Observe(context.Background()); ok {
		t.Fatal("a nil Election's Observe gave an open channel")
	}
	if _, err := fair.InspectElection(context.Background(), e.client, "a{b"); !errors.Is(err, fairlock.ErrInvalidArgument) {
		t.Fatalf("InspectElection of a bad name: %v", err)
	}
}

// One message per observing client, whatever the number of its observers.
func TestElectionOneMessagePerChangeReachesEveryObservingClient(t *testing.T) {
	e := newEnv(t)
	a := e.candidate(e.process(), "a")
	ctx := t.Context()
	var chans []<-chan fair.Leadership
	for range 3 {
		c := e.process()
		for _, label := range []string{"x", "y"} {
			ch := e.candidate(c, label).Observe(ctx)
			next(t, ch)
			chans = append(chans, ch)
		}
	}
	msgs := e.client.Subscribe(ctx, transport.LeaderChannel(transport.Channel(transport.ElectionBase(electionName))))
	defer msgs.Close()
	if _, err := msgs.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	numsub := func() int64 {
		n, err := e.client.PubSubNumSub(ctx, transport.LeaderChannel(transport.Channel(transport.ElectionBase(electionName)))).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range n {
			return v
		}
		return 0
	}
	if n := numsub(); n != 4 { // 3 clients, and this test's
		t.Fatalf("%d subscribers to the leader channel, want one per observing client (3) and the test's", n)
	}
	lead, err := a.Campaign(context.Background(), "v")
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range chans {
		if l := next(t, ch); l.Value != "v" {
			t.Fatalf("observed %+v", l)
		}
	}
	m, err := msgs.ReceiveMessage(ctx)
	if err != nil || !strings.HasPrefix(m.Payload, transport.LeadershipNote+" ") {
		t.Fatalf("the leader channel carried %v, %v", m, err)
	}
	if err := a.Resign(lead); err != nil {
		t.Fatal(err)
	}
}

// The observer hook sees a campaign as an acquisition and a term as a hold
// of primitive election: leadership changes and term lengths.
func TestElectionReportsCampaignsAndTermsToItsObserver(t *testing.T) {
	e := newEnv(t)
	var rec redistest.Recorder
	a := e.candidate(e.process(), "a", fairlock.WithObserver(&rec))
	lead, err := a.Campaign(context.Background(), "v")
	if err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(5 * time.Second)
	if err := a.Resign(lead); err != nil {
		t.Fatal(err)
	}
	got := rec.Snapshot()
	if len(got.Acquisitions) != 1 || got.Acquisitions[0].Primitive != observe.Election ||
		got.Acquisitions[0].Outcome != observe.Acquired || got.Acquisitions[0].Lock != electionName {
		t.Fatalf("acquisitions reported: %+v", got.Acquisitions)
	}
	if len(got.Holds) != 1 || got.Holds[0].Primitive != observe.Election || got.Holds[0].End != observe.Released ||
		got.Holds[0].Held != 5*time.Second {
		t.Fatalf("terms reported: %+v, want one of 5s, released", got.Holds)
	}
}

// failScripts is a go-redis hook that, while on, answers every script call
// (FCALL, EVALSHA, EVAL) with the error of a server that has none, as one
// where an operator renamed them away.
type failScripts struct{ on *atomic.Bool }

func (failScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f failScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := strings.ToLower(cmd.Name()); f.on.Load() && (name == "fcall" || strings.HasPrefix(name, "eval")) {
			err := serverError("ERR unknown command '" + name + "'")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (failScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// serverError is an error as Redis answers one (a redis.Error).
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

// An observer that cannot read who leads (no script can run) is told so,
// once, by a Leadership with Err, not by the zero Leadership that means
// "nobody leads"; once scripts run again it is told who leads, within a
// second.
func TestElectionObserverIsToldWhenItCannotSee(t *testing.T) {
	e := newEnv(t)
	a := e.candidate(e.process(), "a")
	lead, err := a.Campaign(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Resign(lead) }()
	c := e.process()
	var refuse atomic.Bool
	refuse.Store(true)
	c.AddHook(failScripts{&refuse})
	w := e.candidate(c, "w")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := w.Observe(ctx)
	first := next(t, ch)
	if first.Err == nil || !strings.Contains(first.Err.Error(), "unknown command") {
		t.Fatalf("first value with no script able to run: %+v, want one with the server's error", first)
	}
	if first.Value != "" || first.Term != 0 {
		t.Errorf("a value that cannot see carries a leadership: %+v", first)
	}
	e.clk.Advance(time.Second) // the next read fails too: nothing more is sent
	redistest.Quiet(t, "the watch read again", func() bool { return redistest.Asleep() == 1 })
	select {
	case l := <-ch:
		t.Fatalf("a second failed read was sent: %+v", l)
	default:
	}
	refuse.Store(false)
	e.clk.Advance(time.Second)
	if l := next(t, ch); l.Err != nil || l.Value != "a" {
		t.Fatalf("after scripts run again: %+v, want a leading", l)
	}
}

// An observer whose connection fails is told at once that it cannot see,
// not only at the leader's lease end; when Redis is back it is told who
// leads.
func TestElectionObserverIsToldWhenItsConnectionFails(t *testing.T) {
	e := newEnv(t)
	a := e.candidate(e.process(), "a")
	lead, err := a.Campaign(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	w := e.candidate(e.process(), "w")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := w.Observe(ctx)
	if l := next(t, ch); l.Value != "a" {
		t.Fatalf("first value: %+v, want a", l)
	}
	e.mr.Close()
	if l := next(t, ch); l.Err == nil {
		t.Fatalf("after the server went away: %+v, want one with Err", l)
	}
	if err := e.mr.Restart(); err != nil {
		t.Fatal(err)
	}
	var l fair.Leadership
	for l.Err != nil || l.Value == "" {
		select {
		case l = <-ch:
		case <-time.After(50 * time.Millisecond):
			e.clk.Advance(time.Second) // the watch reads a second after a failed read
		}
	}
	if l.Value != "a" {
		t.Fatalf("after the server came back: %+v, want a", l)
	}
	if err := a.Resign(lead); err != nil {
		t.Fatal(err)
	}
}

// The leader and every candidate stop at once (one ctx, as a SIGTERM to
// each process cancels, and the leader resigns as its code stops): the
// leader's resign may hand the leadership to a
// candidate whose own leave has not reached Redis yet. That candidate's
// Campaign still returns its ctx's error, never a leadership, and its leave
// ends the term it was granted at once; observers may see such terms
// (docs/election.md, "Candidates that leave together"), with growing terms,
// and then nobody leading.
func TestElectionCandidatesThatLeaveTogetherLeaveNobodyLeading(t *testing.T) {
	e := newEnv(t)
	ctx, stop := context.WithCancel(context.Background())
	a := e.candidate(e.process(), "a")
	lead, err := a.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	w := e.candidate(e.process(), "w")
	octx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := w.Observe(octx)
	if l := next(t, ch); l.Value != "a" {
		t.Fatalf("first value: %+v, want a", l)
	}
	gotB := campaignAsync(ctx, e.candidate(e.process(), "b"), "b")
	gotC := campaignAsync(ctx, e.candidate(e.process(), "c"), "c")
	e.candidates(2, 1)
	stop()
	for _, got := range []<-chan campaigned{gotB, gotC} {
		if r := <-got; !errors.Is(r.err, context.Canceled) {
			t.Fatalf("a candidate whose ctx ended: Campaign = %v, %v; want its ctx's error", r.lead, r.err)
		}
	}
	<-lead.Done()
	if err := a.Resign(lead); err != nil { // its code stopped: it resigns
		t.Fatal(err)
	}
	seen := []string{"a"}
	term := int64(0)
	l := until(t, ch, "nobody leading", func(l fair.Leadership) bool {
		if l.Err != nil {
			t.Fatalf("observer: %v", l.Err)
		}
		if l.Term != 0 {
			if l.Term <= term {
				t.Fatalf("term %d observed after %d", l.Term, term)
			}
			term = l.Term
			seen = append(seen, l.Value)
		}
		return l.Term == 0
	})
	t.Logf("observed %v, then %+v", seen, l)
	if _, err := w.Leader(context.Background()); !errors.Is(err, fair.ErrNoLeader) {
		t.Fatalf("Leader after every candidate left: %v, want ErrNoLeader", err)
	}
}
