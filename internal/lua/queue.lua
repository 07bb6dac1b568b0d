-- queue.lua: the fair queue. A queue is three keys, made by queue_keys:
-- the hold, the list of entries in join order, and the zset of their
-- deadlines. A fair lock's are KEYS[1..3]; a semaphore's gate's KEYS[2..4].

-- The keys of one fair queue.
local function queue_keys(hold, list, deadlines)
  return {hold = hold, list = list, deadlines = deadlines}
end

-- Fair lock: a waiter's deadline was pushed to d; keep h the latest one.
local function horizon(s, w, d)
  if d > tonumber(w.h or s.h or '0') then w.h = int(d) end
end

-- Fair lock: can any waiter be live? Every deadline ever written is at most
-- h, so once h has passed (or no one ever queued) the queue holds only the
-- dead, and the lookups of live_head can be skipped: the common uncontended
-- call never touches the queue keys.
local function may_have_waiters(s, w, now)
  return tonumber(w.h or s.h or '0') > now
end

-- Presence (docs/presence.md). A client made with fairlock.WithPresence
-- keeps one pub/sub subscription on PRESENCE_PREFIX .. its client id for as
-- long as it may hold anything, and its client id ends in '~'. Redis drops
-- that subscription when the client's process dies and the kernel closes
-- its socket; a process that lives ends all its holds itself the moment
-- the connection breaks. So a fair lock held by such a client whose
-- subscription has been gone for PRESENCE_GRACE_MS is ended by the next
-- waiter's attempt, as a lease that ran out would be. Absence is counted
-- from the first attempt that saw it (pa in the hold); an attempt that sees
-- the subscription again forgets it. The head of a held lock looks again
-- every PRESENCE_POLL_MS while the holder keeps a presence (look_at).
local PRESENCE_PREFIX = 'fairlock:presence:'
local PRESENCE_GRACE_MS = 200
local PRESENCE_POLL_MS = 50

-- The presence channel of the client of hold id holder, or nil if that
-- client keeps none (its id does not end in '~').
local function presence_channel(holder)
  local client = string.match(holder or '', '^[^.]*')
  if string.byte(client, -1) ~= 126 then return nil end
  return PRESENCE_PREFIX .. client
end

-- Fair lock: is the holder of s, held now, still to be counted on? False
-- once its client's presence has been gone for PRESENCE_GRACE_MS: the caller
-- then ends the hold. Records (w.pa) or forgets (s.pa) when absence was
-- first seen. One PUBSUB NUMSUB, only for a holder that keeps a presence.
local function holder_present(s, w, now)
  local ch = presence_channel(s.o)
  if ch == nil then return true end
  if redis.call('PUBSUB', 'NUMSUB', ch)[2] > 0 then
    if s.pa then
      s.pa = nil
      changed = true
    end
    return true
  end
  local since = tonumber(s.pa or '')
  if since == nil then
    w.pa = int(now)
    return true
  end
  return now - since < PRESENCE_GRACE_MS
end

-- Fair lock: when the head of a lock held by holder until expiry (Redis
-- ms) should look again: at the expiry, or, while the holder keeps a
-- presence, within PRESENCE_POLL_MS (at the end of the grace once absence
-- was seen: since, the hold's pa).
local function look_at(holder, expiry, now, since)
  if presence_channel(holder) == nil then return expiry end
  local at = now + PRESENCE_POLL_MS
  if since then at = math.max(tonumber(since) + PRESENCE_GRACE_MS, now + 1) end
  return math.min(expiry, at)
end

-- Fair lock, step 1 (queue cleanup): drop tombstones and waiters whose
-- deadline passed from the head of q, until the head is a live waiter. Each
-- entry is popped once in its life, so this is O(1) amortised per entry.
-- Returns the live head's entry id (nil if none), whether anything was
-- popped, and the live head's queue element and deadline. Every script that ends a head's turn pops it at once (with the
-- tombstones behind it), so the front of the list is the live head that was
-- told it is head, and a pop here means the head changed: it died.
local function live_head(q, now)
  local popped = false
  while true do
    local element = redis.call('LINDEX', q.list, 0)
    if not element then return nil, popped end
    local head = element_entry(element)
    local score = redis.call('ZSCORE', q.deadlines, head)
    local deadline = tonumber(score or '0')
    if deadline > now then return head, popped, element, deadline end
    redis.call('LPOP', q.list)
    if score then redis.call('ZREM', q.deadlines, head) end
    popped = true
  end
end

-- Fair lock, the head notice (head_notice in wire.lua): the waiter that just
-- became the live head while the lock is held learns when that hold expires,
-- so that it tries again the moment a lease runs out (a fixed lease, a
-- holder that died, a grant never claimed). Nobody else would wake it then:
-- a lease that runs out sends no message. One message per change of head.
-- The expiry is absolute, so a notice read late still wakes its waiter on
-- time (the waiter knows Redis's clock from its last reply).
local function tell_head(head, expiry, publish, channel)
  publish_notes(publish, channel, {head_notice(head, expiry)})
end

-- Fair lock, direct hand-off: grant the lock to the live head of q and
-- publish the grant to that waiter's client alone (handoff_note, with the
-- grant's Redis time, in its inbox: publish_notes): the waiter needs no
-- further round trip, and counts its lease from the grant. The head notice
-- for the waiter behind it goes with it: in the same message when both
-- waiters are of one client, else in one more, to the other's inbox. Until
-- the grantee claims it, the grant lasts no longer than the waiter's own
-- queue deadline: a grant to a waiter that died ends when its eviction
-- would have, and the next head, told of that end, takes the lock then.
-- Callers use it when the lock is free (expired, given back) or is being
-- freed by this very call (the last release, ForceUnlock): the new hold's
-- fields in w replace whatever hold s still records, which those callers
-- rely on.
-- Writes go to w (saved by the caller). Returns the grantee's entry, or nil.
local function hand_off(s, w, q, now, now_us, publish, channel)
  if not may_have_waiters(s, w, now) then return nil end
  -- Step 1 and the grant in one pass: pop until a live entry is popped.
  -- An element that fairlock did not write is dropped like a dead entry.
  local element, head, deadline, lease, label
  repeat
    element = redis.call('LPOP', q.list)
    if not element then return nil end
    head = element_entry(element)
    local score = redis.call('ZSCORE', q.deadlines, head)
    deadline = tonumber(score or '0')
    if score then redis.call('ZREM', q.deadlines, head) end
    lease, label = element_lease(element)
  until deadline > now and lease
  local _, token = next_token(s, w, now_us)
  local expiry = math.min(now + lease, deadline)
  w.o, w.c, w.x = entry_owner(head), '1', int(expiry)
  w.e, w.g, w.b = head, int(now), label
  -- On a semaphore's gate, what the new holder waits for (none elsewhere).
  local po, pn, pl = element_request(element)
  s.po, s.pn, s.pl = po, pn and int(pn), pl and int(pl)
  -- In an election, the new leader's value (none elsewhere).
  s.l = element_value(element)
  local message = {handoff_note(head, token, now)}
  local next_head = live_head(q, now)
  if next_head then message[2] = head_notice(next_head, look_at(w.o, expiry, now)) end
  publish_notes(publish, channel, message)
  return head
end

-- Reentrant lock: the lock was just freed (a release, ForceUnlock, or the
-- leave of the waiter the last wake-up went to); wake its longest-waiting
-- live waiter (KEYS[2..3]), dropping the dead and the tombstones ahead of
-- it. One note (freed_note) goes to that waiter's client's inbox, never to
-- every client, and n names the waiter (reentrant_acquire.lua's freed). The
-- woken waiter stays first until it takes the lock: a caller that takes
-- the free lock before it does not cost it its place. Nothing is read when
-- no waiter can be live. Writes go to w (saved by the caller).
local function wake_waiter(s, w, now, publish, channel)
  if not may_have_waiters(s, w, now) then return end
  local head = live_head(queue_keys(KEYS[1], KEYS[2], KEYS[3]), now)
  if head == nil then return end
  publish_notes(publish, channel, {freed_note(head)})
  w.n = head
end

-- A read-only snapshot of the fair queue q and its hold s (Inspect): dead
-- and given-up entries are reported, not removed. Returns {now ms, holder,
-- count, ms left, token, label, granted entry, the holder's permit request,
-- "<owner> <n> <lease>" (a semaphore's gate; "" elsewhere), then per list
-- element: entry, deadline ms or -1, the element after its entry id,
-- "<lease>|<wait>|<request>|<label>"}.
local function inspect_queue(q, s, now)
  local who, count, expiry, token = holder(s, now)
  local out = {now, who or '', count or 0, who and (expiry - now) or 0, token or 0,
    (who and s.b) or '', (who and s.e) or '', (who and request_text(s.po, s.pn, s.pl)) or ''}
  for _, el in ipairs(redis.call('LRANGE', q.list, 0, -1)) do
    local entry, info = element_entry(el), element_info(el)
    out[#out + 1] = entry
    out[#out + 1] = tonumber(redis.call('ZSCORE', q.deadlines, entry) or '-1')
    out[#out + 1] = info
  end
  return out
end
