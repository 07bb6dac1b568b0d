-- sem_watch.lua: a release served permits to the semaphore's first waiter
-- (its gate's holder), whose client keeps a presence, and the releasing
-- owner looks once more a poll later (core's watchHandOff): waiters killed
-- as the release ran looked alive to it, and if the gate's head died too,
-- no script would run until a live waiter's heartbeat. By now the first
-- waiter may have claimed its permits and handed the gate on before it
-- died: so this looks at whoever holds the gate and the permits now. The
-- absences it finds are recorded (the gate's holder's, pa; its waiters',
-- wa; the permit holders', the permits' pa), and the first gate waiter
-- whose client is there, behind a gate head whose client is gone, is told
-- to look when they may all be ended (as served_gone in permits.lua does).
-- KEYS[1] the permits, KEYS[2..4] the gate: hold, queue, deadlines.
-- ARGV[1] publish command, ARGV[2] channel (the gate's).
-- Returns 1 if it told a waiter to look, 0 if not.
local GATE = queue_keys(KEYS[2], KEYS[3], KEYS[4])
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

-- The permit holders gone: recorded from now, or from the first look that
-- found them gone (nothing is ended here: the first waiter ends them, and
-- serves what they free).
local latest = nil
local seen = s.pa
if type(seen) ~= 'table' then seen = {} end
for owner in pairs(permit_holds(s, w, now)) do
  local ch = presence_channel(owner)
  if ch and redis.call('PUBSUB', 'NUMSUB', ch)[2] == 0 then
    local since = tonumber(seen[owner] or '') or now
    seen[owner] = int(since)
    if latest == nil or since > latest then latest = since end
  end
end
if latest then s.pa, w.pa = seen, seen end

-- The gate's holder and queue, as a fair queue's cleanup looks at them.
local gw = {}
local gone = not holder_present(g, gw, now)
local since = tonumber(gw.pa or g.pa or '')
if gw.pa then g.pa = gw.pa end
local head, popped, _, _, first, from = present_head(g, GATE, now)
if gone or gw.pa or changed then redis.call('SET', GATE.hold, cjson.encode(g), 'KEEPTTL') end
save_changes(s, w)
if head == nil or first == nil or first == head then return 0 end
local at = from
if since and since + PRESENCE_GRACE_MS > at then at = since + PRESENCE_GRACE_MS end
if latest and latest + PRESENCE_GRACE_MS > at then at = latest + PRESENCE_GRACE_MS end
local notes = {}
if popped then notes[1] = head_notice(head, look_at(who, tonumber(g.x), now, g.pa)) end
notes[#notes + 1] = head_notice(first, at)
publish_notes(ARGV[1], ARGV[2], notes)
return 1
