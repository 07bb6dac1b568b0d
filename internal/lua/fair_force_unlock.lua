-- fair_force_unlock.lua: end whoever's hold, keep the queue, and hand the lock
-- to the live head. KEYS[1..4]: hold, queue, deadlines, waiters.
-- ARGV[1] publish command, ARGV[2] channel. Returns 1 if the lock was held.
local bad = layout_error()
if bad then return bad end
local now, now_us = clock()
local was = 0
if hold(now) ~= nil then was = 1 end
clear_hold()
hand_off(now, now_us, ARGV[1], ARGV[2])
retain(now)
return was
