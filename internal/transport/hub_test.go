package transport_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/redistest"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { redistest.Exit(m) }

// pubsubConnections counts the subscribed connections of the clients named
// name. Only those: other test packages share the server and open and close
// their own meanwhile.
func pubsubConnections(t *testing.T, admin *redis.Client, name string) int {
	t.Helper()
	list, err := admin.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " name="+name+" ") && strings.Contains(line, "sub=") && !strings.Contains(line, " sub=0 ") {
			n++
		}
	}
	return n
}

func received(s *transport.Sub) (string, bool) {
	select {
	case p := <-s.C:
		return p, true
	case <-time.After(300 * time.Millisecond):
		return "", false
	}
}

func TestHubSharesOneConnectionAndWakesOnlyTheWaiterANoteNames(t *testing.T) {
	redistest.NoLeaks(t)
	ctx := context.Background()
	admin := redistest.Real(t)
	name := "hubtest-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	client := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, ClientName: name})
	defer client.Close()
	channel := "fairlock:test:{" + redistest.Name(t) + "}"

	var subs []*transport.Sub
	for i := 0; i < 1000; i++ {
		s, err := core.HubsOf(core.OwnerOf(redistest.Owner(client))).Subscribe(ctx, channel, "c.h/"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	<-subs[0].Ready()
	if n := pubsubConnections(t, admin, name); n != 1 {
		t.Fatalf("1,000 waiters opened %d pub/sub connections, want 1", n)
	}

	if err := admin.Publish(ctx, channel, "c.h/0 freed").Err(); err != nil {
		t.Fatal(err)
	}
	if p, ok := received(subs[0]); !ok || p != "c.h/0 freed" {
		t.Fatalf("the waiter a note names got %q, %v; want its note", p, ok)
	}
	for _, s := range subs[1:5] {
		if _, ok := received(s); ok {
			t.Fatal("a note woke a waiter it does not name")
		}
	}

	// A note left unread by a waiter that leaves was for it alone: it goes
	// with it, and wakes nobody else.
	if err := admin.Publish(ctx, channel, "c.h/0 freed").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	subs[0].Close()
	if _, ok := received(subs[1]); ok {
		t.Fatal("a note for a waiter that left woke another")
	}
	for _, s := range subs[1:] {
		s.Close()
	}
	// The channel lingers for the next waiter, then goes with its connection.
	if live := core.HubsOf(core.OwnerOf(redistest.Owner(client))).SubscribeIfLive(channel, "c.h/x"); live == nil {
		t.Fatal("the channel did not linger after its last waiter left")
	} else {
		live.Close()
	}
	redistest.CloseOwners()
	if n := pubsubConnections(t, admin, name); n != 0 {
		t.Fatalf("%d pub/sub connections left after the idle hub closed", n)
	}
}

func TestHubTargetsMessagesByID(t *testing.T) {
	redistest.NoLeaks(t)
	ctx := context.Background()
	client, admin := redistest.Real(t), redistest.Real(t)
	channel := "fairlock:test:{" + redistest.Name(t) + "}"
	a, _ := core.HubsOf(core.OwnerOf(redistest.Owner(client))).Subscribe(ctx, channel, "entry-a")
	b, _ := core.HubsOf(core.OwnerOf(redistest.Owner(client))).Subscribe(ctx, channel, "entry-b")
	defer a.Close()
	defer b.Close()
	<-a.Ready()
	_ = admin.Publish(ctx, channel, "entry-b 42").Err()
	if p, ok := received(b); !ok || p != "entry-b 42" {
		t.Fatalf("the targeted waiter got %q, %v", p, ok)
	}
	if _, ok := received(a); ok {
		t.Fatal("a message for entry-b woke entry-a")
	}
}

func TestHubWakesEveryWaiterAfterAReconnect(t *testing.T) {
	redistest.NoLeaks(t)
	ctx := context.Background()
	admin := redistest.Real(t)
	client, name := redistest.Named(t, admin)
	channel := "fairlock:test:{" + redistest.Name(t) + "}"
	a, _ := core.HubsOf(core.OwnerOf(redistest.Owner(client))).Subscribe(ctx, channel, "")
	b, _ := core.HubsOf(core.OwnerOf(redistest.Owner(client))).Subscribe(ctx, channel, "x")
	defer a.Close()
	defer b.Close()
	<-a.Ready()
	// Messages published while the connection is down are lost: every
	// waiter must be told to look again once it is subscribed again.
	if n, err := redistest.KillPubSub(ctx, admin, name); err != nil || n != 1 {
		t.Fatalf("closed %d pub/sub connections: %v", n, err)
	}
	for name, s := range map[string]*transport.Sub{"a": a, "b": b} {
		select {
		case p := <-s.C:
			if p != "" {
				t.Fatalf("waiter %s got %q after a reconnect, want a retry", name, p)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("waiter %s was not told to retry after the pub/sub connection came back", name)
		}
	}
}

// A waiter that joined a queue before subscribing must try again once the
// subscription is confirmed: Next reports the confirmation once, even when
// it came before Next was called (the first-contention stall: judged by
// state, a confirmation that came while the waiter was busy was "not news",
// and a hand-off published before the subscription took effect waited for
// the heartbeat). A waiter that made an attempt after the confirmation
// (Settle), or registered on a confirmed channel, is not told.
func TestReadyIsReportedOnceHoweverSoonItCame(t *testing.T) {
	redistest.NoLeaks(t)
	_, _, client := redistest.Mini(t)
	ctx := context.Background()
	channel := "fairlock:test:{" + redistest.Name(t) + "}"
	s, err := core.HubsOf(core.OwnerOf(redistest.Owner(client))).Subscribe(ctx, channel, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	select {
	case <-s.Ready(): // confirmed before the waiter sleeps
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription was never confirmed")
	}
	w := core.HubsOf(core.OwnerOf(redistest.Owner(client))).NewSleeper()
	defer w.Close()
	bounded, cancelBounded := context.WithTimeout(ctx, 5*time.Second)
	defer cancelBounded()
	if wk := w.Next(bounded, s); wk.Reason != transport.Ready {
		t.Fatalf("Next after the confirmation came: %v, want Ready", wk.Reason)
	}
	quick, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if wk := w.Next(quick, s); wk.Reason != transport.Cancelled {
		t.Fatalf("Next once Ready was told: %v, want to sleep until ctx ends", wk.Reason)
	}

	settled, err := core.HubsOf(core.OwnerOf(redistest.Owner(client))).Subscribe(ctx, channel, "b") // confirmed already
	if err != nil {
		t.Fatal(err)
	}
	defer settled.Close()
	settled.Settle() // an attempt now sees all that was published before
	live := core.HubsOf(core.OwnerOf(redistest.Owner(client))).SubscribeIfLive(channel, "c")
	if live == nil {
		t.Fatal("SubscribeIfLive on a confirmed channel: nil")
	}
	defer live.Close()
	for name, sub := range map[string]*transport.Sub{"settled": settled, "registered live": live} {
		quick, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		if wk := w.Next(quick, sub); wk.Reason != transport.Cancelled {
			t.Errorf("%s: Next = %v, want no Ready wake", name, wk.Reason)
		}
		cancel()
	}
}

// Flush returns once what was published on the channel before it has been
// read: a targeted message published just before is waiting in C. On
// miniredis, a real server and a cluster (sharded pub/sub).
func TestFlushDeliversWhatWasPublishedBefore(t *testing.T) {
	redistest.NoLeaks(t)
	_, _, mini := redistest.Mini(t)
	for kind, client := range map[string]redis.UniversalClient{"miniredis": mini, "real": redistest.Real(t), "cluster": redistest.Cluster(t)} {
		ctx := context.Background()
		channel := "fairlock:test:{" + redistest.Name(t) + "}"
		publish := client.Publish
		if _, ok := client.(*redis.ClusterClient); ok {
			publish = client.SPublish
		}
		s, err := core.HubsOf(core.OwnerOf(redistest.Owner(client))).Subscribe(ctx, channel, "a")
		if err != nil {
			t.Fatal(err)
		}
		<-s.Ready()
		for i := range 20 {
			if err := publish(ctx, channel, "a note-"+strconv.Itoa(i)).Err(); err != nil {
				t.Fatal(err)
			}
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if p, ok := s.Take(); !ok || p != "a note-"+strconv.Itoa(i) {
				t.Fatalf("%s: after Flush, C holds %q, %v; want the note published before", kind, p, ok)
			}
		}
		if p, ok := s.Take(); ok {
			t.Fatalf("%s: a marker reached the waiter: %q", kind, p)
		}
		s.Close()
	}
}
