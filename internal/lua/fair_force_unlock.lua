-- fair_force_unlock.lua: end whoever's hold, keep the queue, and hand the lock
-- to the live head. KEYS[1..3]: hold, queue, deadlines.
-- ARGV[1] publish command, ARGV[2] channel. Returns 1 if the lock was held.
local Q = queue_keys(KEYS[1], KEYS[2], KEYS[3])
watch_leader(ARGV[1], ARGV[2])
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now, now_us = clock()
local was = 0
if holder(s, now) ~= nil then was = 1 end
local w = {}
if not hand_off(s, w, Q, now, now_us, ARGV[1], ARGV[2]) then clear_hold(s) end
save_changes(s, w)
return was
