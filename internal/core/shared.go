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
// service, and dropped once it has no hub and every service is idle. A hub
// closes when no channel has had a waiter for hubLinger (or at
// CloseIdleHubs); a service is idle when it serves nobody (the heartbeats,
// when no waiter of the client is queued). Handles do not keep it: they
// look it up (sharedFor) each time they need it, so a dropped Shared is never
// used again, and a closed client's Shared goes once its hubs have.
type Shared struct {
	client redis.UniversalClient

	mu       sync.Mutex
	hubs     map[any]*hub    // by node: the client itself, or a Cluster master's client
	services map[any]Service // by key: what a primitive keeps per client (Services)
}

// Service is what a primitive keeps in a client's Shared (the fair queue's
// heartbeats). It stays while the Shared does, so that a busy lock does not
// make it afresh at every turn; the Shared is dropped once it has no hub and
// every service is idle.
type Service interface {
	// Idle reports that the service serves nobody now.
	Idle() bool
}

// sharedOf is the registry of Shared values, by client: the one
// process-wide map of what handles share.
var sharedOf = struct {
	sync.Mutex
	m map[redis.UniversalClient]*Shared
}{m: map[redis.UniversalClient]*Shared{}}

// sharedFor returns what the handles on client share, made if there is none.
func sharedFor(client redis.UniversalClient) *Shared {
	sharedOf.Lock()
	defer sharedOf.Unlock()
	s := sharedOf.m[client]
	if s == nil {
		s = &Shared{client: client, hubs: map[any]*hub{}, services: map[any]Service{}}
		sharedOf.m[client] = s
	}
	return s
}

// lockShared returns client's Shared with its mu held, made if there is
// none. A Shared dropped between the look-up and the lock is not used: the
// look-up runs again.
func lockShared(client redis.UniversalClient) *Shared {
	for {
		s := sharedFor(client)
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

// dropIfEmptyLocked forgets s once it has no hub left and every service is
// idle; s.mu is held. It is made afresh by the next sharedFor.
func (s *Shared) dropIfEmptyLocked() {
	if len(s.hubs) > 0 {
		return
	}
	for _, svc := range s.services {
		if !svc.Idle() {
			return
		}
	}
	sharedOf.Lock()
	if sharedOf.m[s.client] == s {
		delete(sharedOf.m, s.client)
	}
	sharedOf.Unlock()
}

// LockServices returns client's Shared, made if there is none, with its
// services locked: a primitive finds or adds its service in Services (by a
// key of its own type), then calls Unlock, which drops the Shared once it
// has no hub and every service is idle. Lock order: the Shared,
// then the service's own locks.
func LockServices(client redis.UniversalClient) *Shared { return lockShared(client) }

// Services are the primitives' services; LockServices first.
func (s *Shared) Services() map[any]Service { return s.services }

// Unlock ends what LockServices began.
func (s *Shared) Unlock() {
	s.dropIfEmptyLocked()
	s.mu.Unlock()
}
