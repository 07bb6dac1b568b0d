-- reentrant_release.lua: undo one level of a hold; the last level frees the
-- lock and publishes one wake-up on the lock's channel.
-- KEYS[1] the hold hash.
-- ARGV[1] owner id, ARGV[2] request id, ARGV[3] token of the hold,
-- ARGV[4] publish command (PUBLISH or SPUBLISH), ARGV[5] channel.
-- Returns {1} released, {2, count} still held count times, {0} not held.
local owner, req, token = ARGV[1], ARGV[2], tonumber(ARGV[3])
local bad = layout_error()
if bad then return bad end
local now = clock()

-- A retried release returns its first answer instead of releasing twice.
local last = redis.call('HMGET', KEYS[1], 'q', 'a')
if last[1] == req then return decode(last[2]) end

-- Only the owner of this very hold may release it; anyone else changes nothing.
local holder, count, _, held_token = hold(now)
if holder ~= owner or held_token ~= token then return {0} end

local answer
if count > 1 then
  redis.call('HSET', KEYS[1], 'c', int(count - 1))
  answer = {2, count - 1}
else
  clear_hold()
  redis.call(ARGV[4], ARGV[5], '')
  answer = {1}
end
redis.call('HSET', KEYS[1], 'q', req, 'a', encode(answer))
retain(now)
return answer
