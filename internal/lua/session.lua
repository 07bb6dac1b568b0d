-- session.lua: is the caller's session on the server its commands reach?
-- An owner that keeps a presence asks every SessionPing while it holds
-- anything (core's presence check). After a failover its commands go to the
-- new master as soon as its client learns of it, while its session (a
-- pub/sub connection) stays where it was: waiters there would count it gone.
-- Answered 0, the owner subscribes again, on the master.
-- KEYS[1] a key that never exists: the caller's presence channel's name on
-- a single server; on Cluster, a key in a slot of the master asked about
-- (a Cluster client sends the call where that slot is served).
-- ARGV[1] (optional) the caller's presence channel, if not KEYS[1].
-- Returns the subscribers of that channel here (on Cluster, a node counts
-- only its own).
-- A replica refuses the call (READONLY): a function that may write does not
-- run there, and the DEL (a write that deletes nothing, and so is neither
-- replicated nor logged) refuses it as a script too. The owner's commands
-- then reach a server that no longer serves the locks: it subscribes again.
redis.call('DEL', KEYS[1])
return redis.call('PUBSUB', 'NUMSUB', ARGV[1] or KEYS[1])[2]
