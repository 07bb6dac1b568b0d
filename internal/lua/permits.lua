-- permits.lua: a fair semaphore's permits: the permit holds in one field
-- of its hold (p, records of wire.lua's permit_record), and the serving of
-- the waiters at the head of its gate's queue.

-- Semaphore: the permit holds in force. Records that ran out or that
-- fairlock did not write are dropped (changed is set, w.p written). Returns
-- the table of holds (owner -> {n, x, token, g, label}), the permits they
-- use, and the earliest expiry among them (nil if none). g is the grant time
-- of a hold served to a waiter and not yet claimed (Redis ms), 0 otherwise.
local function permit_holds(s, w, now)
  local holds, used, earliest = {}, 0, nil
  local p = s.p
  if type(p) ~= 'table' then p = {} end
  local kept, dropped = {}, type(s.p) ~= 'table' and s.p ~= nil
  for owner, rec in pairs(p) do
    local n, x, t, g, label = read_permit_record(rec)
    if n and x > now then
      holds[owner] = {n = n, x = x, token = t, g = g, label = label}
      kept[owner] = rec
      used = used + n
      if earliest == nil or x < earliest then earliest = x end
    else
      dropped = true
    end
  end
  if dropped then w.p = kept; changed = true end
  s.p = kept
  return holds, used, earliest
end

-- Semaphore, presence (queue.lua, docs/presence.md): the first waiter's
-- attempt ends the permit holds (holds, as permit_holds made it; used, the
-- permits they use) of clients that keep a presence and whose presence has
-- been gone for PRESENCE_GRACE_MS, counted from the first attempt that
-- found it gone (s.pa: permit owner -> Redis ms), as a lease end would.
-- Returns the permits still in use, and when the first waiter should look
-- again (nil if no permit holder keeps a presence). One PUBSUB NUMSUB per
-- permit hold of a client that keeps a presence.
local function present_permits(s, w, holds, used, now)
  local seen = s.pa
  if type(seen) ~= 'table' then seen = {} end
  local absent, look, gone = {}, nil, false
  for owner, h in pairs(holds) do
    local ch = presence_channel(owner)
    if ch then
      local at
      if redis.call('PUBSUB', 'NUMSUB', ch)[2] > 0 or not absence_counts() then
        at = now + PRESENCE_POLL_MS
      else
        local since = tonumber(seen[owner] or '') or now
        if now - since >= PRESENCE_GRACE_MS then
          s.p[owner], holds[owner], used, gone = nil, nil, used - h.n, true
        else
          absent[owner] = int(since)
          at = since + PRESENCE_GRACE_MS
        end
      end
      if at and (look == nil or at < look) then look = at end
    end
  end
  if next(absent) then
    s.pa, w.pa = absent, absent
  elseif s.pa ~= nil then
    s.pa = nil
    changed = true
  end
  if gone then
    w.p = s.p
    changed = true
  end
  return used, look
end

-- Semaphore: the permit hold of owner with token, in force; nil (with the
-- cleanup's changes saved) when it is gone.
local function own_permit(s, w, now, owner, token)
  local mine = permit_holds(s, w, now)[owner]
  if mine and mine.token == token then return mine end
  save_changes(s, w)
  return nil
end

-- Semaphore: a new permit hold of owner, n permits until expiry; g as in
-- permit_record (wire.lua). Returns its token.
local function grant_permit(s, w, owner, n, expiry, g, now_us, label)
  local token = next_token(s, w, now_us)
  s.p[owner] = permit_record(n, expiry, token, g, label)
  w.p = s.p
  if expiry > tonumber(w.x or s.x or '0') then w.x = int(expiry) end
  return token
end

-- Semaphore, presence: a look at the gate's holder who (its hold g) and at
-- the permit holders, when a release served who its permits while who's
-- client was gone (serve), or a poll after one served it while it was
-- there (sem_watch.lua): waiters killed as the release ran looked alive to
-- it, and if the gate's head died too, no script would run until a live
-- waiter's heartbeat. The absences it finds are recorded (the permit
-- holders', s.pa; the gate holder's, pa; the gate's waiters', wa, by
-- present_head), nothing is ended (the first waiter ends them, and serves
-- what they free), and the gate's hold is saved here. Returns the notes to
-- publish: a new gate head, if the look passed the old one over, and the
-- first gate waiter whose client is there, behind a gate head whose
-- client is gone, told to look when they may all be ended; {} if none.
local function gone_look(s, w, g, gate, who, now)
  local latest, seen = nil, s.pa
  if type(seen) ~= 'table' then seen = {} end
  for owner in pairs(permit_holds(s, w, now)) do
    local ch = presence_channel(owner)
    if ch and redis.call('PUBSUB', 'NUMSUB', ch)[2] == 0 and absence_counts() then
      local since = tonumber(seen[owner] or '') or now
      seen[owner] = int(since)
      if latest == nil or since > latest then latest = since end
    end
  end
  if latest then s.pa, w.pa = seen, seen end
  local gw = {}
  holder_present(g, gw, now)
  if gw.pa then g.pa = gw.pa end
  local head, popped, _, _, first, from = present_head(g, gate, now)
  redis.call('SET', gate.hold, encode(g, gate.hold), 'KEEPTTL')
  local notes = {}
  local at = look_at(who, tonumber(g.x), now, g.pa)
  if head and popped then notes[1] = head_notice(head, at) end
  if head and first and first ~= head then
    local t = math.max(at, from)
    if latest then t = math.max(t, latest + PRESENCE_GRACE_MS) end
    notes[#notes + 1] = head_notice(first, t)
  end
  return notes
end

-- Semaphore: serve the waiters at the head, in order, as far as the free
-- permits go: the gate's holder, the first waiter (unless skip_holder: the
-- caller just served it), then the gate's queue from its live head. The
-- first request that does not fit stops it: nobody passes a waiter. Each
-- is granted its permits as a hand-off: until its owner claims it, the grant
-- lasts no longer than the waiter's place would have (the gate's hold, or the
-- entry's queue deadline), so permits served to a waiter that died come back
-- when its eviction would have come. One message per client carries every
-- grant to its waiters (permits_note; id: the gate's owner, or the queue
-- entry; publish_notes): a release wakes the whole run of readers at the
-- head of an RWMutex's queue at once. When entries left the queue, the same
-- call tells the new head when the gate's hold ends. gate: the gate's keys (queue_keys); used: the permits in
-- use, k the number of permits. Returns true if it served the gate's holder
-- whose client keeps a presence (there as it ran or not): the caller's owner
-- looks again a poll later (sem_watch.lua).
local function serve(s, w, gate, used, k, now, now_us, publish, channel, skip_holder)
  local g = load(gate.hold)
  if g.v and g.v ~= LAYOUT then return false end -- the gate's own scripts report it
  local who, _, gate_expiry = holder(g, now)
  local grants, blocked = {}, false
  local later, told, watch = nil, nil, false
  if who and not skip_holder then
    local owner, n, lease = g.po, tonumber(g.pn), tonumber(g.pl)
    if owner == nil or n > k then
      -- Not a request this script can grant: its holder looks for itself
      -- (one for more than K permits gets its error).
      publish_notes(publish, channel, {freed_note(who)})
      return false
    end
    if s.p[owner] == nil then -- (else served already: it has yet to give the gate on)
      blocked = used + n > k
      if not blocked then
        local expiry = math.min(now + lease, gate_expiry)
        local token = grant_permit(s, w, owner, n, expiry, now, now_us, g.b or '')
        grants[1] = permits_note(who, token, now, expiry)
        used = used + n
        -- Served to a client that keeps a presence: gone now, look at
        -- once; either way, its owner looks again a poll later, since
        -- waiters killed with it may not look gone yet (Redis reads the
        -- closes of their sockets one by one, and this may run between).
        local ch = presence_channel(who)
        if ch and redis.call('PUBSUB', 'NUMSUB', ch)[2] == 0 and absence_counts() then
          later = gone_look(s, w, g, gate, who, now)
        end
        watch = ch ~= nil
      end
    end
  end
  if not blocked and tonumber(g.h or '0') > now then
    local popped = false
    while true do
      local head, _, element, deadline = live_head(gate, now)
      if head == nil then break end
      local owner, n, lease = element_request(element)
      if owner == nil or n > k or used + n > k or s.p[owner] then break end
      redis.call('LPOP', gate.list)
      redis.call('ZREM', gate.deadlines, head)
      local expiry = math.min(now + lease, deadline)
      local _, label = element_lease(element)
      local token = grant_permit(s, w, owner, n, expiry, now, now_us, label or '')
      grants[#grants + 1] = permits_note(head, token, now, expiry)
      used = used + n
      popped = true
    end
    if popped then
      -- The new head of the gate's queue looks when the gate's hold ends,
      -- or within the poll while its holder keeps a presence (look_at).
      told = live_head(gate, now)
      if told then grants[#grants + 1] = head_notice(told, look_at(who, gate_expiry or now, now, g.pa)) end
    end
  end
  -- gone_look's notes, but to an entry served, or told above, since.
  for _, note in ipairs(later or {}) do
    local e = string.match(note, '^[^ ]*')
    if e ~= told and redis.call('ZSCORE', gate.deadlines, e) then grants[#grants + 1] = note end
  end
  if #grants > 0 then publish_notes(publish, channel, grants) end
  return watch
end
