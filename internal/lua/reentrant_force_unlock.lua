-- reentrant_force_unlock.lua: end whoever's hold, and wake a waiter.
-- KEYS[1] the hold hash. ARGV[1] publish command, ARGV[2] channel.
-- Returns 1 if the lock was held.
local bad = layout_error()
if bad then return bad end
local now = clock()
if hold(now) == nil then return 0 end
clear_hold()
redis.call(ARGV[1], ARGV[2], '')
retain(now)
return 1
