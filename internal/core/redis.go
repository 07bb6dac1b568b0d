package core

import (
	"context"
	"fmt"
	"time"

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

// Ms is d in whole milliseconds, at least 1.
func Ms(d time.Duration) int64 {
	if ms := d.Milliseconds(); ms > 0 {
		return ms
	}
	return 1
}

// Ints reads a script's reply of integers.
func Ints(v any) ([]int64, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("fairlock: unexpected script reply %T", v)
	}
	out := make([]int64, len(list))
	for i, e := range list {
		n, ok := e.(int64)
		if !ok {
			return nil, fmt.Errorf("fairlock: unexpected script reply element %T", e)
		}
		out[i] = n
	}
	return out, nil
}

// ReadState parses state.lua's reply.
func ReadState(v any) (HoldState, error) {
	list, ok := v.([]any)
	if !ok {
		return HoldState{}, fmt.Errorf("fairlock: unexpected script reply %T", v)
	}
	if len(list) < 5 {
		return HoldState{}, nil
	}
	owner, _ := list[0].(string)
	count, _ := list[1].(int64)
	ttl, _ := list[2].(int64)
	token, _ := list[3].(int64)
	label, _ := list[4].(string)
	return HoldState{Owner: owner, Count: int(count), TTL: time.Duration(ttl) * time.Millisecond, Token: token, Label: label}, nil
}

// release undoes one level of this handle's hold with token: 1 released,
// 2 still held, 0 not held.
func (m *Mutex) release(ctx context.Context, token int64) (int, error) {
	h := m.h
	v, err := h.Call(h.Release).Run(ctx, h.Client, h.OwnerArg(), h.requestID(), token, h.PublishArg(), h.ChannelArg()).Result()
	if err != nil {
		return 0, err
	}
	r, err := Ints(v)
	if err != nil {
		return 0, err
	}
	return int(r[0]), nil
}

// forceUnlock ends whoever's hold; true if the lock was held.
func (m *Mutex) forceUnlock(ctx context.Context) (bool, error) {
	h := m.h
	n, err := h.ForceUnlock.Run(ctx, h.Client, h.Keys, h.Publish, h.Channel).Int()
	return n == 1, err
}

// state reads the hold as Redis sees it: owner "" when free.
func (m *Mutex) state(ctx context.Context) (HoldState, error) {
	v, err := m.h.Config.Scripts.State.Run(ctx, m.h.Client, m.h.Keys[:1]).Result()
	if err != nil {
		return HoldState{}, fmt.Errorf("fairlock: reading lock %q: %w", m.h.Name, err)
	}
	return ReadState(v)
}
