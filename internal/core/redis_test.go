package core_test

import (
	"testing"

	"github.com/fairlock/fairlock/internal/core"
	"github.com/fairlock/fairlock/internal/lua"
	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// wrapped is a user's own UniversalClient: a go-redis client inside.
type wrapped struct{ *redis.Client }

// Each owner has a client id of its own, which its handles' hold ids
// begin with (so its inbox of a lock is its own): two owners on one client
// are independent, and a wrapped client gets an owner like any other.
func TestEachOwnerHasItsOwnInbox(t *testing.T) {
	a := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _, _ = a.Close(), c.Close() })
	clients := map[string]bool{}
	for _, client := range []redis.UniversalClient{a, a, c, wrapped{a}} {
		o, err := core.NewOwnerWith(client, core.Rig{})
		if err != nil {
			t.Fatal(err)
		}
		m1, err := core.NewMutex(o, "x", core.NewConfig(), place)
		if err != nil {
			t.Fatal(err)
		}
		m2, _ := core.NewMutex(o, "y", core.NewConfig(), place)
		id := transport.ClientOf(m1.ID())
		if transport.ClientOf(m2.ID()) != id || m1.ID() == m2.ID() {
			t.Fatalf("handles of one owner: hold ids %q and %q, want one client id and two owners", m1.ID(), m2.ID())
		}
		if clients[id] {
			t.Fatalf("client id %q shared by two owners", id)
		}
		clients[id] = true
	}
}

func place(string, *lua.Scripts) core.Place { return core.Place{Keys: []string{"k"}} }
