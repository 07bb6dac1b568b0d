-- sem_watch.lua: a release served permits to the semaphore's first waiter
-- (its gate's holder), whose client keeps a presence, and the releasing
-- owner looks once more a poll later (core's watchHandOff): waiters killed
-- as the release ran looked alive to it, and if the gate's head died too,
-- no script would run until a live waiter's heartbeat. By now the first
-- waiter may have claimed its permits and handed the gate on before it
-- died: so this looks at whoever holds the gate and the permits now
-- (gone_look in permits.lua, as a release that finds them gone does).
-- KEYS[1] the permits, KEYS[2..4] the gate: hold, queue, deadlines.
-- ARGV[1] publish command, ARGV[2] channel (the gate's), ARGV[3] the
-- releasing client's id (absences count only where its session is:
-- queue.lua).
-- Returns 1 if it told a waiter to look, 0 if not.
local GATE = queue_keys(KEYS[2], KEYS[3], KEYS[4])
caller = ARGV[3]
local s = load()
local bad = layout_error(s)
if bad then return bad end
local g = load(GATE.hold)
bad = layout_error(g, GATE.hold)
if bad then return bad end
local now = clock()
local who = holder(g, now)
if who == nil then return 0 end
local w = {}
local notes = gone_look(s, w, g, GATE, who, now)
save_changes(s, w)
if #notes == 0 then return 0 end
publish_notes(ARGV[1], ARGV[2], notes)
return 1
