package core

import (
	"sync"

	"github.com/redis/go-redis/v9"
)

// Shared is what the handles on one go-redis client share: the client's
// pub/sub hubs (hub.go: one per Redis node it subscribes on, that is one, or
// one per Cluster master), and the per-lock services of the primitives
// (the fair queue's heartbeats: one script call per beat for all waiters of
// the client on one lock).
//
// Its lifetime: made when a handle on the client first needs a hub or a
// service, and dropped once it has neither. A hub closes when no channel
// has had a waiter for hubLinger (or at CloseIdleHubs); a service is
// dropped by its last user. Handles do not keep it: they look it up
// (SharedOf) each time they need it, so a dropped Shared is never used
// again, and a closed client's Shared goes once its hubs and services have.
type Shared struct {
	client redis.UniversalClient

	mu       sync.Mutex
	hubs     map[any]*hub // by node: the client itself, or a Cluster master's client
	services map[any]any  // by key: what a primitive keeps per lock (Services)
}

// sharedOf is the registry of Shared values, by client: the one
// process-wide map of what handles share.
var sharedOf = struct {
	sync.Mutex
	m map[redis.UniversalClient]*Shared
}{m: map[redis.UniversalClient]*Shared{}}

// SharedOf returns what the handles on client share, made if there is none.
func SharedOf(client redis.UniversalClient) *Shared {
	sharedOf.Lock()
	defer sharedOf.Unlock()
	s := sharedOf.m[client]
	if s == nil {
		s = &Shared{client: client, hubs: map[any]*hub{}, services: map[any]any{}}
		sharedOf.m[client] = s
	}
	return s
}

// lockShared returns client's Shared with its mu held, made if there is
// none. A Shared dropped between the look-up and the lock is not used: the
// look-up runs again.
func lockShared(client redis.UniversalClient) *Shared {
	for {
		s := SharedOf(client)
		s.mu.Lock()
		sharedOf.Lock()
		live := sharedOf.m[client] == s
		sharedOf.Unlock()
		if live {
			return s
		}
		s.mu.Unlock()
	}
}

// existing returns client's Shared if there is one, without making it.
func existing(client redis.UniversalClient) *Shared {
	sharedOf.Lock()
	defer sharedOf.Unlock()
	return sharedOf.m[client]
}

// allShared returns every Shared there is now.
func allShared() []*Shared {
	sharedOf.Lock()
	defer sharedOf.Unlock()
	out := make([]*Shared, 0, len(sharedOf.m))
	for _, s := range sharedOf.m {
		out = append(out, s)
	}
	return out
}

// dropIfEmptyLocked forgets s once it has no hub and no service left; s.mu
// is held. It is made afresh by the next SharedOf.
func (s *Shared) dropIfEmptyLocked() {
	if len(s.hubs) > 0 || len(s.services) > 0 {
		return
	}
	sharedOf.Lock()
	if sharedOf.m[s.client] == s {
		delete(sharedOf.m, s.client)
	}
	sharedOf.Unlock()
}

// Services runs f on the services of client's Shared, with them locked: a
// primitive finds, adds or removes its per-lock service there (by a key of
// its own type), and the Shared is dropped once none is left and no hub.
// Lock order: s.mu, then the service's own locks.
func Services(client redis.UniversalClient, f func(services map[any]any)) {
	s := lockShared(client)
	defer s.mu.Unlock()
	f(s.services)
	s.dropIfEmptyLocked()
}
