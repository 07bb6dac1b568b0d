-- fair_acquire.lua: one attempt of a fair-lock waiter, the seven steps of the
-- fair queue, numbered as docs/queue-semantics.md numbers them; they run in
-- that order, but for the hand-off (5), tried before the caller's own
-- acquisition (4), since passing over the dead may leave nobody ahead.
-- KEYS[1..3]: hold, queue, deadlines (see hold.lua).
-- ARGV[1] owner id, ARGV[2] request id, ARGV[3] lease ms, ARGV[4] label;
-- ARGV[5] the rest, which only the general path reads, in one word (each
-- word of a call costs Redis time: transport.FairAcquire):
-- "<entry> <wait> <mode> <stale> <publish> <channel>": the entry id (fresh
-- for every join), the wait timeout ms, the mode, the token of this hold
-- id's latest hold that ended, lost or released ("0": none), or -1 when
-- the hold id holds nothing (not a re-entry: step 1), the publish command
-- and the channel (last: a lock's name may hold spaces); on a semaphore's
-- gate only, what the waiter asks for: ARGV[6] the owner id of its permit
-- hold, ARGV[7] the permits, ARGV[8] their lease ms (kept in its queue
-- element, and in the gate's hold while it holds the gate: po, pn, pl); in
-- an election only, ARGV[9] the candidate's value, escaped (ARGV[6..8] are
-- then "", 0, 0): kept in its queue element, and in the hold while it
-- leads (l).
-- Modes: "try" never queues (TryLock with no wait); "join" queues the entry if
-- it cannot take the lock; "queued" is a waiter that believes it is queued: if
-- its entry is gone it is told so and does not re-join by itself.
-- ARGV[4], the label, is JSON-escaped (transport.FairAcquire): the hold keeps it
-- inside its JSON text (hold.lua).
-- Returns
--   token             held: a fresh acquisition of a free lock nobody
--                            waits for (take_free)
--   {1, token, 0}     held: a fresh acquisition or a re-entry
--   {1, token, 1, g}  held: handed to this entry at Redis time g (ms),
--                            not yet claimed
--   {0, hold ms, head, now[, queue[, settling]]}  waiting: ms until the
--                            current hold expires (until the caller should
--                            look again), 1 if the caller's entry is the live
--                            head, or the first behind it whose client is
--                            there while the head's is gone (present_head),
--                            Redis's clock in ms (head notices give absolute
--                            expiries), then for a join the queue's length;
--                            a try that finds the lock held stops at now,
--                            unless what holds it is a server that lost its
--                            data and settles (hold.lua's settling): then
--                            0 and 1
--   {-1}                     the entry was evicted (deadline passed) or removed
local owner, req, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])

-- The uncontended path (hold.lua's take_free): a free lock that no waiter
-- can be live for, neither an election's (KEYS[1] fairlock:e:..., whose
-- tenth byte is 101, "e"; watch_leader below) nor a semaphore gate's whose
-- waiter asks for permits (ARGV[6]), is taken on the hold's text. Step 4
-- below would take it the same way.
local raw, now, now_us = redis.pcall('GET', KEYS[1]), nil, nil
if type(raw) == 'string' and string.byte(KEYS[1], 10) ~= 101 and (ARGV[6] == nil or ARGV[6] == '') then
  local token
  token, now, now_us = take_free(raw, owner, req, lease, ARGV[4])
  if token then return token end
end

local po, pn, pl, value = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
if po == '' then po, pn, pl = nil, nil, nil end -- an election's candidate asks for no permits
local entry, wait, mode, stale, publish, channel = string.match(ARGV[5] or '', '^(%S+) (%d+) (%l+) (%-?%d+) (%u+) (.+)$')
if not channel then return redis.error_reply('fairlock: fair_acquire: malformed ARGV[5]: ' .. tostring(ARGV[5])) end
wait, stale = tonumber(wait), tonumber(stale)
watch_leader(publish, channel)
caller = owner -- absences count only where its session is (queue.lua)
local decoded, label = pcall(cjson.decode, '"' .. ARGV[4] .. '"')
if not decoded or type(label) ~= 'string' then label = ARGV[4] end
local s = load(nil, raw)
local bad = layout_error(s)
if bad then return bad end

-- A retry of a request that already ran gets the first run's answer.
if s.q == req then return acquired_answer(s, entry) end

if now == nil then now, now_us = clock() end
-- A lock whose hold is missing on a server that lost its data waits for it
-- to settle (hold.lua): it is held by nobody's (SETTLING) until then, a
-- hold with a token of its own, saved with this call's writes, so that
-- every call meanwhile finds it held. No election announces it.
local settle = nil
if missing then
  settle = settling(now)
  if settle then
    announce = nil
    next_token(s, s, now_us)
    s.o, s.c, s.x = SETTLING, '1', int(settle)
    changed = true
  end
end

local Q = queue_keys(KEYS[1], KEYS[2], KEYS[3])
local w = {}
local function answer(t)
  w.q, s.a = req, nil
  commit(s, w, now, false, Q.list, Q.deadlines)
  return t
end

-- Step 1, queue cleanup: pop given-up and dead waiters off the head (when
-- there can be a live one at all), those whose client's presence has been
-- gone for the grace included. popped: the live head changed. first, from:
-- while the head's client is gone (for less than the grace), the first
-- entry whose client is there, and when those ahead of it may be passed
-- over (present_head).
local head, popped, first, from = nil, false, nil, nil
local function cleanup()
  local _, _
  head, popped, _, _, first, from = present_head(s, Q, now)
end
if may_have_waiters(s, w, now) then
  cleanup()
  -- An empty queue (live_head found no element): no waiter can be live,
  -- whatever deadline was written last. The horizon goes with them (a join
  -- below writes its own), so that the hold is written in the ordered form
  -- and the next uncontended pair takes its path (hold.lua's take_free) at
  -- once, not a wait timeout after the last waiter left.
  if head == nil then
    s.h = nil
    changed = true
  end
end

local who, count, expiry, token = holder(s, now)
if who == owner and s.e ~= entry and (stale < 0 or token <= stale) then
  -- Still step 1: a stale hold of this hold id, one that is not this
  -- call's: any but a hand-off to this call's entry when the call is not a
  -- re-entry (stale < 0: the hold id holds nothing on the client), else
  -- one whose token is no greater than that of the hold id's latest hold
  -- that ended on the client (tokens rise; a hold id holds one hold at a
  -- time). Such a hold was given up for lost (its lease ran out as the
  -- client counts it, a margin before Redis's), or a failover undid its
  -- release (it reached the old master, or the promoted replica had not got
  -- it), or a promoted replica handed the lock to an earlier entry of the
  -- hold id that the client had left. End it, as its release would have
  -- (the lock goes to the live head below), rather than count this call as
  -- a re-entry of it: that count would never be released.
  clear_hold(s)
  who = nil
end
if who and who ~= owner and not holder_present(s, w, now) then
  -- Still step 1: the holder's client kept a presence, and it has been gone
  -- for the grace (its process died: queue.lua, docs/presence.md): end the
  -- hold, as the end of its lease would have.
  clear_hold(s)
  who = nil
end
if who == owner then
  if s.e == entry then
    -- Step 2, this waiter's turn came by hand-off while it was away (its
    -- message may have been lost): the hold is its own, waiting for its claim.
    return answer({1, token, 1, tonumber(s.g)})
  end
  -- Step 3, re-entry: the handle already holds the lock (another goroutine of
  -- the same handle took it). Count it, and drop this call's queue entry.
  w.c, w.x = int(count + 1), int(math.max(expiry, now + lease))
  if mode ~= 'try' then
    redis.call('ZREM', Q.deadlines, entry)
    -- If it was the head, its tombstone goes now.
    if head == entry then cleanup() end
  end
  if popped and head then
    -- The head changed while the lock stays held: tell the new one.
    tell_heads(head, first, from, look_at(owner, tonumber(w.x), now), publish, channel)
  end
  return answer({1, token, 0})
end

local handed = false
if who == nil and head and head ~= entry then
  -- Step 5, hand-off: free, but a live waiter is first (the last hold
  -- expired, or the head just became first): it gets the lock, and its
  -- wake-up, now. The hand-off may pass over waiters whose client is gone
  -- and reach the caller's own entry: its reply says so (its message, sent
  -- too, finds the wait over); if it passed over everyone, the caller takes
  -- the lock below, as nobody live is ahead of it.
  local granted = hand_off(s, w, Q, now, now_us, publish, channel)
  if granted == entry then return answer({1, tonumber(w.f), 1, now}) end
  if granted then
    handed = true
    cleanup()
    expiry = tonumber(w.x)
  else
    head = nil
  end
end
if who == nil and not handed then
  -- Step 4, acquire: the lock is free and nobody live is ahead of the caller.
  w.e, w.g, s.e, s.g = nil, nil, nil, nil
  token = next_token(s, w, now_us)
  w.o, w.c, w.x, w.b = owner, '1', int(now + lease), label
  s.po, s.pn, s.pl, s.l = po, pn, pl, value
  if head == entry then
    -- The head took the lock itself (the last hold's lease ran out): the
    -- waiter behind it is head now, and must hear when this lease ends.
    redis.call('LPOP', Q.list)
    redis.call('ZREM', Q.deadlines, entry)
    cleanup()
    if head then tell_heads(head, first, from, look_at(owner, now + lease, now), publish, channel) end
  end
  return answer({1, token, 0})
elseif who and popped and head then
  -- Held by another, and cleanup removed the head (dead past its deadline,
  -- or its client gone): the new head must hear when the hold ends. The
  -- caller learns from its reply.
  tell_heads(head, first, from, look_at(who, expiry, now, w.pa or s.pa), publish, channel, entry)
end

-- Step 6, the caller waits. "try" never queues: no barging past waiters.
if mode == 'try' then
  if changed or next(w) ~= nil then
    commit(s, w, now, false, Q.list, Q.deadlines)
  end
  -- A try that met a settling server is told so (the sixth field): it may
  -- wait the pause out, where one that met a holder may not.
  if who == SETTLING then return {0, expiry - now, 0, now, 0, 1} end
  return {0, expiry - now, 0, now}
end
-- A join's entry id is fresh, so its first run adds it: ZADD NX answers 1,
-- one call where a look-up and an add were two. A retried join finds its
-- entry there (0), and is handled, as a waiter that believes it is queued
-- is, by its deadline.
local added = mode == 'join' and redis.call('ZADD', Q.deadlines, 'NX', int(now + wait), entry) == 1
local deadline = nil
if not added then deadline = redis.call('ZSCORE', Q.deadlines, entry) end
local created = false
if added then
  -- Step 7, enqueue at the tail with the caller's own deadline (its own wait
  -- timeout, so waiters with different timeouts never disturb each other).
  redis.call('RPUSH', Q.list, element(entry, lease, wait, element_request_text(po, pn, pl, value), label))
  -- A queue key this call created has no TTL yet. With a live head ahead,
  -- both keys already existed (that head is in both), and every write that
  -- could create them set their TTL; with none, they may be new.
  created = head == nil
  -- Cleanup was skipped if no waiter could be live; dead entries may still
  -- be ahead of this one. Behind a head whose client is gone, the scan may
  -- not have found a present entry before this one was added.
  if head == nil or (first == nil and from ~= nil) then cleanup() end
elseif deadline and tonumber(deadline) > now then
  -- Already queued: being here is a sign of life, so refresh the deadline.
  redis.call('ZADD', Q.deadlines, 'XX', int(now + wait), entry)
else
  -- The entry's deadline passed (it fell silent too long), or it was removed:
  -- it lost its place. Its list element stays as a tombstone.
  redis.call('ZREM', Q.deadlines, entry)
  if next(w) ~= nil then
    commit(s, w, now, false, Q.list, Q.deadlines)
  end
  return {-1}
end
horizon(s, w, now + wait)
commit(s, w, now, created, Q.list, Q.deadlines)
-- The queue's length, this waiter included, for the caller's observer:
-- every entry with a deadline (one past its deadline goes at the next
-- cleanup that reaches it).
-- The head of a lock whose holder keeps a presence looks again sooner than
-- the expiry (look_at). The first waiter whose client is there, behind a
-- head whose client is gone, is told it is head too: it looks once those
-- ahead of it may be passed over.
local look = look_at(w.o or s.o, expiry, now, w.pa or s.pa)
local told = 0
if head == entry then
  told = 1
elseif first == entry then
  told, look = 1, math.max(look, from)
end
return {0, look - now, told, now, redis.call('ZCARD', Q.deadlines)}
