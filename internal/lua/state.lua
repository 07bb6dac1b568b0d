-- state.lua: read-only view of the hold, for IsLocked, HoldCount and TTL.
-- KEYS[1] the hold hash.
-- Returns {} when free, else {owner, count, ms until expiry, token, label}.
local bad = layout_error()
if bad then return bad end
local now = clock()
local holder, count, expiry, token = hold(now)
if holder == nil then return {} end
return {holder, count, expiry - now, token, redis.call('HGET', KEYS[1], 'b') or ''}
