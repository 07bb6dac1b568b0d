-- reentrant_leave.lua: a waiter of a reentrant lock gives up (its context
-- ended, its wait elapsed, or an error). Its deadline goes at once; its list
-- element stays as a tombstone for a release's cleanup. If the last wake-up
-- went to it and the lock is still free, it is passed on to the next waiter.
-- KEYS[1..3]: the hold, the waiters, their deadlines (see hold.lua).
-- ARGV[1] owner id, ARGV[2] waiter id, ARGV[3] publish command, ARGV[4]
-- channel.
-- Returns 1 if a wake-up was passed on.
local waiter = ARGV[2]
caller = ARGV[1] -- absences count only where its session is (queue.lua)
local s = load()
local bad = layout_error(s)
if bad then return bad end
redis.call('ZREM', KEYS[3], waiter)
local now = clock()
if s.n ~= waiter or holder(s, now) ~= nil then return 0 end
local w = {}
s.n = nil
wake_waiter(s, w, now, ARGV[3], ARGV[4])
save(s, w)
if w.n then return 1 end
return 0
