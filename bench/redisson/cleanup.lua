-- Put in front of fair_acquire.lua and fair_release.lua (redisson.go):
-- drop the waiters at the front of the queue whose timeout passed.
local function drop_stale(queue, timeouts, now)
  while true do
    local first = redis.call('lindex', queue, 0)
    if first == false then return end
    local t = tonumber(redis.call('zscore', timeouts, first))
    if t > now then return end
    redis.call('zrem', timeouts, first)
    redis.call('lpop', queue)
  end
end
