-- fair_inspect.lua: read-only snapshot of a fair lock for fair.Inspect.
-- KEYS[1..4]: hold, queue, deadlines, waiters. Changes nothing: dead and
-- given-up entries are reported, not removed.
-- Returns {now ms, holder, count, ms left, token, label, granted entry,
--          then per list element: entry, deadline ms or -1, waiter info}.
local bad = layout_error()
if bad then return bad end
local now = clock()
local holder, count, expiry, token = hold(now)
local out = {now, holder or '', count or 0, holder and (expiry - now) or 0, token or 0,
  redis.call('HGET', KEYS[1], 'b') or '', redis.call('HGET', KEYS[1], 'e') or ''}
for _, entry in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
  out[#out + 1] = entry
  out[#out + 1] = tonumber(redis.call('ZSCORE', KEYS[3], entry) or '-1')
  out[#out + 1] = redis.call('HGET', KEYS[4], entry) or ''
end
return out
