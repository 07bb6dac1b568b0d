-- state.lua: read-only view of the hold, for IsLocked, HoldCount and TTL.
-- KEYS[1] the hold (see hold.lua).
-- Returns {} when free, else {owner, count, ms until expiry, token, label}.
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now = clock()
local who, count, expiry, token = holder(s, now)
if who == nil then return {} end
return {who, count, expiry - now, token, s.b or ''}
