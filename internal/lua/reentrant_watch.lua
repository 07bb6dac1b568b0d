-- reentrant_watch.lua: a release woke a waiter whose client keeps a
-- presence, and the releasing owner looks once more a poll later (core's
-- watchHandOff). The woken waiter may have died as the release ran: it
-- looked alive then (Redis had not read its socket's close yet), and no
-- script would run until another waiter's timer. Or it took the lock, and
-- the waiter behind it, which a release never tells, should now poll the
-- new holder's presence.
-- KEYS[1..3]: the hold, the waiters, their deadlines (see hold.lua).
-- ARGV[1] publish command, ARGV[2] channel, ARGV[3] the releasing client's
-- id (absences count only where its session is: queue.lua).
-- Returns 1 if it told a waiter to try, 0 if not.
caller = ARGV[3]
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now = clock()
local who = holder(s, now)
local w = {}
local told = nil
if who == nil then
  -- Still free, the wake-up unclaimed: if the woken waiter's client is
  -- gone, wake again (wake_waiter): it is passed over once gone for the
  -- grace, and until then the first waiter behind it that is there is
  -- woken with it. One whose client is there is merely slow: nothing.
  if s.n and waiter_absent_since(s, s.n, now) then told = wake_waiter(s, w, now, ARGV[1], ARGV[2]) end
elseif presence_channel(who) then
  -- Held by a holder that keeps a presence: the longest-waiting waiter
  -- whose client is there polls it, which its next try tells it (the
  -- acquire's reply): this note prompts that try.
  told = first_present_waiter(s, KEYS[2], KEYS[3], now, nil)
  if told then publish_notes(ARGV[1], ARGV[2], {freed_note(told)}) end
end
save_changes(s, w)
if told then return 1 end
return 0
