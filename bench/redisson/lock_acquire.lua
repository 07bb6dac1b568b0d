-- A port, for measurement only, of the algorithm of Redisson's plain
-- reentrant lock (RLock), written from its published description; not used
-- by fairlock. KEYS[1] the lock hash (owner -> re-entry count); ARGV[1]
-- lease ms, ARGV[2] thread id. Returns nil when held, else the hold's ttl.
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])
