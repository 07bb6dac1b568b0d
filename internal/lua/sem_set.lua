-- sem_set.lua: SetPermits, a new number of permits for a semaphore in use.
-- Holds in force keep their permits (a lowered K may be exceeded until they
-- end); the first waiter is woken to look again.
-- KEYS[1] the permits, KEYS[2] the gate's hold.
-- ARGV[1] the new number of permits, ARGV[2] publish command, ARGV[3] channel.
-- Returns the number it had (0: none recorded).
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now = clock()
local w = {m = ARGV[1]}
permit_holds(s, w, now)
local was = tonumber(s.m or '0')
commit(s, w, now, false, 1)
wake_gate(KEYS[2], now, ARGV[2], ARGV[3])
return was
