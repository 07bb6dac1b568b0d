-- The release of the RLock port: KEYS[1] the lock hash, KEYS[2] the
-- channel every waiter of the lock listens on; ARGV[1] lease ms, ARGV[2]
-- thread id. Returns 1 released, 0 still held, nil not the holder.
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[1])
  return 0
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], '0')
return 1
