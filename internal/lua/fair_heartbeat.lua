-- fair_heartbeat.lua: one call for all waiters of one client on one lock,
-- every wait timeout / 3: live waiters keep their place by pushing their
-- deadline to now + their own wait timeout. It is also the waiters' fallback:
-- it evicts dead heads, hands a free lock to the live head, and tells each
-- waiter whether the lock was already handed to it, and whether it is the
-- head of a held lock (news whose message may have been lost).
-- KEYS[1..3]: hold, queue, deadlines.
-- ARGV[1] publish command, ARGV[2] channel, then pairs: entry id, wait ms;
-- or, for a release's second look (core's watchHandOff), no pairs and
-- ARGV[3] the releasing client's id. The caller (absences count only where
-- its session is: queue.lua) is that client, or the entries' owner.
-- Returns, for each entry in order: 0 queued, -2 queued as the live head of
-- a held lock, -3 queued as the first waiter whose client is there behind a
-- head whose client is gone (queue.lua's present_head), -1 evicted or gone,
-- or the token of a hold granted to it;
-- then the grant's time (Redis ms, 0: none), 1 if this call made that grant
-- (0 if a release or an earlier call did), and the hold's expiry (Redis ms,
-- 0: free).
local Q = queue_keys(KEYS[1], KEYS[2], KEYS[3])
if #ARGV == 3 then caller = ARGV[3] else caller = entry_owner(ARGV[3] or '') end
watch_leader(ARGV[1], ARGV[2])
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now, now_us = clock()
local w = {}

-- Cleanup, and the hand-off that a lost release or an expired lease left
-- undone. While the lock is held, cleanup may evict a dead head: the waiter
-- behind it is told it is head now. It looks at presences as an attempt
-- does: a holder whose client has been gone for the grace loses the lock
-- (queue.lua's holder_present), a waiter whose client has is passed over,
-- and behind a head whose client is gone the first waiter whose client is
-- there is told to look (present_head). So a head that died together with
-- the holder costs the waiters behind at most a heartbeat, not their wait
-- timeout.
local who, _, expiry = holder(s, now)
if who and not holder_present(s, w, now) then
  clear_hold(s)
  who, expiry = nil, nil
end
local head, first, from
if expiry == nil then
  if hand_off(s, w, Q, now, now_us, ARGV[1], ARGV[2]) then
    local _
    head, _, _, _, first, from = present_head(s, Q, now)
    expiry = tonumber(w.x)
  end
else
  local popped, _
  head, popped, _, _, first, from = present_head(s, Q, now)
  local at = look_at(s.o, expiry, now, w.pa or s.pa)
  if popped and head then
    tell_heads(head, first, from, at, ARGV[1], ARGV[2])
  elseif head and first and first ~= head then
    -- The head's client is gone, and the head may never look (it died
    -- with the holder, or as the release that made this hold ran: core's
    -- watchHandOff): the first waiter behind it whose client is there is
    -- told to look (the head was told when it became head).
    tell_heads(head, first, from, at, ARGV[1], ARGV[2], head)
  end
end
local granted, token = w.e or s.e, w.f or s.f
local first_looks = false

local status = {}
for i = 3, #ARGV - 1, 2 do
  local entry, wait = ARGV[i], tonumber(ARGV[i + 1])
  local deadline = redis.call('ZSCORE', Q.deadlines, entry)
  if entry == granted then
    status[#status + 1] = tonumber(token)
  elseif deadline and tonumber(deadline) > now then
    redis.call('ZADD', Q.deadlines, 'XX', int(now + wait), entry)
    horizon(s, w, now + wait)
    -- The head learns it is head from its head notice; this says it again,
    -- in case that message was lost.
    -- The first waiter behind a head whose client is gone learns it here
    -- (-3), if no script had looked at that head since it went.
    if entry == head then
      status[#status + 1] = -2
    elseif entry == first then
      status[#status + 1] = -3
      first_looks = true
    else
      status[#status + 1] = 0
    end
  else
    -- Silent past its deadline: it is dead to the queue, even if cleanup has
    -- not reached its list element yet.
    redis.call('ZREM', Q.deadlines, entry)
    status[#status + 1] = -1
  end
end
commit(s, w, now, false, Q.list, Q.deadlines)
status[#status + 1] = tonumber(w.g or s.g or '0')
if w.e then status[#status + 1] = 1 else status[#status + 1] = 0 end
-- The head of a lock whose holder keeps a presence looks again sooner; the
-- first waiter behind a head whose client is gone, once those ahead of it
-- may be passed over. (The two are never of one client: one is there, the
-- other gone.)
local look = (expiry and look_at(w.o or s.o, expiry, now, w.pa or s.pa)) or 0
if first_looks and look > 0 then look = math.max(look, from) end
status[#status + 1] = look
return status
