-- sem_renew.lua: the watchdog's renewal of one permit hold. Extends it only
-- if this very hold (owner and token) is in force; never shortens it. Safe
-- to run twice.
-- KEYS[1] the permits (KEYS[2], the gate's hold, is not touched).
-- ARGV[1] owner id, ARGV[2] token, ARGV[3] lease ms, ARGV[4] unused (a
-- permit hold is never handed off, so a fixed lease is never renewed).
-- Returns {1, ms until expiry} or {0} when the hold is gone.
local owner, token, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now = clock()
local w = {}

local mine = own_permit(s, w, now, owner, token)
if not mine then return {0} end
local expiry = math.max(mine.x, now + lease)
s.p[owner] = permit_record(mine.n, expiry, token, mine.label)
w.p = s.p
if expiry > tonumber(s.x or '0') then w.x = int(expiry) end
commit(s, w, now, false, 1)
return {1, expiry - now}
