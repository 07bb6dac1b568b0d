-- fair_leave.lua: a waiter gives up (its context ended, its wait elapsed, or
-- an error). Its deadline goes at once, so it is no longer queued; its list
-- element stays as a tombstone for cleanup: O(log N), no list scan. If the
-- lock had already been handed to it, the grant is passed on to the next.
-- KEYS[1..4]: hold, queue, deadlines, waiters.
-- ARGV[1] owner id, ARGV[2] entry id, ARGV[3] publish command, ARGV[4] channel.
-- Returns 1 if a grant to this entry was given back.
local owner, entry = ARGV[1], ARGV[2]
local bad = layout_error()
if bad then return bad end
local now, now_us = clock()

redis.call('ZREM', KEYS[3], entry)
redis.call('HDEL', KEYS[4], entry)
local holder, _, _, _, granted_entry = hold(now)
local returned = 0
if holder == owner and granted_entry == entry then
  clear_hold()
  returned = 1
  holder = nil
end
-- If leaving made someone else first while the lock is free, they get it.
if holder == nil then
  hand_off(now, now_us, ARGV[3], ARGV[4])
end
retain(now)
return returned
