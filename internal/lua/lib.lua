-- lib.lua: helpers prepended to every script of this folder (see lua.go).
--
-- Data layout, for a lock named N (the braces are Redis Cluster's hash tag, so
-- all keys of one lock live in one slot):
--   KEYS[1] fairlock:<kind>:{N}            hash, the hold
--       v  layout version (LAYOUT below); a mismatch fails loudly
--       o  owner id of the hold ("<client>.<handle>")      } present only while
--       c  hold count (re-entries)                          } a hold exists;
--       x  expiry of the hold, Redis time in ms             } held = o and x > now
--       t  fencing token of the hold                        }
--       f  last fencing token issued for this lock (survives releases)
--       q  id of the last owner request applied, a its answer (retry safety)
--       fair lock only, set by a direct hand-off until the grantee claims it:
--       e  queue entry the hold was granted to, g grant time (ms), b label
--   fair lock only:
--   KEYS[2] fairlock:f:{N}:queue      list, queue entry ids in join order
--   KEYS[3] fairlock:f:{N}:deadlines  zset, entry id -> deadline (Redis ms);
--       an entry in the list but not here is a tombstone (it gave up or died)
--   KEYS[4] fairlock:f:{N}:waiters    hash, entry id -> "lease|wait|label"
--
-- Time is always Redis's own (TIME), never a client's.

local LAYOUT = '1'
-- How long the hash outlives its last hold: long enough for a retried request
-- to find its answer (q/a) and for the fence (f) to bridge quick re-locks.
local RETAIN_MS = 30000

local function clock()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

-- Integers are written with %d: Lua's default formatting keeps 14 digits.
local function int(n)
  return string.format('%d', n)
end

local function layout_error()
  local v = redis.call('HGET', KEYS[1], 'v')
  if v and v ~= LAYOUT then
    return redis.error_reply('fairlock: lock ' .. KEYS[1] .. ' has data layout ' ..
      v .. ', this library writes layout ' .. LAYOUT .. '; do not mix library versions on one lock')
  end
  return nil
end

-- Answers are stored as comma-separated integers so a retried request can get
-- the very answer its first run produced.
local function encode(t)
  local parts = {}
  for i, n in ipairs(t) do parts[i] = int(n) end
  return table.concat(parts, ',')
end

local function decode(s)
  local t = {}
  for n in string.gmatch(s, '[^,]+') do t[#t + 1] = tonumber(n) end
  return t
end

-- Fencing: strictly above every token issued before, and above the server's
-- clock in microseconds, so tokens keep rising even after every key expired
-- or the server restarted empty (assuming the server clock never steps back).
local function next_token(now_us)
  local last = tonumber(redis.call('HGET', KEYS[1], 'f') or '0')
  local token = math.max(last + 1, now_us)
  redis.call('HSET', KEYS[1], 'f', int(token), 'v', LAYOUT)
  return token
end

-- Is the lock held now? Returns owner, count, expiry, token (owner nil if free).
local function hold(now)
  local h = redis.call('HMGET', KEYS[1], 'o', 'c', 'x', 't', 'e', 'g')
  if h[1] and tonumber(h[3]) > now then
    return h[1], tonumber(h[2]), tonumber(h[3]), tonumber(h[4]), h[5], tonumber(h[6])
  end
  return nil
end

local function clear_hold()
  redis.call('HDEL', KEYS[1], 'o', 'c', 'x', 't', 'e', 'g', 'b')
end

-- Every write ends here: each key of the lock lives until the later of the
-- hold's expiry and the last waiter's deadline, plus RETAIN_MS. Nothing is left
-- behind once every client is gone. O(log N): one ZRANGE of the top score.
local function retain(now)
  local horizon = 0
  local x = tonumber(redis.call('HGET', KEYS[1], 'x') or '0')
  if x > now then horizon = x - now end
  if #KEYS >= 3 then
    local top = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
    if top[2] and tonumber(top[2]) - now > horizon then horizon = tonumber(top[2]) - now end
  end
  for _, key in ipairs(KEYS) do
    redis.call('PEXPIRE', key, int(horizon + RETAIN_MS))
  end
end

-- Fair lock, step 1 (queue cleanup): drop tombstones and waiters whose
-- deadline passed from the head, until the head is a live waiter. Each entry
-- is popped once in its life, so this is O(1) amortised per entry.
-- Returns the live head and its deadline, or nil.
local function live_head(now)
  while true do
    local head = redis.call('LINDEX', KEYS[2], 0)
    if not head then return nil end
    local deadline = tonumber(redis.call('ZSCORE', KEYS[3], head) or '0')
    if deadline > now then return head, deadline end
    redis.call('LPOP', KEYS[2])
    redis.call('ZREM', KEYS[3], head)
    redis.call('HDEL', KEYS[4], head)
  end
end

-- The owner of a queue entry: entry ids are "<owner>/<join number>".
local function entry_owner(entry)
  return string.match(entry, '^(.*)/[^/]*$')
end

-- Fair lock, direct hand-off: with the lock free, grant it to the live head
-- and publish the grant to that waiter alone ("<entry> <token>"): exactly one
-- message per hand-off, and the waiter needs no further round trip. Until the
-- grantee claims it, the grant lasts no longer than the waiter's own queue
-- deadline: a grant to a waiter that died ends when its eviction would have.
-- Precondition: the lock is not held.
local function hand_off(now, now_us, publish, channel)
  local head, deadline = live_head(now)
  if not head then return nil end
  local info = redis.call('HGET', KEYS[4], head) or '0|0|'
  local lease, label = string.match(info, '^(%d+)|%d+|(.*)$')
  redis.call('LPOP', KEYS[2])
  redis.call('ZREM', KEYS[3], head)
  redis.call('HDEL', KEYS[4], head)
  local token = next_token(now_us)
  local expiry = math.min(now + tonumber(lease), deadline)
  redis.call('HSET', KEYS[1], 'o', entry_owner(head), 'c', '1', 'x', int(expiry),
    't', int(token), 'e', head, 'g', int(now), 'b', label)
  redis.call(publish, channel, head .. ' ' .. int(token))
  return head
end
