-- election_inspect.lua: read-only snapshot of an election for
-- fair.InspectElection, in one call: who leads and its candidates agree.
-- KEYS[1..3]: the election's hold, queue, deadlines. Changes nothing.
-- Returns {leadership_text (hold.lua), inspect_queue's snapshot (queue.lua)}.
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now = clock()
return {leadership_text(s, now), inspect_queue(queue_keys(KEYS[1], KEYS[2], KEYS[3]), s, now)}
