-- sem_watch.lua: a release served permits to the semaphore's first waiter
-- (its gate's holder), whose client keeps a presence, and the releasing
-- owner looks once more a poll later (core's watchHandOff): a first waiter
-- killed as the release ran looked alive to it, and if the gate's head died
-- too, no script would run until a live waiter's heartbeat. If that
-- waiter's presence is gone now, its absence is recorded for its permit
-- hold and its gate hold, and the first gate waiter whose client is there
-- is told to look at the grace's end (served_gone in permits.lua).
-- KEYS[1] the permits, KEYS[2..4] the gate: hold, queue, deadlines.
-- ARGV[1] publish command, ARGV[2] channel (the gate's).
-- Returns 1 if it told a waiter to look (or a new head when it is), 0 if not.
local GATE = queue_keys(KEYS[2], KEYS[3], KEYS[4])
local s = load()
local bad = layout_error(s)
if bad then return bad end
local g = load(GATE.hold)
bad = layout_error(g, GATE.hold)
if bad then return bad end
local now = clock()

-- The first waiter still holds the gate, and the permits it was served.
local who = holder(g, now)
local owner = g.po
if who == nil or owner == nil then return 0 end
local w = {}
if permit_holds(s, w, now)[owner] == nil then
  save_changes(s, w)
  return 0
end
local notes = served_gone(s, w, g, GATE, who, owner, now)
save_changes(s, w)
if notes == nil or #notes == 0 then return 0 end
publish_notes(ARGV[1], ARGV[2], notes)
return 1
