package core

import (
	"context"

	"github.com/fairlock/fairlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// PublishCommand is how scripts publish for client: sharded pub/sub on
// Cluster, where a plain PUBLISH would be broadcast to every node.
func PublishCommand(client redis.UniversalClient) string {
	if _, ok := client.(*redis.ClusterClient); ok {
		return "SPUBLISH"
	}
	return "PUBLISH"
}

// forceUnlock ends whoever's hold; true if the lock was held.
func (m *Mutex) forceUnlock(ctx context.Context) (bool, error) {
	h := m.agent
	n, err := h.ForceUnlock.Run(ctx, h.Client, h.Mode(), h.Keys, transport.Publishing(h.Publish, h.Channel)...).Int()
	return n == 1, err
}

// state reads the hold as Redis sees it: owner "" when free.
func (m *Mutex) state(ctx context.Context) (transport.HoldState, error) {
	if err := CheckContext(ctx); err != nil {
		return transport.HoldState{}, err
	}
	if m.agent.Owner.closed.Load() {
		return transport.HoldState{}, ErrClosed
	}
	v, err := m.agent.Config.Scripts.State.Run(ctx, m.agent.Client, m.agent.Mode(), m.agent.Keys[:1]).Result()
	if err != nil {
		return transport.HoldState{}, Step("reading the lock's state", err)
	}
	return transport.DecodeState(v)
}

// Read runs s, a read-only script of the handle's place (an election's
// leader), on its first key with args, and returns its reply; what names
// the step in an error.
func (m *Mutex) Read(ctx context.Context, what string, s *transport.Script, args ...any) (any, error) {
	if !m.made() {
		return nil, errUnmade
	}
	if err := CheckContext(ctx); err != nil {
		return nil, err
	}
	if m.agent.Owner.closed.Load() {
		return nil, ErrClosed
	}
	v, err := s.Run(ctx, m.agent.Client, m.agent.Mode(), m.agent.Keys[:1], args...).Result()
	if err != nil {
		return nil, Step(what, err)
	}
	return v, nil
}

// Agent is what the handle's first hold id may do: for the calls of a
// primitive that act for no hold (an election's observers).
func (m *Mutex) Agent() Agent { return m.agent }
