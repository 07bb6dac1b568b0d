package fair_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fairlock/fairlock/fair"
	"github.com/fairlock/fairlock/internal/redistest"
)

// On every deployment (single node, Cluster, Sentinel): three candidates,
// each on its own client, lead in the order they campaigned, each
// resigning to the next; an observer on a fourth client sees every leader,
// in order, with growing terms, and ends on "nobody".
func TestRealElectionHandsOverInCampaignOrderAndObserversFollow(t *testing.T) {
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			redistest.NoLeaks(t)
			clients := redistest.Clients(t, kind, 4)
			name := redistest.Name(t)
			ctx := context.Background()
			watcher, err := fair.NewElection(redistest.Owner(clients[3]), name)
			if err != nil {
				t.Fatal(err)
			}
			seen := watcher.Observe(t.Context())
			if l := next(t, seen); l != (fair.Leadership{}) {
				t.Fatalf("first observed %+v, want nobody", l)
			}
			var els []*fair.Election
			var got []<-chan campaigned
			for i := range 3 {
				el, err := fair.NewElection(redistest.Owner(clients[i]), name, fair.WithLabel(fmt.Sprint(i)))
				if err != nil {
					t.Fatal(err)
				}
				els = append(els, el)
				got = append(got, campaignAsync(ctx, el, fmt.Sprintf("host-%d", i)))
				// The next campaigns only once this one is leader or queued.
				waitUntil(t, "the candidate is known", func() bool {
					s, err := fair.InspectElection(ctx, clients[0], name)
					return err == nil && (s.Leader.Term != 0) && len(s.Candidates) == i
				})
			}
			var term int64
			for i, el := range els {
				lead := awaitLead(t, got[i])
				l := until(t, seen, fmt.Sprintf("host-%d leads", i), func(l fair.Leadership) bool { return l.Term != 0 })
				if l.Value != fmt.Sprintf("host-%d", i) || l.Term <= term || l.Term != el.Term(lead) {
					t.Fatalf("observed %+v as leader %d (its term %d), after term %d", l, i, el.Term(lead), term)
				}
				term = l.Term
				rctx, cancel := context.WithTimeout(lead, 5*time.Second)
				if err := el.Resign(rctx); err != nil {
					t.Fatal(err)
				}
				cancel()
			}
			if l := next(t, seen); l != (fair.Leadership{}) {
				t.Fatalf("observed %+v once all resigned, want nobody", l)
			}
		})
	}
}

// A change published while an observing client's connection is cut is
// lost to it: the observer is told that it cannot see; when the connection
// comes back, its watch reads who leads, and the observer ends on the
// latest value all the same.
func TestRealElectionObserverMakesGoodAMessageLostWithItsConnection(t *testing.T) {
	redistest.NoLeaks(t)
	admin := redistest.Real(t)
	name := redistest.Name(t)
	ctx := context.Background()
	cut := &redistest.Partition{}
	watchers, watchersName := redistest.Named(t, admin)
	watchers.AddHook(cut)

	leader, err := fair.NewElection(redistest.Owner(admin), name)
	if err != nil {
		t.Fatal(err)
	}
	lead, err := leader.Campaign(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Resign(lead)
	w, err := fair.NewElection(redistest.Owner(watchers), name)
	if err != nil {
		t.Fatal(err)
	}
	seen := w.Observe(t.Context())
	until(t, seen, "v1", func(l fair.Leadership) bool { return l.Value == "v1" })

	// The watchers' client loses its connections, and cannot dial, while
	// the leader proclaims: the message reaches nobody there.
	cut.On.Store(true)
	killed, err := redistest.KillPubSub(ctx, admin, watchersName)
	if err != nil || killed == 0 {
		t.Fatalf("cutting the observer's connection: %d killed, %v", killed, err)
	}
	if err := leader.Proclaim(lead, "v2"); err != nil {
		t.Fatal(err)
	}
	// It is told it cannot see (Leadership.Err), and nothing else.
	select {
	case l := <-seen:
		if l.Err == nil {
			t.Fatalf("observed %+v while cut off, want only that it cannot see", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the observer was not told that it cannot see while cut off")
	}
	select {
	case l := <-seen:
		t.Fatalf("observed %+v while cut off, after it was told it cannot see", l)
	case <-time.After(300 * time.Millisecond):
	}
	cut.On.Store(false)
	until(t, seen, "v2 once reconnected", func(l fair.Leadership) bool { return l.Value == "v2" })
}
