package core

import (
	"context"
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/clock"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/redis/go-redis/v9"
)

// A hold that ends as lost is recorded as the handle's stale hold before
// its Lost channel closes and its context ends: a caller that reacts by
// acquiring again must send the stale token with that request, or the
// script would take the call for a re-entry of the hold Redis still has (a
// client stops believing in a lease a margin before Redis expires it).
// The fault suite's history check once caught the order reversed.
func TestLostClosesOnlyOnceTheStaleTokenIsRecorded(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	cfg := NewConfig()
	cfg.Clock = clock.NewFake(time.Unix(1_700_000_000, 0), nil)
	o, err := NewOwnerWith(client, Rig{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMutex(o, "stale", cfg, func(string, *lua.Scripts) Place { return Place{Keys: []string{"k"}} })
	if err != nil {
		t.Fatal(err)
	}
	for token := int64(1); token <= 200; token++ {
		h, _ := newHold(m, m.first, Grant{Token: token, Since: cfg.Clock.Now()}, time.Minute, true)
		seen := make(chan int64, 2)
		go func() { <-h.Lost(); seen <- m.first.stale.Load() }()
		stop := context.AfterFunc(h.Context(), func() { seen <- m.first.stale.Load() })
		h.end(ErrLockLost, "test")
		for range 2 {
			if got := <-seen; got != token {
				t.Fatalf("hold %d: its Lost or context said so while the stale token was %d", token, got)
			}
		}
		stop()
	}
}
