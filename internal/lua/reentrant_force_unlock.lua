-- reentrant_force_unlock.lua: end whoever's hold, and wake a waiter.
-- KEYS[1..3]: the hold, the waiters, their deadlines (see hold.lua).
-- ARGV[1] publish command, ARGV[2] channel.
-- Returns 1 if the lock was held.
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now = clock()
if holder(s, now) == nil then return 0 end
clear_hold(s)
local w = {}
wake_waiter(s, w, now, ARGV[1], ARGV[2])
save(s, w)
return 1
