// Package wire is fairlock's protocol with its Redis scripts, on the Go
// side: every key name, id, note and record the library and the scripts
// exchange is built and read here, every script's arguments are named here
// in ARGV order, and every script's reply has a named decoder. Its mirror
// on the Lua side is internal/lua/wire.lua: a change to one is a change to
// both (and, when data stored in Redis changes, to the data layout's
// version, LAYOUT in internal/lua/hold.lua).
//
// The encodings, and where each is built and read:
//
//	client id    "<random 22 chars>"                 Go (NewIDs): one per fairlock.Owner
//	hold id     "<client>.<n>"                      Go (IDs.Owner); Lua reads its client (note_client)
//	entry id     "<owner>/<n>"                       Go (IDs.Entry); Lua entry_owner, Go OwnerOfEntry
//	request id   "<owner>#<n>"                       Go (IDs.Request); Lua compares it whole
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
//	modes, flags and undo markers                     the constants below
package wire
