-- reentrant_acquire.lua: one attempt to take or re-enter a reentrant lock.
-- KEYS[1] the hold (see hold.lua).
-- ARGV[1] owner id, ARGV[2] request id, ARGV[3] lease in ms, ARGV[4] the
-- token of a hold this handle gave up for lost ("0": none), ARGV[5]
-- (optional) "1": say whether a free lock was released (freed).
-- Returns {1, token, freed} when held (freed: 1 if asked and the lock
-- was free because its last hold's owner released it, which published a
-- wake-up; 0 if that hold's lease ran out, for a re-entry, or not asked),
-- {0, ms until the current hold expires}.
local owner, req, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
local s = load()
local bad = layout_error(s)
if bad then return bad end

-- A retry of a request that already ran (go-redis retries after timeouts)
-- gets the first run's answer: a re-entry or a token is never applied twice.
if s.q == req then return acquired_answer(s) end

local now, now_us = clock()
local who, count, expiry, token = holder(s, now)
if who == owner and token == tonumber(ARGV[4]) then
  -- A hold this handle gave up for lost (its lease ran out as the client
  -- counts it, a margin before Redis's): end it, as its release would have,
  -- rather than count this call as a re-entry of it.
  clear_hold(s)
  who = nil
end
local w, answer = {}, nil
if who == nil then
  -- Free, or the last hold's lease ran out: take it with a fresh token. A
  -- waiter whose fallback timer found it free asks whether its wake-up was
  -- lost (a rescue): only a release sends one. Nobody else pays for that.
  local freed = 0
  if ARGV[5] == '1' and s.f and released_hold(s, tonumber(s.f)) then freed = 1 end
  token = next_token(s, w, now_us)
  w.o, w.c, w.x = owner, '1', int(now + lease)
  answer = {1, token, freed}
elseif who == owner then
  -- Re-entry by the same handle: count it; the lease may grow, never shrink.
  w.c, w.x = int(count + 1), int(math.max(expiry, now + lease))
  answer = {1, token, 0}
else
  -- Held by another handle: tell the caller how long the hold can last.
  return {0, expiry - now}
end
w.q, s.a = req, nil
commit(s, w, now, false)
return answer
