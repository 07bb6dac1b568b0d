package core_test

import (
	"testing"

	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/wire"
	"github.com/redis/go-redis/v9"
)

// wrapped is a user's own UniversalClient: a go-redis client inside.
type wrapped struct{ *redis.Client }

// Each go-redis client has an id of its own, the same at every call: its
// handles' owner ids begin with it, and its hub listens on that inbox. A
// client of another type shares the process's.
func TestClientIDs(t *testing.T) {
	a := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	b := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _, _, _ = a.Close(), b.Close(), c.Close() })
	ids := map[string]bool{}
	for _, client := range []redis.UniversalClient{a, b, c} {
		id := core.ClientID(client)
		if id != core.ClientID(client) {
			t.Fatalf("a client's id changed: %q, then %q", id, core.ClientID(client))
		}
		if ids[id] || wire.ClientOf(id) != id {
			t.Fatalf("client id %q: used twice, or not a client id", id)
		}
		ids[id] = true
	}
	w1, w2 := wrapped{a}, wrapped{b}
	if core.ClientID(w1) != core.ClientID(w2) || ids[core.ClientID(w1)] {
		t.Fatalf("wrapped clients: ids %q and %q, want the process's own, shared", core.ClientID(w1), core.ClientID(w2))
	}
}
