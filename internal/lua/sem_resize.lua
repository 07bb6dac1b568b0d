-- sem_resize.lua: change how many permits one permit hold has, keeping its
-- token and lease: an RWMutex's writer that still holds the read lock keeps
-- one permit of all (a downgrade). Fewer permits serve the waiters at the
-- head that they let in: the run of readers behind the writer.
-- KEYS[1] the permits, KEYS[2..4] the gate: hold, queue, deadlines.
-- ARGV[1] owner id of the hold, ARGV[2] its token, ARGV[3] its new number of
-- permits, ARGV[4] publish command, ARGV[5] channel (the gate's).
-- Returns 1 done (also when it already had that number: safe to retry), 0
-- when the hold is gone.
local GATE = queue_keys(KEYS[2], KEYS[3], KEYS[4])
local owner, token, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
caller = owner -- absences count only where its session is (queue.lua)
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now, now_us = clock()
local w = {}

local holds, used = permit_holds(s, w, now)
local mine = holds[owner]
if not mine or mine.token ~= token then
  save_changes(s, w)
  return 0
end
s.p[owner] = permit_record(n, mine.x, token, mine.g, mine.label)
w.p = s.p
if n < mine.n then
  serve(s, w, GATE, used - mine.n + n, tonumber(s.m or '0'), now, now_us, ARGV[4], ARGV[5])
end
commit(s, w, now, false)
return 1
