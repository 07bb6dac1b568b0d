package lua_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// A fair lock held by a client that keeps a presence (its id ends in
// transport.PresenceMark) is ended by a waiter's attempt once the client's
// presence channel has had no subscriber for the grace (200 ms), counted
// from the first attempt that found it gone; while it has one, the head is
// told to look again within the poll (50 ms); a holder that keeps no
// presence is never ended so, and its head waits for the expiry.
func TestPresenceEndsTheHoldOfAGoneHolderAfterTheGrace(t *testing.T) {
	const (
		grace = 200 * time.Millisecond
		poll  = 50 * time.Millisecond
		lease = 30000
	)
	mr := miniredis.RunT(t)
	_ = mr.Set("fairlock:boot", "0") // a server long in use: no settling pause
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	mr.SetTime(now)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	ctx, s := context.Background(), lua.Default()
	n := 0
	acquire := func(lock, owner, entry, mode string) transport.FairAcquireReply {
		t.Helper()
		n++
		base := transport.FairBase(lock)
		v, err := s.FairAcquire.Run(ctx, c, modeOf(c), transport.QueueKeys(base), transport.FairAcquire{
			Owner: owner, Entry: entry, Request: owner + "#" + string(rune('a'+n)), Lease: lease, Wait: 10000,
			Mode: mode, Origin: transport.EscapeJSON(transport.EncodeOrigin("host", 1, "")), Publish: "PUBLISH", Channel: transport.Channel(base),
		}.Args()...).Result()
		if err != nil {
			t.Fatal(err)
		}
		r, err := transport.DecodeFairAcquire(v)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	advance := func(d time.Duration) {
		now = now.Add(d)
		mr.SetTime(now)
	}
	// leave closes sub and waits until the server has dropped it.
	leave := func(sub *redis.PubSub, channel string) {
		t.Helper()
		_ = sub.Close()
		for i := 0; ; i++ {
			n, err := c.PubSubNumSub(ctx, channel).Result()
			if err != nil {
				t.Fatal(err)
			}
			if n[channel] == 0 {
				return
			}
			if i == 1000 {
				t.Fatal("the subscription outlived its connection")
			}
			time.Sleep(time.Millisecond)
		}
	}
	const waiter = "WaiterWaiterWaiterWaitA.1"
	present := "PresentPresentPresentPr" + transport.PresenceMark // a client id that keeps a presence
	plain := "PlainPlainPlainPlainPla"

	t.Run("gone", func(t *testing.T) {
		held := acquire("gone", present+".1", present+".1/1", transport.ModeJoin)
		if !held.Held {
			t.Fatalf("holder: %+v, want held", held)
		}
		r := acquire("gone", waiter, waiter+"/1", transport.ModeJoin)
		if r.Held || !r.Head || r.HoldMs != grace.Milliseconds() {
			t.Fatalf("first look at a gone presence: %+v; want queued as head, told to look again at the grace's end (%v)", r, grace)
		}
		advance(grace - time.Millisecond)
		if r := acquire("gone", waiter, waiter+"/1", transport.ModeQueued); r.Held || r.HoldMs != 1 {
			t.Fatalf("1 ms before the grace ends: %+v; want still waiting, 1 ms left", r)
		}
		advance(time.Millisecond)
		r = acquire("gone", waiter, waiter+"/1", transport.ModeQueued)
		if !r.Held || r.Token <= held.Token {
			t.Fatalf("at the grace's end: %+v; want the lock, with a token above the gone holder's %d", r, held.Token)
		}
	})

	t.Run("present", func(t *testing.T) {
		sub := c.Subscribe(ctx, transport.PresenceChannel(present))
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		if held := acquire("present", present+".1", present+".1/1", transport.ModeJoin); !held.Held {
			t.Fatalf("holder: %+v, want held", held)
		}
		r := acquire("present", waiter, waiter+"/1", transport.ModeJoin)
		if r.Held || !r.Head || r.HoldMs != poll.Milliseconds() {
			t.Fatalf("a present holder: %+v; want queued as head, told to look again within the poll (%v)", r, poll)
		}
		advance(2 * grace)
		if r := acquire("present", waiter, waiter+"/1", transport.ModeQueued); r.Held {
			t.Fatalf("a present holder lost its lock: %+v", r)
		}
		// Gone, back within the grace, gone again: absence counts anew.
		leave(sub, transport.PresenceChannel(present))
		if r := acquire("present", waiter, waiter+"/1", transport.ModeQueued); r.Held || r.HoldMs != grace.Milliseconds() {
			t.Fatalf("presence gone: %+v; want the grace to start", r)
		}
		advance(grace / 2)
		sub = c.Subscribe(ctx, transport.PresenceChannel(present))
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		if r := acquire("present", waiter, waiter+"/1", transport.ModeQueued); r.Held || r.HoldMs != poll.Milliseconds() {
			t.Fatalf("presence back: %+v; want waiting, looking within the poll", r)
		}
		leave(sub, transport.PresenceChannel(present))
		advance(grace / 2)
		if r := acquire("present", waiter, waiter+"/1", transport.ModeQueued); r.Held || r.HoldMs != grace.Milliseconds() {
			t.Fatalf("absence counted from before the presence came back: %+v", r)
		}
		advance(grace)
		if r := acquire("present", waiter, waiter+"/1", transport.ModeQueued); !r.Held {
			t.Fatalf("gone for the grace: %+v; want the lock", r)
		}
	})

	t.Run("no presence kept", func(t *testing.T) {
		if held := acquire("plain", plain+".1", plain+".1/1", transport.ModeJoin); !held.Held {
			t.Fatalf("holder: %+v, want held", held)
		}
		r := acquire("plain", waiter, waiter+"/1", transport.ModeJoin)
		if r.Held || r.HoldMs != lease {
			t.Fatalf("a holder without presence: %+v; want the head to wait for its expiry (%d ms)", r, lease)
		}
		advance(10 * grace)
		if r := acquire("plain", waiter, waiter+"/1", transport.ModeQueued); r.Held {
			t.Fatalf("a holder without presence lost its lock: %+v", r)
		}
	})
}
