-- fair_inspect.lua: read-only snapshot of a fair lock for fair.Inspect.
-- KEYS[1..3]: hold, queue, deadlines. Changes nothing: dead and
-- given-up entries are reported, not removed.
-- Returns inspect_queue's snapshot (queue.lua).
local s = load()
local bad = layout_error(s)
if bad then return bad end
return inspect_queue(queue_keys(KEYS[1], KEYS[2], KEYS[3]), s, clock())
