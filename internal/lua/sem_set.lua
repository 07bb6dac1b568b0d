-- sem_set.lua: SetPermits, a new number of permits for a semaphore in use.
-- Holds in force keep their permits (a lowered K may be exceeded until they
-- end); a raised K serves the waiters at the head it lets in.
-- KEYS[1] the permits, KEYS[2..4] the gate: hold, queue, deadlines.
-- ARGV[1] the new number of permits, ARGV[2] publish command, ARGV[3]
-- channel (the gate's).
-- Returns the number it had (0: none recorded).
local GATE = queue_keys(KEYS[2], KEYS[3], KEYS[4])
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now, now_us = clock()
local w = {m = ARGV[1]}
local _, used = permit_holds(s, w, now)
local was = tonumber(s.m or '0')
serve(s, w, GATE, used, tonumber(ARGV[1]), now, now_us, ARGV[2], ARGV[3])
commit(s, w, now, false)
return was
