-- A port, for measurement only, of the algorithm of Redisson's fair lock
-- (RedissonFairLock), written from its published description; not used by
-- fairlock. KEYS[1] the lock hash (owner -> re-entry count), KEYS[2] the
-- queue list of waiting thread ids, KEYS[3] the zset of each waiter's
-- timeout. ARGV[1] lease ms, ARGV[2] thread id, ARGV[3] how long a waiter
-- keeps its place ms, ARGV[4] the client's clock ms. Returns nil when held,
-- else the ms to wait before trying again.
local lock, queue, timeouts = KEYS[1], KEYS[2], KEYS[3]
local lease, me, keep, now = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])

drop_stale(queue, timeouts, now) -- cleanup.lua

-- Free, and nobody ahead of the caller: take it, leave the queue, and give
-- everyone behind the wait it no longer adds.
if redis.call('exists', lock) == 0
    and (redis.call('exists', queue) == 0 or redis.call('lindex', queue, 0) == me) then
  redis.call('lpop', queue)
  redis.call('zrem', timeouts, me)
  for _, w in ipairs(redis.call('zrange', timeouts, 0, -1)) do
    redis.call('zincrby', timeouts, -keep, w)
  end
  redis.call('hset', lock, me, 1)
  redis.call('pexpire', lock, lease)
  return nil
end

-- Re-entry.
if redis.call('hexists', lock, me) == 1 then
  redis.call('hincrby', lock, me, 1)
  redis.call('pexpire', lock, lease)
  return nil
end

-- Already queued: how long until its turn, by its timeout.
local mine = redis.call('zscore', timeouts, me)
if mine ~= false then
  return tonumber(mine) - keep - now
end

-- Queue at the tail, with a timeout past the one ahead (or the hold's end).
local last = redis.call('lindex', queue, -1)
local ttl
if last ~= false and last ~= me then
  ttl = tonumber(redis.call('zscore', timeouts, last)) - now
else
  ttl = redis.call('pttl', lock)
end
if redis.call('zadd', timeouts, ttl + keep + now, me) == 1 then
  redis.call('rpush', queue, me)
end
return ttl
