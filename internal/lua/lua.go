// Package lua holds fairlock's Redis scripts. Each script is a file of this
// folder, embedded at build time, with lib.lua's helpers put in front of it;
// each is loaded once as a *redis.Script (EVALSHA, with EVAL when the server
// does not have it yet).
//
// Every script takes "now" from Redis's TIME and touches only keys passed in
// KEYS, which share one lock's hash tag: every script is single-slot.
package lua

import (
	"embed"
	"fmt"
	"io/fs"

	"github.com/redis/go-redis/v9"
)

//go:embed *.lua
var files embed.FS

// Scripts is one complete set of fairlock's scripts. Their KEYS and ARGV are
// documented at the top of each file.
type Scripts struct {
	ReentrantAcquire     *redis.Script
	ReentrantRelease     *redis.Script
	ReentrantForceUnlock *redis.Script
	Renew                *redis.Script
	State                *redis.Script
	FairAcquire          *redis.Script
	FairRelease          *redis.Script
	FairLeave            *redis.Script
	FairHeartbeat        *redis.Script
	FairForceUnlock      *redis.Script
	FairInspect          *redis.Script
}

// Default is the set the library runs.
var Default = MustBuild(Sources())

// Sources returns the text of every script file by name (lib.lua included).
func Sources() map[string]string {
	out := map[string]string{}
	names, _ := fs.Glob(files, "*.lua")
	for _, n := range names {
		b, _ := files.ReadFile(n)
		out[n] = string(b)
	}
	return out
}

// MustBuild builds a set from file texts as Sources returns them; tests use
// it to run deliberately broken variants. It panics on a missing file.
func MustBuild(src map[string]string) *Scripts {
	lib := src["lib.lua"]
	get := func(name string) *redis.Script {
		body, ok := src[name]
		if !ok {
			panic(fmt.Sprintf("lua: no script %s", name))
		}
		return redis.NewScript(lib + body)
	}
	return &Scripts{
		ReentrantAcquire:     get("reentrant_acquire.lua"),
		ReentrantRelease:     get("reentrant_release.lua"),
		ReentrantForceUnlock: get("reentrant_force_unlock.lua"),
		Renew:                get("renew.lua"),
		State:                get("state.lua"),
		FairAcquire:          get("fair_acquire.lua"),
		FairRelease:          get("fair_release.lua"),
		FairLeave:            get("fair_leave.lua"),
		FairHeartbeat:        get("fair_heartbeat.lua"),
		FairForceUnlock:      get("fair_force_unlock.lua"),
		FairInspect:          get("fair_inspect.lua"),
	}
}
