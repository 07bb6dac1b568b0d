-- sem_renew.lua: the watchdog's renewal of one permit hold, and the claim of
-- permits served to a waiter. Extends the hold only if this very hold (owner
-- and token) is in force; never shortens it. Safe to run twice.
-- KEYS[1] the permits (the gate's keys are not touched).
-- ARGV[1] owner id, ARGV[2] token, ARGV[3] lease ms, ARGV[4] "1": a claim of
-- served permits with a fixed lease, which counts from the grant ("0": from
-- now).
-- Returns {1, ms until expiry} or {0} when the hold is gone.
local owner, token, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
caller = owner -- absences count only where its session is (queue.lua)
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now = clock()
local w = {}

local mine = own_permit(s, w, now, owner, token)
if not mine then return {0} end
-- A claimed hold keeps g at 0: a second claim of a fixed lease extends
-- nothing.
local from = now
if ARGV[4] == '1' then from = mine.g end
local expiry = math.max(mine.x, from + lease)
s.p[owner] = permit_record(mine.n, expiry, token, 0, mine.label)
w.p = s.p
if expiry > tonumber(s.x or '0') then w.x = int(expiry) end
commit(s, w, now, false)
return {1, expiry - now}
