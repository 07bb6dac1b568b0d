-- state.lua: read-only view of the hold, for IsLocked, HoldCount and TTL.
-- KEYS[1] the hold (see hold.lua).
-- Returns {} when free, else {owner, count, ms until expiry, token, label}.
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now = clock()
local who, count, expiry, token = holder(s, now)
-- A lock held by nobody's while the server settles (hold.lua) is free to
-- look at: its first acquisition waits the pause out.
if who == nil or who == SETTLING then return {} end
return {who, count, expiry - now, token, s.b or ''}
