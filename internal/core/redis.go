package core

import (
	"context"
	"runtime"
	"sync"
	"weak"

	"github.com/fairlock/fairlock/internal/wire"
	"github.com/redis/go-redis/v9"
)

// clientIDs names each go-redis client in the owner ids of the handles on
// it (wire.NewClient), without keeping clients alive: the notes for its
// waiters go to its inbox of a lock (wire.Inbox), which its hub subscribes
// to, so a hand-off reaches the one connection whose waiter it names.
var clientIDs sync.Map // weak.Pointer of the client -> string

// processClient is the client id of clients that clientIDs does not key
// (types other than go-redis's *Client and *ClusterClient, such as a
// wrapper of one): they share one inbox per lock, where each of their hubs
// reads the notes for all of them and wakes only its own waiters.
var processClient = wire.NewClient()

// ClientID returns client's client id: one per go-redis client, for as
// long as it lives.
func ClientID(client redis.UniversalClient) string {
	switch c := client.(type) {
	case *redis.Client:
		return clientIDOf(c)
	case *redis.ClusterClient:
		return clientIDOf(c)
	}
	return processClient
}

func clientIDOf[T any](c *T) string {
	key := weak.Make(c)
	if id, ok := clientIDs.Load(key); ok {
		return id.(string)
	}
	id, loaded := clientIDs.LoadOrStore(key, wire.NewClient())
	if !loaded {
		// Forget it with the client.
		runtime.AddCleanup(c, func(k weak.Pointer[T]) { clientIDs.Delete(k) }, key)
	}
	return id.(string)
}

// PublishCommand is how scripts publish for client: sharded pub/sub on
// Cluster, where a plain PUBLISH would be broadcast to every node.
func PublishCommand(client redis.UniversalClient) string {
	if _, ok := client.(*redis.ClusterClient); ok {
		return "SPUBLISH"
	}
	return "PUBLISH"
}

// release undoes one level of slot s's hold with token: wire.Released,
// wire.StillHeld or wire.NotHeld.
func (m *Mutex) release(ctx context.Context, s *slot, token int64) (int, error) {
	h := s.h
	v, err := h.Call(h.Release).Run(ctx, h.Client, h.releaseArgs(token, "").Args()...).Result()
	if err != nil {
		return 0, err
	}
	return wire.DecodeRelease(v)
}

// forceUnlock ends whoever's hold; true if the lock was held.
func (m *Mutex) forceUnlock(ctx context.Context) (bool, error) {
	h := m.h
	n, err := h.ForceUnlock.Run(ctx, h.Client, h.Keys, wire.Publishing(h.Publish, h.Channel)...).Int()
	return n == 1, err
}

// state reads the hold as Redis sees it: owner "" when free.
func (m *Mutex) state(ctx context.Context) (wire.HoldState, error) {
	if err := CheckContext(ctx); err != nil {
		return wire.HoldState{}, err
	}
	v, err := m.h.Config.Scripts.State.Run(ctx, m.h.Client, m.h.Keys[:1]).Result()
	if err != nil {
		return wire.HoldState{}, Step("reading the lock's state", err)
	}
	return wire.DecodeState(v)
}
