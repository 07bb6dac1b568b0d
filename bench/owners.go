package main

import (
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
