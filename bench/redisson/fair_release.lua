-- The release of the fair-lock port (fair_acquire.lua): KEYS[1..3] as
-- there, KEYS[4] the channel prefix; ARGV[1] lease ms, ARGV[2] thread id,
-- ARGV[3] the client's clock ms. The next waiter hears on its own channel,
-- prefix:<thread id>. Returns 1 released, 0 still held (re-entered), nil not
-- the holder.
local lock, queue, timeouts, prefix = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local lease, me, now = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])

drop_stale(queue, timeouts, now) -- cleanup.lua

if redis.call('exists', lock) == 0 then
  local next = redis.call('lindex', queue, 0)
  if next ~= false then redis.call('publish', prefix .. ':' .. next, '0') end
  return 1
end
if redis.call('hexists', lock, me) == 0 then return nil end
if redis.call('hincrby', lock, me, -1) > 0 then
  redis.call('pexpire', lock, lease)
  return 0
end
redis.call('del', lock)
local next = redis.call('lindex', queue, 0)
if next ~= false then redis.call('publish', prefix .. ':' .. next, '0') end
return 1
