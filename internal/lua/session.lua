-- session.lua: is the caller's session on the server its commands reach?
-- An owner that keeps a presence asks every SessionPing while it holds
-- anything (core's presence check). After a failover its commands go to the
-- new master as soon as its client learns of it, while its session (a
-- pub/sub connection) stays where it was: waiters there would count it gone.
-- Answered 0, the owner subscribes again, on the master.
-- KEYS[1] the caller's presence channel's name, as a key that never exists.
-- Returns the subscribers of that channel here.
-- A replica refuses the call (READONLY): a function that may write does not
-- run there, and the DEL (a write that deletes nothing, and so is neither
-- replicated nor logged) refuses it as a script too. The owner's commands
-- then reach a server that no longer serves the locks: it subscribes again.
redis.call('DEL', KEYS[1])
return redis.call('PUBSUB', 'NUMSUB', KEYS[1])[2]
