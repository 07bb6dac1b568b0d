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

-- Fair lock: can any waiter be live? Every deadline of a queued entry is at
-- most h (written with each, dropped only with an empty queue:
-- fair_acquire.lua), so once h has passed (or no one ever queued) the queue
-- holds only the dead, and the lookups of live_head can be skipped: the
-- common uncontended call never touches the queue keys.
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

-- Failovers (docs/presence.md, "Failovers"). A script counts an absence
-- only where the caller's own session is seen. After a failover the new
-- master has the locks and none of the sessions until they follow it: a
-- caller whose own session is not here cannot tell a client that died from
-- one whose session is still on the old master, and counts nobody gone.
-- caller is the caller's owner (or client) id, set by each script that
-- has one; nil (an operator's call) and a client that keeps no presence
-- count absences as before. caller_here keeps the answer of its one
-- PUBSUB NUMSUB, asked at the first absence a call finds. Both are
-- per-call state (lua.go resets them by name).
local caller, caller_here = nil, nil

-- Whether an absence found by this call counts (see above).
local function absence_counts()
  if caller_here == nil then
    local ch = presence_channel(caller)
    caller_here = ch == nil or redis.call('PUBSUB', 'NUMSUB', ch)[2] > 0
  end
  return caller_here
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
  if not absence_counts() then return true end
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

-- Waiters' presence (docs/presence.md). A queued entry of a client that
-- keeps a presence is passed over once that presence has been gone for
-- PRESENCE_GRACE_MS: its process died, and it would never claim a grant.
-- As for a holder, absence is counted from the first look that found it
-- gone, per client (s.wa: client id -> Redis ms), and forgotten by the
-- first look that finds the client back; a record older than
-- ABSENCE_KEPT_MS is counted afresh. A client that is merely slow (paused,
-- cut off) keeps its connections, so its presence, and the wait timeout's
-- rule. Looks are bounded: present_head reads at most PRESENCE_SCAN
-- entries behind an absent head.
local ABSENCE_KEPT_MS = 60000
local PRESENCE_SCAN = 8

-- When the presence of the client of queue entry e was first found gone
-- (Redis ms), or nil while it is there or if the client keeps none. One
-- PUBSUB NUMSUB, only for a client that keeps a presence. Records and
-- forgets in s.wa (changed: the caller saves).
local function waiter_absent_since(s, e, now)
  local owner = entry_owner(e) or ''
  local ch = presence_channel(owner)
  if ch == nil then return nil end
  local client = string.match(owner, '^[^.]*')
  local wa = s.wa
  if redis.call('PUBSUB', 'NUMSUB', ch)[2] > 0 then
    if wa and wa[client] then
      wa[client] = nil
      if next(wa) == nil then s.wa = nil end
      changed = true
    end
    return nil
  end
  if not absence_counts() then return nil end
  local since = wa and tonumber(wa[client] or '')
  if since == nil or now - since > ABSENCE_KEPT_MS then
    since = now
    wa = wa or {}
    -- Records of clients nobody looked at for long go with this write.
    for c, t in pairs(wa) do
      if now - tonumber(t) > ABSENCE_KEPT_MS then wa[c] = nil end
    end
    wa[client] = int(now)
    s.wa = wa
    changed = true
  end
  return since
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

-- Fair lock, step 1 with presence: live_head, then the head is passed
-- over (popped, as a dead one is) while its client's presence has been gone
-- for the grace. Returns what live_head does, then first and from. While
-- the head's client is there (or keeps no presence), first is the head and
-- from nil. While it has been gone for less than the grace, from is when
-- every absent entry ahead of first may be passed over, and first is the
-- first entry behind the head, within PRESENCE_SCAN, whose client is there
-- (nil if none): it is told to look then, since the head may never (a head
-- that died with the holder). An entry found on the way gone for the grace
-- loses its deadline (a tombstone, popped when it reaches the front).
local function present_head(s, q, now)
  local popped = false
  while true do
    local head, p, element, deadline = live_head(q, now)
    popped = popped or p
    if head == nil then return nil, popped end
    local since = waiter_absent_since(s, head, now)
    if since == nil then return head, popped, element, deadline, head, nil end
    if now - since < PRESENCE_GRACE_MS then
      local from = since + PRESENCE_GRACE_MS
      for _, el in ipairs(redis.call('LRANGE', q.list, 1, PRESENCE_SCAN)) do
        local e = element_entry(el)
        if tonumber(redis.call('ZSCORE', q.deadlines, e) or '0') > now then
          local gone = waiter_absent_since(s, e, now)
          if gone == nil then return head, popped, element, deadline, e, from end
          if now - gone >= PRESENCE_GRACE_MS then
            redis.call('ZREM', q.deadlines, e)
          elseif gone + PRESENCE_GRACE_MS > from then
            from = gone + PRESENCE_GRACE_MS
          end
        end
      end
      return head, popped, element, deadline, nil, from
    end
    redis.call('LPOP', q.list)
    redis.call('ZREM', q.deadlines, head)
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
-- The head is one that present_head found (first, from: what it returned
-- with it): when the head's client is gone, the first entry behind it whose
-- client is there is told too, to look once those ahead of it may be passed
-- over (and no sooner than the head). skip: an entry that learns from its
-- own reply, told nothing here.
local function tell_heads(head, first, from, expiry, publish, channel, skip)
  local list = {}
  if head ~= skip then list[1] = head_notice(head, expiry) end
  if first and first ~= head and first ~= skip then
    list[#list + 1] = head_notice(first, math.max(expiry, from))
  end
  if #list > 0 then publish_notes(publish, channel, list) end
end

-- Fair lock, direct hand-off: grant the lock to the live head of q (passing
-- over those whose client's presence has been gone for the grace) and
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
-- Writes go to w (saved by the caller; absences it records or forgets go
-- to s.wa, which the caller's save keeps). Returns the grantee's entry, or
-- nil.
local function hand_off(s, w, q, now, now_us, publish, channel)
  if not may_have_waiters(s, w, now) then return nil end
  -- Step 1 and the grant in one pass: pop until a live entry is popped.
  -- An element that fairlock did not write is dropped like a dead entry.
  -- A live entry whose client's presence has been gone for the grace is
  -- passed over; one gone for less is granted, its absence counted from
  -- when it was first found gone (pa), so that the waiter told below ends
  -- the grant at the grace's end if the client does not come back.
  local element, head, deadline, lease, label, since
  repeat
    element = redis.call('LPOP', q.list)
    if not element then return nil end
    head = element_entry(element)
    local score = redis.call('ZSCORE', q.deadlines, head)
    deadline = tonumber(score or '0')
    if score then redis.call('ZREM', q.deadlines, head) end
    lease, label = element_lease(element)
    since = nil
    if deadline > now and lease then
      since = waiter_absent_since(s, head, now)
      if since and now - since >= PRESENCE_GRACE_MS then lease = nil end
    end
  until deadline > now and lease
  local _, token = next_token(s, w, now_us)
  local expiry = math.min(now + lease, deadline)
  w.o, w.c, w.x = entry_owner(head), '1', int(expiry)
  w.e, w.g, w.b = head, int(now), label
  if since then w.pa = int(since) end
  -- On a semaphore's gate, what the new holder waits for (none elsewhere).
  local po, pn, pl = element_request(element)
  s.po, s.pn, s.pl = po, pn and int(pn), pl and int(pl)
  -- In an election, the new leader's value (none elsewhere).
  s.l = element_value(element)
  local message = {handoff_note(head, token, now)}
  local next_head, _, _, _, first, from = present_head(s, q, now)
  if next_head then
    local at = look_at(w.o, expiry, now, w.pa)
    message[2] = head_notice(next_head, at)
    if first and first ~= next_head then message[3] = head_notice(first, math.max(at, from)) end
  end
  publish_notes(publish, channel, message)
  return head
end

-- Reentrant lock: the longest-waiting waiter that is live (its deadline
-- has not passed) and there (its client keeps no presence, or that presence
-- is seen; caller, which runs this very script, is there), among the first
-- PRESENCE_SCAN * 2 of the list, read without popping anything (the list's
-- head is the woken waiter's until a token is issued); nil if none. A
-- waiter whose client's presence has been gone for the grace loses its
-- deadline on the way (a tombstone, popped by a wake-up's cleanup).
-- Absences are recorded and forgotten in s.wa (changed: the caller saves).
local function first_present_waiter(s, list, deadlines, now, caller)
  for _, e in ipairs(redis.call('LRANGE', list, 0, PRESENCE_SCAN * 2 - 1)) do
    if tonumber(redis.call('ZSCORE', deadlines, e) or '0') > now then
      if e == caller then return e end -- there, and one NUMSUB less (absence_counts)
      local since = waiter_absent_since(s, e, now)
      if since == nil then return e end
      if now - since >= PRESENCE_GRACE_MS then redis.call('ZREM', deadlines, e) end
    end
  end
  return nil
end

-- Reentrant lock: the lock was just freed (a release, ForceUnlock, or the
-- leave of the waiter the last wake-up went to); wake its longest-waiting
-- live waiter (KEYS[2..3]), dropping the dead and the tombstones ahead of
-- it, and passing over those whose client's presence has been gone for the
-- grace (present_head). One note (freed_note) goes to that waiter's
-- client's inbox, never to every client, and n names the waiter
-- (reentrant_acquire.lua's freed). When that waiter's client's presence is
-- gone for less than the grace, the first waiter behind it whose client is
-- there is woken too (the lock is not fair: whichever tries first takes
-- it). The woken waiter stays first until it takes the lock: a caller that
-- takes the free lock before it does not cost it its place. Nothing is
-- read when no waiter can be live. Writes go to w (saved by the caller;
-- absences to s.wa). Returns the waiter n names, or nil.
local function wake_waiter(s, w, now, publish, channel)
  if not may_have_waiters(s, w, now) then return nil end
  local head, _, _, _, first = present_head(s, queue_keys(KEYS[1], KEYS[2], KEYS[3]), now)
  if head == nil then return nil end
  local list = {freed_note(head)}
  if first and first ~= head then list[2] = freed_note(first) end
  publish_notes(publish, channel, list)
  w.n = head
  return head
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
