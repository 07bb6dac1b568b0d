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

// Renew runs renew.lua on keys (the first is the hold hash).
func Renew(ctx context.Context, m *Mutex, keys []string, owner string, token int64, lease time.Duration, fromGrant bool) (bool, error) {
	fixed := "0"
	if fromGrant {
		fixed = "1"
	}
	v, err := m.cfg.Scripts.Renew.Run(ctx, m.Client, keys, owner, token, Ms(lease), fixed).Result()
	if err != nil {
		return false, err
	}
	r, err := Ints(v)
	if err != nil {
		return false, err
	}
	return r[0] == 1, nil
}

// State runs state.lua on keys (the first is the hold hash).
func State(ctx context.Context, m *Mutex, keys []string) (HoldState, error) {
	v, err := m.cfg.Scripts.State.Run(ctx, m.Client, keys[:1]).Result()
	if err != nil {
		return HoldState{}, err
	}
	return ReadState(v)
}
