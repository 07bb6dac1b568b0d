-- sem_release.lua: give back one permit hold's permits, and wake the first
-- waiter (the gate's holder) if there is one.
-- KEYS[1] the permits, KEYS[2] the gate's hold.
-- ARGV[1] owner id of the permit hold, ARGV[2] request id (unused: owner ids
-- are used once, so the hold itself tells a retry), ARGV[3] its token,
-- ARGV[4] publish command, ARGV[5] channel,
-- ARGV[6] (optional) an acquiring request to undo: the owner's hold, if it
-- has one, is released whatever its token.
-- Returns {1} released, {0} not held (ran out, or never granted).
local owner, token = ARGV[1], tonumber(ARGV[3])
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now = clock()
local w = {}

local holds = permit_holds(s, w, now)
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
save(s, w)
wake_gate(KEYS[2], now, ARGV[4], ARGV[5])
return {1}
