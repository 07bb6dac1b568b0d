-- fair_leave.lua: a waiter gives up (its context ended, its wait elapsed, or
-- an error). Its deadline goes at once, so it is no longer queued; its list
-- element stays as a tombstone for cleanup: O(log N), no list scan (a head's
-- tombstone is popped at once, and the next head told). If the lock had
-- already been handed to it, the grant is passed on to the next.
-- KEYS[1..3]: hold, queue, deadlines.
-- ARGV[1] owner id, ARGV[2] entry id, ARGV[3] publish command, ARGV[4] channel.
-- Returns 1 if a grant to this entry was given back.
local Q = queue_keys(KEYS[1], KEYS[2], KEYS[3])
local owner, entry = ARGV[1], ARGV[2]
caller = owner -- absences count only where its session is (queue.lua)
watch_leader(ARGV[3], ARGV[4])
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now, now_us = clock()

redis.call('ZREM', Q.deadlines, entry)
local who, _, expiry = holder(s, now)
local returned = 0
if who == owner and s.e == entry then
  who, returned = nil, 1
end
if who == nil then
  -- If leaving made someone else first while the lock is free, they get it.
  local w = {}
  if not hand_off(s, w, Q, now, now_us, ARGV[3], ARGV[4]) and returned == 1 then clear_hold(s) end
  save_changes(s, w)
elseif may_have_waiters(s, {}, now) then
  -- Held: if the leaver was the head, its tombstone goes now and the waiter
  -- behind it is told it is head (it must hear when the hold ends).
  local head, popped, _, _, first, from = present_head(s, Q, now)
  if popped and head then tell_heads(head, first, from, look_at(who, expiry, now, s.pa), ARGV[3], ARGV[4]) end
  -- Absences that the cleanup recorded or forgot (present_head).
  save_changes(s, {})
end
return returned
