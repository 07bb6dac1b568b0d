-- sem_state.lua: read-only view of a semaphore's permits, for Available and
-- InspectSemaphore.
-- KEYS[1] the permits.
-- Returns {K (0: none recorded), Redis ms now, then for each permit hold in
-- force: owner, permits, ms until expiry, token, label}.
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now = clock()
local holds = permit_holds(s, {}, now)
local out = {tonumber(s.m or '0'), now}
for owner, h in pairs(holds) do
  out[#out + 1] = owner
  out[#out + 1] = h.n
  out[#out + 1] = h.x - now
  out[#out + 1] = h.token
  out[#out + 1] = h.label
end
return out
