-- election_proclaim.lua: the leader of an election changes its value
-- (fair.Election.Proclaim). The change is published on the election's
-- leader channel by save (announce in hold.lua), in this call; the same
-- value again changes nothing and publishes nothing, so a retry is
-- harmless.
-- KEYS[1..3]: the election's hold, queue, deadlines (hold.lua).
-- ARGV[1] owner id, ARGV[2] token of the leader's hold (its term),
-- ARGV[3] the new value, escaped by the Go side, ARGV[4] publish command,
-- ARGV[5] channel.
-- Returns 1 if the value is the leader's now, 0 if that hold is no longer in
-- force (its term ended).
watch_leader(ARGV[4], ARGV[5])
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now = clock()
local who, _, _, token = holder(s, now)
if who ~= ARGV[1] or token ~= tonumber(ARGV[2]) then return 0 end
save(s, {l = ARGV[3]})
return 1
