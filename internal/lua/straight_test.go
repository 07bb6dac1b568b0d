package lua_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/wire"
	"github.com/redis/go-redis/v9"
)

// The straight paths of fair_acquire.lua and fair_release.lua (a free lock
// no waiter can be live for) must leave the hold as the queue's steps
// would. Two locks start alike but for their waiters' horizon h: long
// passed on one (the straight paths run), a millisecond ahead on the other
// with an empty queue (the queue's steps run and find nobody). Each gets
// the same acquisition and release at the same Redis time; the replies,
// the holds but h, and the keys' TTLs must agree.
func TestStraightPathsWriteWhatTheQueuesStepsWrite(t *testing.T) {
	mr := miniredis.RunT(t)
	_ = mr.Set("fairlock:boot", "0") // a server long in use: no settling pause
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	mr.SetTime(now)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	ctx, s, ms := context.Background(), lua.Default(), now.UnixMilli()
	locks := map[string]int64{"straight": ms - 1000, "queue": ms + 1}
	for name, h := range locks {
		// k at now: the acquisition must push every key's TTL out.
		if err := mr.Set(wire.FairBase(name), fmt.Sprintf(`{"v":"7","f":"5","h":"%d","k":"%d","r":""}`, h, ms)); err != nil {
			t.Fatal(err)
		}
	}
	const owner = "QhOrGB6RQrKo9uyIgFu7VQ.1"
	type after struct {
		reply any
		hold  map[string]string
		ttl   time.Duration
	}
	look := func(name string, reply any) after {
		t.Helper()
		raw, err := mr.Get(wire.FairBase(name))
		if err != nil {
			t.Fatal(err)
		}
		var hold map[string]string
		if err := json.Unmarshal([]byte(raw), &hold); err != nil {
			t.Fatal(err)
		}
		delete(hold, "h")
		return after{reply, hold, mr.TTL(wire.FairBase(name))}
	}
	steps := []struct {
		name string
		run  func(lock string) (any, error)
	}{
		{"acquisition", func(lock string) (any, error) {
			base := wire.FairBase(lock)
			return s.FairAcquire.Run(ctx, c, modeOf(c), wire.QueueKeys(base), wire.FairAcquire{
				Owner: owner, Entry: owner + "/1", Request: owner + "#1", Lease: 30000, Wait: 10000,
				Mode: wire.ModeJoin, Origin: wire.EncodeOrigin("host", 1234, "job"), Publish: "PUBLISH", Channel: wire.Channel(base),
			}.Args()...).Result()
		}},
		{"release", func(lock string) (any, error) {
			base := wire.FairBase(lock)
			return s.FairRelease.Run(ctx, c, modeOf(c), wire.QueueKeys(base), wire.Release{
				Owner: owner, Request: owner + "#2", Token: now.UnixMicro(), Publish: "PUBLISH", Channel: wire.Channel(base),
			}.Args()...).Result()
		}},
	}
	for _, step := range steps {
		got := map[string]after{}
		for _, lock := range slices.Sorted(maps.Keys(locks)) {
			reply, err := step.run(lock)
			if err != nil {
				t.Fatalf("%s of %s: %v", step.name, lock, err)
			}
			got[lock] = look(lock, reply)
		}
		a, b := got["straight"], got["queue"]
		if fmt.Sprint(a.reply) != fmt.Sprint(b.reply) || !maps.Equal(a.hold, b.hold) || a.ttl != b.ttl {
			t.Fatalf("%s: the straight path left %+v, the queue's steps %+v", step.name, a, b)
		}
	}
	if got := look("straight", nil).hold; got["o"] != "" || got["q"] != owner+"#2" || got["r"] == "" {
		t.Fatalf("after the release the hold is %v; want it free, with the release's id and memory", got)
	}
}
