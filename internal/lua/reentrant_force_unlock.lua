-- reentrant_force_unlock.lua: end whoever's hold, and wake a waiter.
-- KEYS[1] the hold (see hold.lua). ARGV[1] publish command, ARGV[2] channel.
-- Returns 1 if the lock was held.
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now = clock()
if holder(s, now) == nil then return 0 end
clear_hold(s)
save(s, {})
redis.call(ARGV[1], ARGV[2], '')
return 1
