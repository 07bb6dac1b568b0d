-- renew.lua: the watchdog's renewal, and the grantee's claim after a direct
-- hand-off. Extends the hold only if this very hold (owner and token) is
-- still in force; never shortens it. Safe to run twice.
-- KEYS[1] the hold (fair lock: KEYS[2..3] too, the queue and deadlines, so
-- that commit keeps their TTL in step).
-- ARGV[1] owner id, ARGV[2] token, ARGV[3] lease in ms,
-- ARGV[4] "1" if the lease is fixed: a fixed lease counts from the grant.
-- Returns {1, ms until expiry} or {0} when the hold is gone.
local owner, token, lease, fixed = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now = clock()

local who, _, expiry, held_token = holder(s, now)
if who ~= owner or held_token ~= token then return {0} end
-- A renewal counts from now. A fixed lease counts from its grant, and only
-- its first claim may lengthen it: the claim clears the grant time (below),
-- so a second claim (an owner confirming its holds after a break, a retried
-- call) extends nothing, as sem_renew.lua's does.
local x = expiry
if not fixed then
  x = math.max(expiry, now + lease)
elseif s.g then
  x = math.max(expiry, tonumber(s.g) + lease)
end
local w = {x = int(x)}
if s.e then
  -- The grant is claimed: it is now an ordinary hold.
  s.e, s.g = nil, nil
end
-- A fair lock's queue keys live as long as its hold (commit).
commit(s, w, now, false, unpack(KEYS, 2))
return {1, tonumber(w.x) - now}
