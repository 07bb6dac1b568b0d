-- sem_release.lua: give back one permit hold's permits, and serve the
-- waiters at the head that the freed permits let in (serve in permits.lua).
-- KEYS[1] the permits, KEYS[2..4] the gate: hold, queue, deadlines.
-- ARGV[1] owner id of the permit hold, ARGV[2] request id (unused: owner ids
-- are used once, so the hold itself tells a retry), ARGV[3] its token,
-- ARGV[4] publish command, ARGV[5] channel (the gate's),
-- ARGV[6] (optional) the owner's hold, if it has one, is released whatever
-- its token: an acquisition whose answer was lost, or permits served to a
-- waiter that gave up.
-- Returns {1} released, {0} not held (ran out, or never granted); {1, 1}:
-- released, and permits served to a first waiter whose client keeps a
-- presence, which the caller's owner looks at once more a poll later
-- (sem_watch.lua).
local GATE = queue_keys(KEYS[2], KEYS[3], KEYS[4])
local owner, token = ARGV[1], tonumber(ARGV[3])
caller = owner -- absences count only where its session is (queue.lua)
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now, now_us = clock()
local w = {}

local holds, used = permit_holds(s, w, now)
local mine = holds[owner]
if ARGV[6] and mine then token = mine.token end
if not mine or mine.token ~= token then
  -- A retry of the release that ended this very hold gets its first answer.
  save_changes(s, w)
  if released_hold(s, token) then return {1} end
  return {0}
end

s.p[owner] = nil
w.p = s.p
note_released(s, w, token)
local watch = serve(s, w, GATE, used - mine.n, tonumber(s.m or '0'), now, now_us, ARGV[4], ARGV[5])
commit(s, w, now, false)
-- Served to a first waiter that keeps a presence: its owner watches it
-- (sem_watch.lua).
if watch then return {1, 1} end
return {1}
