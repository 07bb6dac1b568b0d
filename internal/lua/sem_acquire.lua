-- sem_acquire.lua: one attempt to take permits of a fair semaphore for one
-- permit hold (its own owner id, used once).
-- KEYS[1] the permits, KEYS[2..4] the gate: hold, queue, deadlines (hold.lua).
-- ARGV[1] owner id of the permit hold, ARGV[2] permits asked for (n),
-- ARGV[3] lease ms, ARGV[4] the number of permits the caller's handle was made
-- with (used only when the semaphore has none recorded), ARGV[5] mode,
-- ARGV[6] the gate's owner id and ARGV[7] its token (mode "gate"),
-- ARGV[8] label, ARGV[9] publish command, ARGV[10] channel (the gate's).
-- Modes: "try" takes the permits only if nobody waits (the gate is free and
-- its queue has no live waiter): a newcomer never passes a waiter, even when
-- enough permits are free. "gate" is the gate's holder, the first waiter:
-- when it is granted, so is every waiter behind it whose request fits (serve
-- in permits.lua). "check" only asks whether the permits were served to the
-- caller while it waited (its entry left the gate's queue).
-- Returns
--   {1, 1, token, g, expiry, now}  held: g is 0 for a grant to this call,
--                                 else the Redis ms the permits were served to
--                                 the caller as it waited (a hand-off, not
--                                 yet claimed, that lasts until expiry). A
--                                 retry gets the same answer: owner ids are
--                                 used once, so the hold itself tells it.
--   {0, next expiry, K, used, now} not now: when the first permit hold
--                                 expires (Redis ms, 0 if none; for the
--                                 gate's holder, sooner while a permit
--                                 holder keeps a presence), the number
--                                 of permits, those in use, Redis's clock
--   {-1}                          mode "gate": the caller no longer holds
--                                 the gate (its lease ran out)
--   {-2, K}                       n is more than the semaphore has
--   {-3}                          mode "check": nothing was served to it
local GATE = queue_keys(KEYS[2], KEYS[3], KEYS[4])
local owner, n, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
caller = owner -- absences count only where its session is (queue.lua)
local mode, label = ARGV[5], ARGV[8]
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now, now_us = clock()
local w = {}

-- Step 1, cleanup: permit holds that ran out give their permits back.
local holds, used, earliest = permit_holds(s, w, now)

-- Step 2, retry safety, and permits served while the caller waited: this
-- owner already holds its permits.
local mine = holds[owner]
if mine then
  save_changes(s, w)
  return {1, 1, mine.token, mine.g, mine.x, now}
end
if mode == 'check' then
  save_changes(s, w)
  return {-3}
end

-- Step 3, the number of permits: the semaphore's own, or, for a new one,
-- the caller's.
local k = tonumber(s.m or '')
if k == nil then
  k = tonumber(ARGV[4])
  w.m = int(k)
end
if n > k then
  save_changes(s, w)
  return {-2, k}
end

-- Still step 3: a semaphore whose permits are missing on a server that
-- lost its data waits for it to settle (hold.lua): every permit is held by
-- nobody's until then.
if missing then
  local settle = settling(now)
  if settle then
    grant_permit(s, w, SETTLING, k, settle, 0, now_us, '')
    commit(s, w, now, false)
    return {0, settle, k, k, now, 1}
  end
end

-- Step 4, order: only the first waiter (the gate's holder) may take
-- permits while anyone waits.
local gate = load(GATE.hold)
bad = layout_error(gate, GATE.hold)
if bad then return bad end
if mode == 'gate' then
  local who, _, _, token = holder(gate, now)
  if who ~= ARGV[6] or token ~= tonumber(ARGV[7]) then
    save_changes(s, w)
    return {-1}
  end
elseif holder(gate, now) or (may_have_waiters(gate, {}, now) and live_head(GATE, now)) then
  save_changes(s, w)
  return {0, earliest or 0, k, used, now}
end

-- Still step 4: the first waiter ends the permit holds of clients whose
-- presence is gone (permits.lua), and looks again within the poll while a
-- holder keeps one.
local look = nil
if mode == 'gate' then used, look = present_permits(s, w, holds, used, now) end

-- Step 5, take the permits if enough are free; else the caller waits (the
-- release that frees them serves the gate's holder, which also retries when
-- the first hold expires).
if used + n > k then
  save_changes(s, w)
  if look and (earliest == nil or look < earliest) then earliest = look end
  return {0, earliest or 0, k, used, now}
end
local expiry = now + lease
local token = grant_permit(s, w, owner, n, expiry, 0, now_us, label)

-- Step 6, the first waiter served: so is the run behind it that fits, with
-- one message.
if mode == 'gate' then
  serve(s, w, GATE, used + n, k, now, now_us, ARGV[9], ARGV[10], true)
end
commit(s, w, now, false)
return {1, 1, token, 0, expiry, now}
