-- renew.lua: the watchdog's renewal, and the grantee's claim after a direct
-- hand-off. Extends the hold only if this very hold (owner and token) is
-- still in force; never shortens it. Safe to run twice.
-- KEYS[1] the hold hash (fair lock: KEYS[2..4] too, for retain).
-- ARGV[1] owner id, ARGV[2] token, ARGV[3] lease in ms,
-- ARGV[4] "1" if the lease is fixed: a fixed lease counts from the grant.
-- Returns {1, ms until expiry} or {0} when the hold is gone.
local owner, token, lease, fixed = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'
local bad = layout_error()
if bad then return bad end
local now = clock()

local holder, _, expiry, held_token, _, granted = hold(now)
if holder ~= owner or held_token ~= token then return {0} end
local from = now
if fixed then from = granted or now end
expiry = math.max(expiry, from + lease)
redis.call('HSET', KEYS[1], 'x', int(expiry))
-- The grant is claimed: it is now an ordinary hold.
redis.call('HDEL', KEYS[1], 'e', 'g')
retain(now)
return {1, expiry - now}
