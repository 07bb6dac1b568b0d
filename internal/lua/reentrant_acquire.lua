-- reentrant_acquire.lua: one attempt to take or re-enter a reentrant lock,
-- and, for a caller that waits, its place among the lock's waiters.
-- KEYS[1..3]: the hold, the waiters in arrival order (list), their deadlines
-- (zset) (see hold.lua).
-- ARGV[1] owner id, ARGV[2] request id, ARGV[3] lease in ms, ARGV[4] the
-- token of this hold id's latest hold that ended, lost or released ("0":
-- none), or -1 when the hold id holds nothing (not a re-entry); a caller
-- that waits adds ARGV[5], "<ask> <waiter> <wait>" in one word (each word
-- of a call costs Redis time: transport.ReentrantAcquire): ask "1" to ask
-- whether its wake-up was lost (freed, below) or "0", its waiter id (fresh
-- for each call) and its wait timeout in ms.
-- Returns token (a free lock nobody waits for: take_free, as
-- {1, token, 0}), or {1, token, freed} when held (freed: 1 if asked and
-- the lock was free because a release (or the leave of a woken waiter) woke
-- this very waiter, whose message should have reached it; 0 otherwise),
-- {0, ms until the current hold expires} (for the longest-waiting waiter
-- whose client is there, while the holder keeps a presence, until it should
-- look again: within the poll).
local owner, req, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])

-- The uncontended path (hold.lua's take_free): a free lock that no waiter
-- can be live for, and whose last wake-up (if any) was claimed, is taken
-- on the hold's text. The branch that takes a free lock below would take
-- it the same way.
local raw, now, now_us = redis.pcall('GET', KEYS[1]), nil, nil
if type(raw) == 'string' then
  local token
  token, now, now_us = take_free(raw, owner, req, lease, '', ARGV[5])
  if token then return token end
end

local ask, waiter, wait = nil, nil, nil
if ARGV[5] then
  ask, waiter, wait = string.match(ARGV[5], '^([01]) (%S+) (%d+)$')
  if not wait then return redis.error_reply('fairlock: reentrant_acquire: malformed ARGV[5]: ' .. ARGV[5]) end
  wait = tonumber(wait)
end

caller = owner -- absences count only where its session is (queue.lua)
local s = load(nil, raw)
local bad = layout_error(s)
if bad then return bad end

-- A retry of a request that already ran (go-redis retries after timeouts)
-- gets the first run's answer: a re-entry or a token is never applied twice.
if s.q == req then return acquired_answer(s) end

if now == nil then now, now_us = clock() end
local who, count, expiry, token = holder(s, now)
-- A lock whose hold is missing on a server that lost its data waits for it
-- to settle (hold.lua): it is held by nobody's (SETTLING) until then, a
-- hold with a token of its own, saved before the answer.
if who == nil and missing then
  local settle = settling(now)
  if settle then
    next_token(s, s, now_us)
    s.o, s.c, s.x = SETTLING, '1', int(settle)
    commit(s, s, now, false, KEYS[2], KEYS[3])
    missing = false
    who, count, expiry, token = holder(s, now)
  end
end
local stale = tonumber(ARGV[4]) or 0
if who == owner and (stale < 0 or token <= stale) then
  -- A hold of this hold id that ended on the client: given up for lost
  -- (its lease ran out as the client counts it, a margin before Redis's),
  -- or released where a failover lost the release (it reached the old
  -- master, or the promoted replica had not got it); so has every hold of
  -- this hold id with a token no greater (tokens rise, one hold at a
  -- time), and every one at all when this call is not a re-entry (-1: the
  -- hold id holds nothing on the client). End it, as its release would
  -- have, rather than count this call as a re-entry of it.
  clear_hold(s)
  who = nil
end
-- Presence (docs/presence.md): another handle's hold whose client keeps a
-- presence that has been gone for the grace belongs to a process that died:
-- it ends here, as a lease that ran out would, and the caller takes the lock
-- below (the lock is not fair: any attempt may). The first look that finds
-- the presence gone records when (pa, in absent), one that finds it back
-- forgets it (changed).
local absent = {}
if who ~= nil and who ~= owner and who ~= SETTLING and not holder_present(s, absent, now) then
  clear_hold(s)
  who = nil
end
if who ~= nil and who ~= owner then
  -- Held by another handle: tell the caller how long the hold can last.
  if waiter == nil then
    if next(absent) ~= nil or changed then commit(s, absent, now, false, KEYS[2], KEYS[3]) end
    if who == SETTLING then return {0, expiry - now, 1} end
    return {0, expiry - now}
  end
  -- A waiter joins the waiters at the tail, or, already there, pushes its
  -- deadline forward (a sign of life): ZADD answers 1 only for a new member.
  -- A release wakes the longest-waiting live one (reentrant_release.lua).
  local w = absent
  local created = false
  if redis.call('ZADD', KEYS[3], int(now + wait), waiter) == 1 then
    -- A new member may have made either key, which then has no TTL yet: the
    -- list, if it is the only element (and then the zset, whose members are
    -- all in the list, was empty too); the zset, if it is its only member
    -- (the list held only tombstones).
    created = redis.call('RPUSH', KEYS[2], waiter) == 1 or redis.call('ZCARD', KEYS[3]) == 1
  end
  -- h bounds every deadline; it is pushed SLACK_MS further than needed, so
  -- that most tries write nothing to the hold.
  if now + wait > tonumber(s.h or '0') then w.h = int(now + wait + SLACK_MS) end
  -- While the holder keeps a presence, the longest-waiting waiter whose
  -- client is there looks within the poll (at the grace's end once absence
  -- was seen), as a fair lock's head does; the others, at the hold's
  -- expiry. Waiters ahead of it whose clients are gone are passed over
  -- (first_present_waiter): one that died would never look. A reply's time
  -- never passes the expiry.
  local first = presence_channel(who) and first_present_waiter(s, KEYS[2], KEYS[3], now, waiter)
  if next(w) ~= nil or created or changed then commit(s, w, now, created, KEYS[2], KEYS[3]) end
  if first == waiter then return {0, look_at(who, expiry, now, w.pa or s.pa) - now} end
  return {0, expiry - now}
end

local w, answer = s, nil
if who == nil then
  -- Free, or the last hold's lease ran out: take it with a fresh token. It
  -- is not fair: a caller may take a free lock before the waiter a release
  -- woke, which then waits for the next wake-up. A waiter whose fallback
  -- timer found it free asks whether its wake-up was lost (a rescue): n
  -- names the waiter the last wake-up went to, until a token is issued.
  local woken = waiter ~= nil and s.n == waiter
  local freed = 0
  if ask == '1' and woken then freed = 1 end
  if woken then
    -- The waiter the last wake-up went to is the list's head: wake_waiter
    -- left it first, and nothing pops the list until a token is issued. It
    -- goes now, rather than as a tombstone for the next wake-up to pop.
    redis.call('LPOP', KEYS[2])
  end
  s.n = nil
  token = next_token(s, w, now_us)
  w.o, w.c, w.x = owner, '1', int(now + lease)
  answer = {1, token, freed}
else
  -- Re-entry by the same handle: count it; the lease may grow, never shrink.
  w.c, w.x = int(count + 1), int(math.max(expiry, now + lease))
  answer = {1, token, 0}
end
-- A waiter that got the lock leaves the waiters: its deadline goes, and its
-- list element (unless it went above) stays as a tombstone until a
-- wake-up's cleanup reaches it. With no waiter live (h passed) its deadline,
-- if it has one, has passed too, and wakes nobody: no call.
if waiter and may_have_waiters(s, w, now) then redis.call('ZREM', KEYS[3], waiter) end
-- With no deadline left (a dead waiter's counts), no waiter can be live:
-- h goes, as a fair lock's does once its queue is empty, so that the hold
-- is written in the ordered form and the next pair takes the uncontended
-- path at once, not a wait timeout after the last waiter left. Tombstones
-- left in the list wake nobody.
if may_have_waiters(s, w, now) and redis.call('ZCARD', KEYS[3]) == 0 then s.h = nil end
w.q, s.a = req, nil
commit(s, w, now, false, KEYS[2], KEYS[3])
return answer
