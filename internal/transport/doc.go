// Package transport is how a call reaches Redis: a script (internal/lua
// builds them) runs as a function (FCALL, loading the library where it is
// missing) or, where the server has no Functions (miniredis, Redis 6, an
// ACL that forbids them), with EVALSHA; an acquisition that must be
// replicated is followed by WAIT in one pipeline on the same connection;
// and a call keeps its caller's deadline where go-redis would not.
//
// A go-redis client made with its default options (ContextTimeoutEnabled
// false) does not end a call when the call's ctx ends: it waits for its
// ReadTimeout (3 s) and retries, so a call on a server that hangs takes
// seconds whatever its deadline. A script call on such a *redis.Client
// whose ctx has a deadline sooner than go-redis's own bound of a call
// (selfBound) runs in its caller's goroutine on a view of the client: a
// clone sharing its pool whose timeouts end the call at the deadline, or
// at most 1/32 of the time it had later (views.go); a call Redis has not
// answered by then returns the caller's ctx error (Abandoned). Clients
// without views (Cluster, Ring, wrappers) run such a call on a goroutine
// of its own, which returns at the deadline while the call goes on in the
// background until go-redis gives up. A clean-up that must be made whole
// (Finishing) and that Redis has not answered by its caller's deadline is
// made again in the background. A client that bounds its calls by their
// ctx itself (ContextTimeoutEnabled) needs neither, nor does a call whose
// deadline is farther than go-redis's own bound, or that has none
// (go-redis ends it first anyway; a cancellation without a deadline is
// seen between calls).
package transport
