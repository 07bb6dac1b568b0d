package core

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/internal/clock"
	"github.com/redis/go-redis/v9"
)

// A grant to a call that waited is vouched for only by a PING answered
// lately (adopt): an owner that held nothing has sent none, so vouch sends
// one and takes its answer; one answered within SessionPing vouches at
// once; a presence that is down, or came up after the grant's send, does
// not vouch (the grant is confirmed instead).
func TestVouchWantsARecentPing(t *testing.T) {
	mr := miniredis.RunT(t)
	clk := clock.NewFake(time.Unix(1_700_000_000, 0), nil)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	o, err := NewOwnerWith(client, Rig{Clock: clk, Presence: true, RestartCheck: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer func() { _ = o.Close(ctx) }()
	const key = "{v}:k"
	p := o.presence
	if err := p.await(ctx, key); err != nil {
		t.Fatalf("the presence did not come up: %v", err)
	}
	l := p.serving(key)
	since := clk.Now()
	clk.Advance(time.Second) // the owner holds nothing: no PING for a second
	l.mu.Lock()
	before := l.alive
	l.mu.Unlock()
	if !p.vouch(ctx, ctx, key, since) {
		t.Fatal("vouch = false for a presence that is up; want its PING answered")
	}
	l.mu.Lock()
	alive := l.alive
	l.mu.Unlock()
	if !alive.After(before) || alive.Before(clk.Now()) {
		t.Fatalf("after vouch, alive = %v (was %v), want the send time of a PING sent now (%v)", alive, before, clk.Now())
	}
	clk.Advance(SessionPing / 2)
	if !p.vouch(ctx, ctx, key, since) {
		t.Fatal("vouch = false with a PING answered within SessionPing")
	}
	l.mu.Lock()
	again := l.alive
	l.mu.Unlock()
	if !again.Equal(alive) {
		t.Fatalf("vouch sent a PING with one answered %v ago (alive %v, was %v)", SessionPing/2, again, alive)
	}
	if p.vouch(ctx, ctx, key, since.Add(-time.Second)) {
		t.Fatal("vouch = true for a grant sent before the presence came up")
	}
	l.broke(context.Canceled) // as a read that failed
	if p.vouch(ctx, ctx, key, clk.Now()) {
		t.Fatal("vouch = true with the presence down")
	}
}
