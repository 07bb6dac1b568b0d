-- lib.lua: helpers prepended to every script of this folder (see lua.go).
--
-- Data layout, for a lock named N (the braces are Redis Cluster's hash tag, so
-- all keys of one lock live in one slot):
--   KEYS[1] fairlock:<kind>:{N}   string, the hold: one JSON object whose
--                                 fields are all strings
--       v  layout version (LAYOUT below); a mismatch fails loudly
--       o  owner id of the hold ("<client>.<handle>")      } present only while
--       c  hold count (re-entries)                          } a hold exists;
--       x  expiry of the hold, Redis time in ms             } held = o and x > now
--       f  last fencing token issued for this lock (survives releases); a
--          token is issued only with a new hold, so while one exists, f is
--          its token
--       q  id of the last owner request that took, re-entered or released
--          the hold; cleared whenever a token is issued (retry safety: see
--          acquired_answer and released_answer)
--       a  the count a release left, when that last request was a release
--          that kept the hold (re-entries remained)
--       r  tokens of the last holds ended by their owner's final release,
--          16-digit fields, newest first (retry safety of a release, see
--          released_hold)
--       k  time until which every key of the lock is kept (its TTL, in ms)
--       fair lock only:
--       h  the latest waiter deadline ever written (bounds the queue's life)
--       e  queue entry a direct hand-off granted the hold to, until claimed
--       g  grant time of that hand-off; b the holder's label
--   fair lock only:
--   KEYS[2] fairlock:f:{N}:queue      list, the queue in join order; each
--       element is "<entry id>|<lease ms>|<wait ms>|<label>" (entry ids have
--       no '|'), so the head's lease and label come with it
--   KEYS[3] fairlock:f:{N}:deadlines  zset, entry id -> deadline (Redis ms);
--       an entry in the list but not here is a tombstone (it gave up or died)
--
-- A fair semaphore named N (sem_*.lua) keeps its permits in one string of the
-- same JSON form, and queues its waiters on a fair lock, its gate:
--   fairlock:s:{N}        the permits: v, f, r and k as above, and
--       m  the number of permits (K), set by the first caller or SetPermits
--       p  object, one field per permit hold: the holder's owner id ->
--          "<permits>|<expiry, Redis ms>|<token>|<g>|<label>", g the grant
--          time (Redis ms) of permits served to a waiter until it claims
--          them, 0 otherwise
--       x  the latest expiry any permit hold ever had (for commit)
--   fairlock:s:{N}:gate, :gate:queue, :gate:deadlines   the gate, a fair lock
--       of the layout above: its holder is the first waiter, waiting for
--       permits; everyone behind it waits in its queue. Their owner ids say
--       what they ask for (permit_request), so that a release can serve
--       them; grants go out on the gate's channel, :gate:wake.
--
-- Time is always Redis's own (TIME), never a client's. Each script reads the
-- hold once (load: GET and cjson.decode) and writes it at most once (save:
-- cjson.encode and SET). Redis time is spent per redis.call, so calls are
-- counted: the hold is one string rather than a hash because one GET and one
-- SET of it cost Redis about half of what HMGET and HSET of its fields did
-- (docs/performance.md).

-- Layout 1 kept the hold as a hash; 2 as one JSON string; 3 is 2's data with
-- a changed protocol (hand-offs carry their grant time, head notices), which
-- a layout-2 client would misread: the version says so before it can. 4
-- keeps no answers (a is a release's remaining count, q is cleared with
-- each token), which a layout-3 client would misread on a retry.
local LAYOUT = '4'
-- How long keys outlive the last hold and the last deadline: long enough for
-- a retried request to find it ran (q) and for the fence (f) to bridge
-- quick re-locks.
local RETAIN_MS = 30000
-- TTLs are pushed this much further than needed, so that most writes (each
-- watchdog renewal, say) find them long enough and skip the PEXPIREs.
local SLACK_MS = 10000

local function clock()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

-- Integers are written with %d: Lua's default formatting keeps 14 digits.
local function int(n)
  return string.format('%d', n)
end

-- missing: the hold key did not exist when load ran; changed: clear_hold
-- changed the hold, so it must be saved even with nothing else to write.
-- Both are per call. As a plain script (EVALSHA) this file runs at every
-- call; in the Functions library it runs once, so lua.go resets both by
-- these names at the start of every function: rename them there too.
local missing, changed = false, false

-- What load makes of a string that is not a hold fairlock wrote.
local NOT_OURS = '\0not ours'

-- load reads the hold: strings by field name, absent fields nil. key: another
-- key of the same layout (a semaphore's gate), KEYS[1] if nil.
local function load(key)
  local raw = redis.pcall('GET', key or KEYS[1])
  if type(raw) == 'table' then
    -- Not a string: a hash of layout 1 (or anything else) under our name.
    return {v = 'of another type (' .. redis.call('TYPE', key or KEYS[1]).ok .. ')'}
  end
  if not raw then
    if key == nil then missing = true end
    return {}
  end
  -- Every hold fairlock writes is a JSON object with a layout version.
  local ok, s = pcall(cjson.decode, raw)
  if not ok or type(s) ~= 'table' or s.v == nil then return {v = NOT_OURS} end
  return s
end

local function layout_error(s, key)
  key = key or KEYS[1]
  if s.v == NOT_OURS then
    return redis.error_reply('fairlock: key ' .. key .. ' holds a string that fairlock did not write ' ..
      '(not a JSON object with a layout version); delete the key or use another lock name')
  end
  if s.v and s.v ~= LAYOUT then
    return redis.error_reply('fairlock: lock ' .. key .. ' has data layout ' ..
      s.v .. ', this library writes layout ' .. LAYOUT .. '; do not mix library versions on one lock')
  end
  return nil
end

-- Is the lock held now? Returns owner, count, expiry, token (owner nil if free).
local function holder(s, now)
  if s.o and tonumber(s.x) > now then
    return s.o, tonumber(s.c), tonumber(s.x), tonumber(s.f)
  end
  return nil
end

-- save writes the hold: s with the fields of w (name -> string) over it, in
-- one SET. ttl (ms) sets the key's TTL; without it the key keeps its TTL, or,
-- had it not existed, gets RETAIN_MS (callers without a ttl normally act on a
-- key that commit already made outlive every hold and deadline).
local function save(s, w, ttl)
  for name, value in pairs(w) do s[name] = value end
  s.v = LAYOUT
  if ttl == nil and missing then ttl = RETAIN_MS end
  if ttl then
    redis.call('SET', KEYS[1], cjson.encode(s), 'PX', int(ttl))
  else
    redis.call('SET', KEYS[1], cjson.encode(s), 'KEEPTTL')
  end
end

-- clear_hold ends the hold (the fence, answers and horizons stay); the
-- caller saves.
local function clear_hold(s)
  s.o, s.c, s.x, s.e, s.g, s.b = nil, nil, nil, nil, nil, nil
  changed = true
end

-- save_changes saves only if w holds a write or the hold was cleared.
local function save_changes(s, w)
  if changed or next(w) ~= nil then save(s, w) end
end

-- Retry safety. A request may run twice (go-redis resends it when the reply
-- is lost), and its second run must change nothing and give the first
-- run's answer. Each request that takes, re-enters or releases a hold writes
-- its id to q, and a token is issued (next_token) only with q cleared, so a
-- request that finds its own id in q ran already, and no hold was made
-- since: its answer is read from the hold as it stands, not stored. (A
-- renewal or a claim may have run since; neither changes a count or a
-- token. A claim turns a hand-off into a full hold, which the retry then
-- reports as such: true since.)
--
-- acquired_answer is an acquiring request's answer: {1, count, token, 0},
-- or {1, count, token, 1, g} while the hold is a hand-off to entry that is
-- not yet claimed. Only held answers write q. If the hold has ended since
-- (expired, or forced open), the answer still names its token: the caller
-- finds it gone at its next renewal or release, as it would have had the
-- reply arrived.
local function acquired_answer(s, entry)
  local count = 1
  if s.o and s.c then count = tonumber(s.c) end
  if entry and s.e == entry then
    return {1, count, tonumber(s.f), 1, tonumber(s.g)}
  end
  return {1, count, tonumber(s.f), 0}
end

-- released_answer is a releasing request's answer: {2, count} if it left the
-- hold with count re-entries (a), {1} if it ended the hold.
local function released_answer(s)
  if s.a then return {2, tonumber(s.a)} end
  return {1}
end

-- Undo: a release may name the acquiring request whose answer its caller
-- never got (its context ended while the script ran). If that request was
-- applied (only a granted hold writes q), the release applies to that
-- hold's token, the last one issued; otherwise there is nothing to undo.
-- Returns the token, or nil.
local function undone_token(s, undo)
  if undo == nil or undo == '' or s.q ~= undo then return nil end
  return tonumber(s.f)
end

-- A final release's answer cannot wait in q for a retry: once the hold is
-- gone, other handles' requests overwrite them at once. So the tokens of the
-- last RELEASED_KEPT holds that ended by their owner's final release are
-- kept in r (a token names one hold, and only its owner releases it): a
-- retried final release whose first run ended the hold finds its token there
-- and gets the same answer, {1}. One that comes after more final releases
-- than that gets {0}, not held: a false ErrLockLost, never a release applied
-- twice. r is read by every script as part of the hold, so it is kept short:
-- with 4 tokens it costs each call about 0.3 µs of JSON and each final
-- release 0.5 µs; 16 would cost 1.1 and 1.0 (docs/reliability.md).
local RELEASED_KEPT = 4
-- Tokens are stored as fixed-width fields, newest first, with no separator:
-- a new one is one format, one sub and one concatenation whatever the count.
local TOKEN_WIDTH = 16

local function note_released(s, w, token)
  local text = string.format('%016d', token)
  if #text ~= TOKEN_WIDTH then return end -- past the year 2286: no memory, still safe
  w.r = text .. string.sub(s.r or '', 1, TOKEN_WIDTH * (RELEASED_KEPT - 1))
end

local function released_hold(s, token)
  local r, text, from = s.r or '', string.format('%016d', token), 1
  while true do
    local at = string.find(r, text, from, true)
    if not at then return false end
    if (at - 1) % TOKEN_WIDTH == 0 then return true end
    from = at + 1
  end
end

-- Fencing: strictly above every token issued before, and above the server's
-- clock in microseconds, so tokens keep rising even after every key expired
-- or the server restarted empty (assuming the server clock never steps back).
-- Returns the token, and as a string.
local function next_token(s, w, now_us)
  local token = math.max(tonumber(s.f or '0') + 1, now_us)
  local text = int(token)
  s.f, w.f = text, text
  -- No earlier request's retry may take this hold for its own (see
  -- acquired_answer); the caller that asked for it writes its own id.
  s.q, s.a = nil, nil
  return token, text
end

-- Every write ends here: commit saves w, and makes sure each key of the lock
-- lives until the later of the hold's expiry and the last waiter's deadline,
-- plus RETAIN_MS, so nothing is left once every client is gone. The time all
-- keys are kept until is stored in k; only when a write needs longer are they
-- extended (all of them, with SLACK_MS to spare: the hold by its SET, the
-- queue keys by PEXPIRE). force: this write may have created a queue key,
-- which has no TTL yet. last: the last key of KEYS that is this hold's (#KEYS
-- if nil); a semaphore's scripts also get its gate's keys, whose TTLs are
-- the gate's own business.
local function commit(s, w, now, force, last)
  local need = now
  local x = tonumber(w.x or s.x or '0')
  if x > need then need = x end
  local h = tonumber(w.h or s.h or '0')
  if h > need then need = h end
  need = need + RETAIN_MS
  local keep = nil
  if force or need > tonumber(s.k or '0') then
    keep = need + SLACK_MS
    w.k = int(keep)
  end
  save(s, w, keep and keep - now)
  if keep then
    for i = 2, last or #KEYS do
      local key = KEYS[i]
      redis.call('PEXPIRE', key, int(keep - now))
    end
  end
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

-- The entry id of a queue element.
local function element_entry(element)
  return string.match(element, '^[^|]*')
end

-- Fair lock, step 1 (queue cleanup): drop tombstones and waiters whose
-- deadline passed from the head, until the head is a live waiter. Each entry
-- is popped once in its life, so this is O(1) amortised per entry.
-- Returns the live head's entry id (nil if none), and whether anything was
-- popped. Every script that ends a head's turn pops it at once (with the
-- tombstones behind it), so the front of the list is the live head that was
-- told it is head, and a pop here means the head changed: it died.
-- queue, deadlines: the keys, KEYS[2] and KEYS[3] if nil.
local function live_head(now, queue, deadlines)
  queue, deadlines = queue or KEYS[2], deadlines or KEYS[3]
  local popped = false
  while true do
    local element = redis.call('LINDEX', queue, 0)
    if not element then return nil, popped end
    local head = element_entry(element)
    local score = redis.call('ZSCORE', deadlines, head)
    local deadline = tonumber(score or '0')
    if deadline > now then return head, popped end
    redis.call('LPOP', queue)
    if score then redis.call('ZREM', deadlines, head) end
    popped = true
  end
end

-- Fair lock, the head notice: the waiter that just became the live head while
-- the lock is held learns when that hold expires ("<entry> head <expiry>", in
-- Redis ms), so that it tries again the moment a lease runs out (a fixed
-- lease, a holder that died, a grant never claimed). Nobody else would wake
-- it then: a lease that runs out sends no message. One message per change of
-- head. The expiry is absolute, so a notice read late still wakes its waiter
-- on time (the waiter knows Redis's clock from its last reply).
local function head_notice(head, expiry)
  return head .. ' head ' .. int(expiry)
end

local function tell_head(head, expiry, publish, channel)
  redis.call(publish, channel, head_notice(head, expiry))
end

-- The owner of a queue entry: entry ids are "<owner>/<join number>".
local function entry_owner(entry)
  return string.match(entry, '^(.*)/[^/]*$')
end

-- Fair lock, direct hand-off: grant the lock to the live head and publish the
-- grant to that waiter alone ("<entry> <token> <grant time>", Redis ms): the
-- waiter needs no further round trip, and counts its lease from the grant.
-- The same message carries the head notice for the waiter behind it
-- (";<next> head <expiry>"), so a hand-off is still one message. Until the
-- grantee claims it, the grant lasts no longer than the waiter's own queue
-- deadline: a grant to a waiter that died ends when its eviction would have,
-- and the next head, told of that end, takes the lock then.
-- Callers use it when the lock is free (expired, given back) or is being
-- freed by this very call (the last release, ForceUnlock): the new hold's
-- fields in w replace whatever hold s still records, which those callers
-- rely on.
-- Writes go to w (saved by the caller). Returns the grantee's entry, or nil.
local function hand_off(s, w, now, now_us, publish, channel)
  if not may_have_waiters(s, w, now) then return nil end
  -- Step 1 and the grant in one pass: pop until a live entry is popped.
  -- An element that is not "<entry>|<lease>|<wait>|<label>" was not written
  -- by fairlock: it is dropped like a dead entry.
  local element, head, deadline, lease, label
  repeat
    element = redis.call('LPOP', KEYS[2])
    if not element then return nil end
    head = element_entry(element)
    local score = redis.call('ZSCORE', KEYS[3], head)
    deadline = tonumber(score or '0')
    if score then redis.call('ZREM', KEYS[3], head) end
    lease, label = string.match(element, '^[^|]*|(%d+)|%d+|(.*)$')
  until deadline > now and lease
  local _, token = next_token(s, w, now_us)
  local expiry = math.min(now + tonumber(lease), deadline)
  w.o, w.c, w.x = entry_owner(head), '1', int(expiry)
  w.e, w.g, w.b = head, int(now), label
  local message = head .. ' ' .. token .. ' ' .. int(now)
  local next_head = live_head(now)
  if next_head then message = message .. ';' .. head_notice(next_head, expiry) end
  redis.call(publish, channel, message)
  return head
end

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
    local n, x, t, g, label = string.match(tostring(rec), '^(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
    n, x, t, g = tonumber(n), tonumber(x), tonumber(t), tonumber(g)
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

-- Semaphore: the permit hold of owner with token, in force; nil (with the
-- cleanup's changes saved) when it is gone.
local function own_permit(s, w, now, owner, token)
  local mine = permit_holds(s, w, now)[owner]
  if mine and mine.token == token then return mine end
  save_changes(s, w)
  return nil
end

-- Semaphore: one permit hold's record, "<n>|<expiry>|<token>|<g>|<label>"
-- (g: the grant time of a served hold until it is claimed, else 0).
local function permit_record(n, x, token, g, label)
  return int(n) .. '|' .. int(x) .. '|' .. int(token) .. '|' .. int(g) .. '|' .. label
end

-- Semaphore: a new permit hold of owner, n permits until expiry; g as in
-- permit_record. Returns its token.
local function grant_permit(s, w, owner, n, expiry, g, now_us, label)
  local token = next_token(s, w, now_us)
  s.p[owner] = permit_record(n, expiry, token, g, label)
  w.p = s.p
  if expiry > tonumber(w.x or s.x or '0') then w.x = int(expiry) end
  return token
end

-- Semaphore: what a waiter asks for. A semaphore's waiter queues on the gate
-- under an owner id "<permit owner>+<n>+<lease ms>+<id>": the owner id of
-- its permit hold (which has no '+'), the permits it wants and their lease.
-- Returns those three, or nil for an id of another form.
local function permit_request(gate_owner)
  local owner, n, lease = string.match(gate_owner or '', '^([^+]+)%+(%d+)%+(%d+)%+')
  if owner == nil then return nil end
  return owner, tonumber(n), tonumber(lease)
end

-- Semaphore: serve the waiters at the head, in order, as far as the free
-- permits go: the gate's holder, the first waiter (unless skip_holder: the
-- caller just served it), then the gate's queue from its live head. The
-- first request that does not fit stops it: nobody passes a waiter. Each
-- is granted its permits as a hand-off: until its owner claims it, the grant
-- lasts no longer than the waiter's place would have (the gate's hold, or the
-- entry's queue deadline), so permits served to a waiter that died come back
-- when its eviction would have come. ONE message carries every grant,
-- "<id> permits <token> <grant ms> <expiry ms>" (id: the gate's owner, or
-- the queue entry), separated by ';': a release wakes the whole run of
-- readers at the head of an RWMutex's queue at once. When entries left the
-- queue, the same message tells the new head when the gate's hold ends.
-- used: the permits in use, k the number of permits; KEYS[2..4] the gate.
local function serve(s, w, used, k, now, now_us, publish, channel, skip_holder)
  local gate = load(KEYS[2])
  if gate.v and gate.v ~= LAYOUT then return end -- the gate's own scripts report it
  local who, _, gate_expiry = holder(gate, now)
  local notes, blocked = {}, false
  if who and not skip_holder then
    local owner, n, lease = permit_request(who)
    if owner == nil or n > k then
      -- Not a request this script can grant: its holder looks for itself
      -- (one for more than K permits gets its error).
      redis.call(publish, channel, who .. ' freed')
      return
    end
    if s.p[owner] == nil then -- (else served already: it has yet to give the gate on)
      blocked = used + n > k
      if not blocked then
        local expiry = math.min(now + lease, gate_expiry)
        local token = grant_permit(s, w, owner, n, expiry, now, now_us, gate.b or '')
        notes[1] = who .. ' permits ' .. int(token) .. ' ' .. int(now) .. ' ' .. int(expiry)
        used = used + n
      end
    end
  end
  if not blocked and tonumber(gate.h or '0') > now then
    local popped = false
    while true do
      local head = live_head(now, KEYS[3], KEYS[4])
      if head == nil then break end
      local owner, n, lease = permit_request(entry_owner(head))
      if owner == nil or n > k or used + n > k or s.p[owner] then break end
      local element = redis.call('LPOP', KEYS[3])
      local deadline = tonumber(redis.call('ZSCORE', KEYS[4], head))
      redis.call('ZREM', KEYS[4], head)
      local expiry = math.min(now + lease, deadline)
      local label = string.match(element, '^[^|]*|%d+|%d+|(.*)$') or ''
      local token = grant_permit(s, w, owner, n, expiry, now, now_us, label)
      notes[#notes + 1] = head .. ' permits ' .. int(token) .. ' ' .. int(now) .. ' ' .. int(expiry)
      used = used + n
      popped = true
    end
    if popped then
      local head = live_head(now, KEYS[3], KEYS[4])
      if head then notes[#notes + 1] = head_notice(head, gate_expiry or now) end
    end
  end
  if #notes > 0 then redis.call(publish, channel, table.concat(notes, ';')) end
end
