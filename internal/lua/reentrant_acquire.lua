-- reentrant_acquire.lua: one attempt to take or re-enter a reentrant lock.
-- KEYS[1] the hold hash.
-- ARGV[1] owner id, ARGV[2] request id, ARGV[3] lease in ms.
-- Returns {1, count, token} when held, {0, ms until the current hold expires}.
local owner, req, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
local bad = layout_error()
if bad then return bad end
local now, now_us = clock()

-- A retry of a request that already ran (go-redis retries after timeouts)
-- gets the first run's answer: a re-entry or a token is never applied twice.
local last = redis.call('HMGET', KEYS[1], 'q', 'a')
if last[1] == req then return decode(last[2]) end

local holder, count, expiry, token = hold(now)
local answer
if holder == nil then
  -- Free, or the last hold's lease ran out: take it with a fresh token.
  token = next_token(now_us)
  redis.call('HSET', KEYS[1], 'o', owner, 'c', '1', 'x', int(now + lease), 't', int(token))
  answer = {1, 1, token}
elseif holder == owner then
  -- Re-entry by the same handle: count it; the lease may grow, never shrink.
  redis.call('HSET', KEYS[1], 'c', int(count + 1), 'x', int(math.max(expiry, now + lease)))
  answer = {1, count + 1, token}
else
  -- Held by another handle: tell the caller how long the hold can last.
  return {0, expiry - now}
end
redis.call('HSET', KEYS[1], 'q', req, 'a', encode(answer), 'v', LAYOUT)
retain(now)
return answer
