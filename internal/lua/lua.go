// Package lua holds fairlock's Redis scripts. Each script is a file of this
// folder, embedded at build time, with the helper files (hold.lua,
// wire.lua, fence.lua, retry.lua, queue.lua, permits.lua, in that order)
// put in front of it.
//
// The scripts make one function library, which internal/transport loads
// and calls (FCALL), with the helpers once: they then run once per load,
// not at every call. Where the server has no Functions, each script runs
// with EVALSHA, its text carrying only the helpers it calls (trim.go).
//
// Every script takes "now" from Redis's TIME and touches only keys passed in
// KEYS, which share one lock's hash tag: every script is single-slot.
package lua

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"

	"github.com/fairlock/fairlock/internal/transport"
)

//go:embed *.lua
var files embed.FS

// Scripts is one complete set of fairlock's scripts. Their KEYS and ARGV are
// documented at the top of each file.
type Scripts struct {
	lib *transport.Library // the function library of them all

	ReentrantAcquire     *transport.Script
	ReentrantRelease     *transport.Script
	ReentrantForceUnlock *transport.Script
	ReentrantLeave       *transport.Script
	ReentrantWatch       *transport.Script
	Renew                *transport.Script
	State                *transport.Script
	FairAcquire          *transport.Script
	FairRelease          *transport.Script
	FairLeave            *transport.Script
	FairHeartbeat        *transport.Script
	FairForceUnlock      *transport.Script
	FairInspect          *transport.Script
	SemAcquire           *transport.Script
	SemRelease           *transport.Script
	SemRenew             *transport.Script
	SemSet               *transport.Script
	SemState             *transport.Script
	SemResize            *transport.Script
	SemWatch             *transport.Script
	ElectionProclaim     *transport.Script
	ElectionLeader       *transport.Script
	ElectionInspect      *transport.Script
	Session              *transport.Script
}

var defaultScripts = MustBuild(Sources())

// Default returns the set the library runs.
func Default() *Scripts { return defaultScripts }

// helperFiles are the files of helpers, split by concern, in the order
// they are put in front of every script: each may use those before it
// (hold.lua says what each holds).
var helperFiles = []string{"hold.lua", "wire.lua", "fence.lua", "retry.lua", "queue.lua", "permits.lua"}

// Sources returns the text of every script file by name (the library's
// included).
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
	var helpers strings.Builder
	for _, name := range helperFiles {
		text, ok := src[name]
		if !ok {
			panic(fmt.Sprintf("lua: no library file %s", name))
		}
		helpers.WriteString(text)
		helpers.WriteString("\n")
	}
	decls := helperDecls(src)
	lib := helpers.String()
	names := make([]string, 0, len(src))
	for name := range src {
		if !slices.Contains(helperFiles, name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)

	// The function library: the helpers once, then each script as the body
	// of a function. The helpers read KEYS and ARGV, which a function
	// receives as arguments, so they are upvalues that each call sets first,
	// together with the per-call state, missing, changed, announce and
	// call_now (declared in hold.lua) and caller and caller_here
	// (queue.lua), reset here by name: rename them in both places. Its name
	// carries a hash of its text, so that libraries of different fairlock
	// versions (function names are global to a server) live side by side.
	sum := sha1.Sum([]byte(strings.Join(append([]string{lib}, bodies(src, names)...), "\x00")))
	prefix := "fairlock_" + hex.EncodeToString(sum[:6])
	var code strings.Builder
	fmt.Fprintf(&code, "#!lua name=%s\nlocal KEYS, ARGV\n%s\n", prefix, lib)
	l := &transport.Library{Name: prefix}
	scripts := map[string]*transport.Script{}
	for _, name := range names {
		fn := prefix + "_" + strings.TrimSuffix(name, ".lua")
		fmt.Fprintf(&code, "redis.register_function(%q, function(keys, args)\nKEYS, ARGV, missing, changed, announce, caller, caller_here, call_now = keys, args, false, false, nil, nil, nil, nil\n%s\nend)\n", fn, src[name])
		scripts[name] = transport.NewScript(l, fn, evalText(decls, src[name]))
	}
	l.Code = code.String()
	get := func(name string) *transport.Script {
		s, ok := scripts[name]
		if !ok {
			panic(fmt.Sprintf("lua: no script %s", name))
		}
		return s
	}
	return &Scripts{
		lib:                  l,
		ReentrantAcquire:     get("reentrant_acquire.lua"),
		ReentrantRelease:     get("reentrant_release.lua"),
		ReentrantForceUnlock: get("reentrant_force_unlock.lua"),
		ReentrantLeave:       get("reentrant_leave.lua"),
		ReentrantWatch:       get("reentrant_watch.lua"),
		Renew:                get("renew.lua"),
		State:                get("state.lua"),
		FairAcquire:          get("fair_acquire.lua"),
		FairRelease:          get("fair_release.lua"),
		FairLeave:            get("fair_leave.lua"),
		FairHeartbeat:        get("fair_heartbeat.lua"),
		FairForceUnlock:      get("fair_force_unlock.lua"),
		FairInspect:          get("fair_inspect.lua"),
		SemAcquire:           get("sem_acquire.lua"),
		SemRelease:           get("sem_release.lua"),
		SemRenew:             get("sem_renew.lua"),
		SemSet:               get("sem_set.lua"),
		SemState:             get("sem_state.lua"),
		SemResize:            get("sem_resize.lua"),
		SemWatch:             get("sem_watch.lua"),
		ElectionProclaim:     get("election_proclaim.lua"),
		ElectionLeader:       get("election_leader.lua"),
		ElectionInspect:      get("election_inspect.lua"),
		Session:              get("session.lua"),
	}
}

func bodies(src map[string]string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n + "\x00" + src[n]
	}
	return out
}
