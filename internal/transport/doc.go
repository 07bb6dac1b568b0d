// Package transport is how fairlock talks with Redis: the words its
// scripts exchange with it, the calls that carry them, and the pub/sub
// notes that wake a waiting call. It has the words for locks and holds
// (ids, replies such as NotHeld), none of their rules, and no options.
//
// # Calls
//
// A call reaches Redis so: a script (internal/lua
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
//
// # The words
//
// This is fairlock's protocol with its Redis scripts, on the Go side: every key name, id, note and record the library and the scripts
// exchange is built and read here, every script's arguments are named here
// in ARGV order, and every script's reply has a named decoder. Its mirror
// on the Lua side is internal/lua/wire.lua: a change to one is a change to
// both (and, when data stored in Redis changes, to the data layout's
// version, LAYOUT in internal/lua/hold.lua).
//
// The encodings, and where each is built and read:
//
//	client id    "<random 22 chars>[~]"              Go (NewIDs, NewIDsWithPresence: "~" marks a presence)
//	hold id      "<client>.<n>"                      Go (IDs.HoldID); Lua reads its client (note_client)
//	entry id     "<hold>/<n>"                        Go (IDs.Entry); Lua entry_owner, Go OwnerOfEntry
//	request id   "<hold>#<n>"                        Go (IDs.Request); Lua compares it whole
//	origin       "<host>\t<pid>\t<label>"            Go (EncodeOrigin, ParseOrigin); Lua stores it whole
//	queue element "<entry>|<lease>|<wait>|<request>|<origin>"
//	                                                 Lua (wire.lua element); Go ParseElementInfo (Inspect)
//	permit request "<permit owner> <n> <lease ms>"   Lua (request_text), in a gate's queue element,
//	                                                 from FairAcquire's arguments
//	candidate value "=<escaped value>"               Go (EscapeValue), in an election's queue
//	                                                 element; Lua element_value; Go ElementValue
//	leadership   "leader <version> <term> ..."       Lua (leadership_text) on LeaderChannel and
//	                                                 from election_leader.lua; Go ParseLeadership
//	notes        hand-off, head notice, permits, freed, ';' between notes
//	                                                 Lua (wire.lua); Go ParseNote, NoteTarget
//	inbox        "<channel>:<client>"                Go (Inbox); Lua publish_notes: every note goes
//	                                                 to the inbox of the client its target names
//	permit record "<n>|<expiry>|<token>|<g>|<origin>"  Lua only (wire.lua)
//	released tokens, 16-digit fields                  Lua only (retry.lua)
//	the hold, a flat JSON object whose hot fields     Lua only (hold.lua); Go reads it
//	come first, at fixed offsets                      through the scripts' replies
//	fair_acquire's label, JSON-escaped                Go (EscapeJSON); Lua keeps it in the hold
//	fair_acquire's general words, one argument        Go (FairAcquire.Args); Lua fair_acquire.lua
//	  "<entry> <wait> <mode> <stale> <publish> <channel>"
//	a reentrant waiter's words, one argument          Go (ReentrantAcquire.Args); Lua reentrant_acquire.lua
//	  "<ask> <waiter> <wait>"
//	a release's token, 16 digits, zero-padded         Go (TokenText, Release.Args); Lua release_own
//	                                                 compares it with the hold's f as it comes
//	modes, flags and undo markers                     the constants of wire.go
//
// # Notes
//
// How a waiting call is woken: an owner's pub/sub
// connections (Hubs: one hub per Redis node, each reading the inboxes of
// the locks its waiters wait for, and waking the one waiter a note names),
// a waiter's subscription (Sub), and the Sleeper it sleeps on, which also
// takes its timers and its primitive's news. The primitives tell it which
// channel to listen on, and read what the notes mean themselves
// (ParseNote).
package transport
