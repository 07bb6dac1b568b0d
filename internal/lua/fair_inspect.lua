-- fair_inspect.lua: read-only snapshot of a fair lock for fair.Inspect.
-- KEYS[1..3]: hold, queue, deadlines. Changes nothing: dead and
-- given-up entries are reported, not removed.
-- Returns {now ms, holder, count, ms left, token, label, granted entry,
--          the holder's permit request, "<owner> <n> <lease>" (a
--          semaphore's gate; "" elsewhere),
--          then per list element: entry, deadline ms or -1, the element
--          after its entry id, "<lease>|<wait>|<request>|<label>"}.
local Q = queue_keys(KEYS[1], KEYS[2], KEYS[3])
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now = clock()
local who, count, expiry, token = holder(s, now)
local out = {now, who or '', count or 0, who and (expiry - now) or 0, token or 0,
  (who and s.b) or '', (who and s.e) or '', (who and request_text(s.po, s.pn, s.pl)) or ''}
for _, el in ipairs(redis.call('LRANGE', Q.list, 0, -1)) do
  local entry, info = element_entry(el), element_info(el)
  out[#out + 1] = entry
  out[#out + 1] = tonumber(redis.call('ZSCORE', Q.deadlines, entry) or '-1')
  out[#out + 1] = info
end
return out
