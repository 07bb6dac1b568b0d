package main

import (
	"context"
	"sync"

	"github.com/fairlock/fairlock"
	"github.com/redis/go-redis/v9"
)

// owners holds one fairlock.Owner per client, as a process keeps one per
// client: each client in the benchmark stands for a machine.
var owners = struct {
	sync.Mutex
	m map[redis.UniversalClient]*fairlock.Owner
}{m: map[redis.UniversalClient]*fairlock.Owner{}}

// ownerOf returns c's owner, made at its first use.
func ownerOf(c redis.UniversalClient) *fairlock.Owner {
	owners.Lock()
	defer owners.Unlock()
	o := owners.m[c]
	if o == nil {
		var err error
		if o, err = fairlock.NewOwner(c); err != nil {
			panic(err)
		}
		owners.m[c] = o
	}
	return o
}

// closeOwner closes c's owner, if it has one (its pub/sub connections with
// it), and forgets it: a scenario that made c is done with it.
func closeOwner(ctx context.Context, c redis.UniversalClient) {
	owners.Lock()
	o := owners.m[c]
	delete(owners.m, c)
	owners.Unlock()
	if o != nil {
		_ = o.Close(ctx)
	}
}
