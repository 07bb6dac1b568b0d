-- hold.lua: the hold, the one string every script reads once (load) and
-- writes at most once (save, commit), and its keys' lifetime.
--
-- The helpers of this folder are split by concern, and lua.go puts them in
-- front of every script in this order (each may use those before it):
-- hold.lua (the hold and its keys' lifetime), wire.lua (every string the
-- scripts exchange with the Go side), fence.lua (fencing tokens), retry.lua
-- (answers to retried requests), queue.lua (the fair queue), permits.lua
-- (a semaphore's permits). Helpers that touch a queue take its keys (a
-- queue made by queue_keys); load, save and commit work on the script's own
-- hold, KEYS[1].
--
-- Data layout, for a lock named N (the braces are Redis Cluster's hash tag, so
-- all keys of one lock live in one slot):
--   KEYS[1] fairlock:<kind>:{N}   string, the hold: one flat JSON object
--       of the fields below, all strings but a few objects (wa, p, a
--       semaphore's pa), absent fields left out; every call decodes it
--       (load). A fair or reentrant lock's hold that no waiter can be live
--       for (its waiters' horizon h has passed) is written in its ordered
--       form, where the uncontended paths (take_free, release_own below)
--       read and replace it as text at fixed offsets; any other is written
--       as cjson encodes it, which costs the contended calls less:
--         {"~":0,"v":"8","f":..,"x":..,"h":..,"k":..,"r":..,"q":..,"o":..,
--          "c":..,"a":..,"n":..,"b":..<the hold's fields>,"~~":0<the lock's>}
--       In the ordered form the numbers f, x, h, k and r are zero-padded to
--       a fixed width (all zeros when absent), so that each sits at a fixed
--       offset (1-based, in the whole text); q to b are "" when absent; the
--       hold's other fields come before "~~", the lock's after.
--       v  layout version (LAYOUT below); a mismatch fails loudly (a client
--          of layouts 2 to 7 decodes the JSON and finds v too)
--       f  (21-36)  last fencing token issued for this lock (survives
--                   releases); a token is issued only with a new hold, so
--                   while one exists, f is its token
--       x  (44-56)  expiry of the hold, Redis time in ms   } present only
--                   while a hold exists; held = o and x > now
--       h  (64-76)  the latest waiter deadline ever written (bounds the life
--                   of the queue of a fair lock, and of the waiters of a
--                   reentrant lock); take_free writes one that has passed
--                   as 0, and an acquisition that finds no waiter left
--                   (a fair lock's queue empty, a reentrant lock's
--                   deadlines) drops it
--       k  (84-96)  time until which every key of the lock is kept (its TTL,
--                   in ms)
--       r  (104-167) tokens of the last holds ended by their owner's final
--                   release, 16-digit fields, newest first (retry safety of
--                   a release, see released_hold)
--       q  (from 175) id of the last owner request that took, re-entered or
--          released the hold; cleared whenever a token is issued (retry
--          safety: see acquired_answer and released_answer)
--       o  owner id of the hold ("<client>.<handle>")       } present only
--       c  hold count (re-entries)                           } while a hold
--       a  the count a release left, when that last request was a release
--          that kept the hold (re-entries remained)
--       n  reentrant lock only: the waiter the last wake-up went to (a
--          release, ForceUnlock, or a woken waiter's leave), until a token
--          is issued
--       b  the holder's label (fair lock), as JSON escapes it
--       then the fields that end with the hold (clear_hold):
--          fair lock only:
--          pa when a waiter's attempt first found the holder's presence gone
--             (Redis ms; queue.lua's holder_present)
--          e  queue entry a direct hand-off granted the hold to, until claimed
--          g  grant time of that hand-off
--          a semaphore's gate only: po, pn, pl  the permit request its holder
--             waits for: the owner id of the permit hold, the permits, their
--             lease (ms)
--          election only (a fair lock under fairlock:e:, fair.Election):
--          l  the leader's value, as the Go side escaped it (no '|', ' ', ';')
--          s  when the leader's term began (Redis ms): when its token was issued
--       and the fields that outlive holds, read only where they are used:
--          wa object: client id -> when a look first found the presence of a
--             queued waiter's client gone (Redis ms; queue.lua's
--             waiter_absent_since); forgotten when found back (a reentrant
--             lock's waiters' too)
--          wt reentrant lock only: when the look a release last asked for is
--             due (Redis ms; reentrant_release.lua, reentrant_watch.lua):
--             until then no release asks for another
--          w  election only: the version of the leadership: bumped, to at
--             least Redis's clock in µs, by every write that changes who
--             leads, the term or the value (survives releases, so it only
--             grows)
--   reentrant lock: KEYS[2] fairlock:r:{N}:queue, list, its waiters' ids in
--       arrival order; KEYS[3] fairlock:r:{N}:deadlines, zset, waiter id ->
--       deadline (Redis ms): as a fair lock's queue, but its elements are
--       bare ids, and a waiter leaves the zset, not the list, when it takes
--       the lock (a tombstone, popped by the next wake-up's cleanup)
--   fair lock only:
--   KEYS[2] fairlock:f:{N}:queue      list, the queue in join order; each
--       element is "<entry id>|<lease ms>|<wait ms>|<request>|<label>"
--       (element in wire.lua), so the head's lease, request and label come
--       with it
--   KEYS[3] fairlock:f:{N}:deadlines  zset, entry id -> deadline (Redis ms);
--       an entry in the list but not here is a tombstone (it gave up or died)
--
-- A fair semaphore named N (sem_*.lua) keeps its permits in one string of the
-- same form, and queues its waiters on a fair lock, its gate:
--   fairlock:s:{N}        the permits: f, r, k and x (the latest expiry any
--       permit hold ever had, for commit) as above, and
--       m  the number of permits (K), set by the first caller or SetPermits
--       p  object, one field per permit hold: the holder's owner id ->
--          "<permits>|<expiry, Redis ms>|<token>|<g>|<label>", g the grant
--          time (Redis ms) of permits served to a waiter until it claims
--          them, 0 otherwise
--       pa object: permit holder's owner id -> when the first waiter first
--          found that client's presence gone (Redis ms; permits.lua)
--   fairlock:s:{N}:gate, :gate:queue, :gate:deadlines   the gate, a fair lock
--       of the layout above: its holder is the first waiter, waiting for
--       permits; everyone behind it waits in its queue. Each says what it
--       asks for when it joins (fair_acquire.lua's ARGV[6..8]), which the
--       gate keeps in its queue element and, for its holder, in po, pn and
--       pl, so that a release can serve them; grants go out to the inboxes
--       under the gate's channel, :gate:wake:<client>.
--
-- Time is always Redis's own (TIME), never a client's. Each script reads the
-- hold once (GET) and writes it at most once (SET). Redis time is spent per
-- redis.call, so calls are counted: the hold is one string rather than a
-- hash because one GET and one SET of it cost Redis about half of what
-- HMGET and HSET of its fields did; and its hot fields are text at fixed
-- offsets, because decoding and encoding the whole hold cost an
-- uncontended pair more than its three calls did (docs/performance.md,
-- round seven).

-- Layout 1 kept the hold as a hash; 2 as one JSON string; 3 is 2's data with
-- a changed protocol (hand-offs carry their grant time, head notices), which
-- a layout-2 client would misread: the version says so before it can. 4
-- keeps no answers (a is a release's remaining count, q is cleared with
-- each token), which a layout-3 client would misread on a retry. 5 carries
-- a semaphore's permit request in its gate's queue elements and hold, not
-- in the waiter's owner id: the elements have one field more. 6 publishes a
-- fair queue's notes to each client's inbox (publish_notes in wire.lua), not
-- on the lock's channel, where a layout-5 client would wait for them.
-- 7 keeps a reentrant lock's waiters in Redis and wakes one of them per
-- release, in its inbox: a layout-6 client would wait on the lock's channel
-- for a wake-up nobody sends. 8 keeps the hot fields as text at fixed
-- offsets (above); a layout-7 client reads its v and fails loudly.
local LAYOUT = '8'
-- How long keys outlive the last hold and the last deadline: long enough for
-- a retried request to find it ran (q) and for the fence (f) to bridge
-- quick re-locks.
local RETAIN_MS = 30000
-- TTLs are pushed this much further than needed, so that most writes (each
-- watchdog renewal, say) find them long enough and skip the PEXPIREs.
local SLACK_MS = 10000

-- call_now is Redis's clock (ms) as this call last read it (clock, or
-- take_free), nil before; per call (lua.go resets it by this name). save
-- writes the hold in its ordered form only for a lock whose waiters are
-- all past their deadlines by then (encode).
local call_now = nil

-- clock returns Redis's clock in ms and in µs, and TIME's reply (seconds
-- and µs as text), which take_free writes out as a token.
local function clock()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  call_now = s * 1000 + math.floor(us / 1000)
  return call_now, s * 1000000 + us, t
end

-- Integers are written with %d: Lua's default formatting keeps 14 digits.
local function int(n)
  return string.format('%d', n)
end

-- missing: the hold key did not exist when load ran; changed: clear_hold
-- changed the hold, so it must be saved even with nothing else to write.
-- Both are per call, as announce (below) is. As a plain script (EVALSHA)
-- this file runs at every call; in the Functions library it runs once, so
-- lua.go resets all three by these names at the start of every function:
-- rename them there too.
local missing, changed = false, false

-- Elections. An election (fair.Election) is a fair lock whose hold also
-- carries the leader's value (l), the start of its term (s) and a version
-- (w). Every write of its hold that changes who leads, the term (the
-- fencing token) or the value publishes the new leadership (leadership_text)
-- on the election's leader channel, "<channel>:leader", in the call that
-- makes the change: one PUBLISH, which reaches each observing client once
-- (its owner's hub subscribes to it), however many observe. A lease that
-- runs out changes nothing by itself: observers look again at the expiry
-- they were told of.
-- announce is per call, like missing and changed (lua.go resets it by this
-- name): set by watch_leader in every script that may change an election's
-- leadership, it holds where to publish and, once load has read the hold,
-- who led, in which term, with which value.
local announce = nil

-- watch_leader is called first by the scripts that may change who holds a
-- fair lock: if KEYS[1] is an election's hold, save publishes the changes.
local function watch_leader(publish, channel)
  if string.sub(KEYS[1], 1, 11) == 'fairlock:e:' then
    announce = {publish = publish, channel = channel}
  end
end

-- What load makes of a string that is not a hold fairlock wrote.
local NOT_OURS = '\0not ours'

-- The hold's text starts with PREFIX; its first fields sit at the offsets
-- the layout above gives. Written with these widths, all zeros when absent
-- (a time past 2286 is kept as 9999999999999 ms).
local PREFIX = '{"~":0,"v":"8","f":"'
local Z16, Z13 = '0000000000000000', '0000000000000'
local Z64 = Z16 .. Z16 .. Z16 .. Z16
local MAX_TOKEN = 9999999999999999
-- In the ordered form, the fields that end with the hold, written before
-- "~~":0, and those that outlive it, written after; the ordered ones (f to
-- b) are the others.
-- Every field a script writes is among them (the layout above).
local HOLD_FIELDS = {'e', 'g', 'po', 'pn', 'pl', 'l', 's', 'pa'}
local LOCK_FIELDS = {'wa', 'wt', 'w', 'm', 'p'}

-- load reads the hold: strings by field name, absent fields nil. key: another
-- key of the same layout (a semaphore's gate), KEYS[1] if nil. raw: the
-- key's value, when the caller has read it already (false: missing).
local function load(key, raw)
  if raw == nil then raw = redis.pcall('GET', key or KEYS[1]) end
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
  if s.v ~= LAYOUT then return {v = s.v} end
  if s['~'] ~= nil then
    -- The ordered form: its markers go, and its empty fields.
    if s['~~'] == nil or type(s.r) ~= 'string' then return {v = NOT_OURS} end
    s['~'], s['~~'] = nil, nil
    if s.r == Z64 then s.r = nil end
    if s.f == Z16 then s.f = nil end
    if s.x == Z13 then s.x = nil end
    if s.h == Z13 then s.h = nil end
    if s.k == Z13 then s.k = nil end
    if s.q == '' then s.q = nil end
    if s.o == '' then s.o = nil end
    if s.c == '' then s.c = nil end
    if s.a == '' then s.a = nil end
    if s.n == '' then s.n = nil end
    if s.b == '' then s.b = nil end
  end
  if key == nil and announce then announce.o, announce.f, announce.l = s.o, s.f, s.l end
  return s
end

-- A number's fixed-width text (zeros: the width's text of zeros): zeros
-- when absent, the largest when too long.
local function fixed(v, zeros)
  if v == nil then return zeros end
  if type(v) ~= 'string' then v = string.format('%d', v) end
  local pad = #zeros - #v
  if pad == 0 then return v end
  if pad > 0 then return string.sub(zeros, 1, pad) .. v end
  if #zeros == 16 then error('fairlock: a fencing token past 16 digits') end
  return '9999999999999'
end

-- The named fields of s as JSON members, each after a comma. Their string
-- values are ids, numbers and escaped values, none of which JSON escapes
-- (the label, which may hold anything, is b's).
local function members(s, names)
  local out = ''
  for i = 1, #names do
    local v = s[names[i]]
    if v ~= nil then
      if type(v) == 'string' then v = '"' .. v .. '"' else v = cjson.encode(v) end
      out = out .. ',"' .. names[i] .. '":' .. v
    end
  end
  return out
end

-- encode is the text of hold s, as load reads it, for key (KEYS[1] if
-- nil): its ordered form where an uncontended path may read it next (a fair
-- or reentrant lock, the tenth byte of whose key is 102 "f" or 114 "r",
-- with no waiter live as this call last read the clock), as cjson encodes
-- it elsewhere. The ids (q, o, n) hold nothing JSON escapes: the Go side
-- makes them so (internal/transport).
local function encode(s, key)
  local kind = string.byte(key or KEYS[1], 10)
  if (kind ~= 102 and kind ~= 114) or tonumber(s.h or '0') > (call_now or 0) then
    s.v = LAYOUT
    return cjson.encode(s)
  end
  local r = s.r or ''
  if #r ~= 64 then r = string.sub(r .. Z64, 1, 64) end
  return PREFIX .. fixed(s.f, Z16) .. '","x":"' .. fixed(s.x, Z13) .. '","h":"' .. fixed(s.h, Z13) ..
    '","k":"' .. fixed(s.k, Z13) .. '","r":"' .. r .. '","q":"' .. (s.q or '') .. '","o":"' .. (s.o or '') ..
    '","c":"' .. (s.c or '') .. '","a":"' .. (s.a or '') .. '","n":"' .. (s.n or '') .. '","b":' ..
    cjson.encode(s.b or '') .. members(s, HOLD_FIELDS) .. ',"~~":0' .. members(s, LOCK_FIELDS) .. '}'
end

-- The uncontended pair, on the hold's text (docs/performance.md, round
-- seven): the layout's offsets let take_free and release_own check and
-- replace the hold without decoding it. Each does what the general path
-- would do in its case, and nothing else; in any other case it changes
-- nothing and returns nil, and the script goes on to its general path.

-- What the uncontended pair compares and writes whole: x and h, both
-- passed (all zeros); a hold's fields from c to b, held once by nobody a
-- wake-up went to, and a free hold's from o to b; and the end of a hold
-- whose fields that outlive holds are all absent.
local XH_PASSED = Z13 .. '","h":"' .. Z13
local HELD_ONCE = '","c":"1","a":"","n":"","b":"'
local FREE = '","o":"","c":"","a":"","n":"","b":""'
local BARE_END = ',"~~":0}'
-- The zeros that pad TIME's µs (text) to six digits, by its length.
local US_PAD = {'00000', '0000', '000', '00', '0', ''}
-- take_free takes a free lock for owner, with a fresh token, when its hold
-- (raw, the text of KEYS[1]) is in the ordered form, nobody holds it (x has
-- passed), no waiter can be live (h has passed), this is not a retry of req
-- (q), and the keys already outlive the new hold (k): then the ordered
-- fields are rewritten and the hold's fields of a hold that ended, up to
-- "~~", dropped (as clear_hold drops them); the fields after "~~" stay as
-- they are, the fence is next_token's, and the key keeps its TTL. h, passed,
-- is written as 0: every deadline written since is above it, which is how
-- release_own knows that nobody has waited since without reading the
-- clock. label: JSON-escaped. waiter: a reentrant
-- lock's caller that may wait, which the general path would have to tell
-- whether the last wake-up went to it (n): taken here only when no wake-up
-- is pending (n empty, as in every uncontended pair). Returns the token; or
-- nil and Redis's clock (ms, µs) when it read it.
local function take_free(raw, owner, req, lease, label, waiter)
  -- string.find(raw, text, at, true) == at compares text in place, making
  -- no substring: x and h, all zeros after a release, are read no further.
  if string.find(raw, PREFIX, 1, true) ~= 1 then return nil end
  local now, now_us, time = clock()
  if (string.find(raw, XH_PASSED, 44, true) ~= 44 and
       ((string.find(raw, Z13, 44, true) ~= 44 and tonumber(string.sub(raw, 44, 56)) > now) or
        (string.find(raw, Z13, 64, true) ~= 64 and tonumber(string.sub(raw, 64, 76)) > now))) or
      now + lease + RETAIN_MS > tonumber(string.sub(raw, 84, 96)) or
      (string.find(raw, req, 175, true) == 175 and string.byte(raw, 175 + #req) == 34) or
      (waiter and string.byte(raw, string.find(raw, '","b":"', 175, true) - 1) ~= 34) then
    return nil, now, now_us
  end
  -- next_token's fence: the last token + 1, or the clock in µs when that
  -- is later, as it is unless tokens came faster than one a µs. The
  -- clock's token is written as TIME gave it (seconds, then the µs
  -- padded to six digits), which is its 16 digits until the year 2286.
  local token, text = tonumber(string.sub(raw, 21, 36)) + 1, nil
  if token < now_us and #time[1] == 10 then
    token, text = now_us, time[1] .. US_PAD[#time[2]] .. time[2]
  else
    if token < now_us then token = now_us end
    if token > MAX_TOKEN then return nil, now, now_us end
    text = string.format('%016d', token)
  end
  -- The end from "~~" on, as it was: in an uncontended pair, the bare end.
  local e = string.find(raw, ',"~~":0', 175, true)
  local rest = BARE_END
  if e ~= #raw - 7 then rest = string.sub(raw, e) end
  redis.call('SET', KEYS[1], PREFIX .. text .. '","x":"' .. string.format('%013d', now + lease) .. '","h":"' .. Z13 ..
    string.sub(raw, 77, 174) .. req .. '","o":"' .. owner .. HELD_ONCE .. label .. '"' .. rest, 'KEEPTTL')
  return token
end

-- release_own ends owner's hold of token, when its hold (raw) is in the
-- ordered form, held by owner once (c 1, no count a release left, no waiter a
-- wake-up went to), this is not a retry of req, and no waiter has written
-- a deadline since take_free took it (h still 0): the hold's fields go (x
-- zeroed, o, c and b emptied, those up to "~~" dropped), the token joins
-- the release memory r (note_released), q becomes req, and the key keeps
-- its TTL. token: the release's ARGV, text; the Go side sends it at f's
-- width (transport.Release), so that it is compared and written as it comes.
-- It reads no clock, so it does not check the lease as the general path
-- does: a release that reaches a hold whose lease ran out, nobody having
-- taken the lock since (f is still its token), ends it here, where the
-- general path would answer "not held". Its owner cannot tell the two
-- apart: it gave the hold up for lost, by its own count, a margin before
-- that expiry, and such an Unlock returns ErrLockLost either way (core's
-- released).
-- Returns 1 (released); or nil.
local function release_own(raw, owner, req, token)
  if #token ~= 16 then
    local n = tonumber(token)
    if not n or n < 0 or n % 1 ~= 0 or n > MAX_TOKEN then return nil end
    token = string.format('%016d', n)
  end
  if string.find(raw, token, 21, true) ~= 21 or string.find(raw, Z13, 64, true) ~= 64 or
      string.find(raw, PREFIX, 1, true) ~= 1 then
    return nil
  end
  -- p: where q's value ends; held: where o's begins.
  local p = string.find(raw, '"', 175, true)
  local held = p + 7
  if (p == 175 + #req and string.find(raw, req, 175, true) == 175) or string.find(raw, owner, held, true) ~= held or
      string.find(raw, HELD_ONCE, held + #owner, true) ~= held + #owner then
    return nil
  end
  local e = string.find(raw, ',"~~":0', p, true)
  local rest = BARE_END
  if e ~= #raw - 7 then rest = string.sub(raw, e) end
  redis.call('SET', KEYS[1], string.sub(raw, 1, 43) .. Z13 .. string.sub(raw, 57, 103) .. token .. string.sub(raw, 104, 151) ..
    '","q":"' .. req .. FREE .. rest, 'KEEPTTL')
  return 1
end

-- layout_error is Redis's refusal of a hold it cannot read. The Go side
-- matches its two texts ("... has data layout ...", "... that fairlock did
-- not write ...": internal/core's isLayoutRefusal) to fairlock.ErrDataLayout:
-- change them there too.
local function layout_error(s, key)
  key = key or KEYS[1]
  if s.v == NOT_OURS then
    return redis.error_reply('fairlock: key ' .. key .. ' holds a string that fairlock did not write ' ..
      '(not a JSON object with a layout version); delete the key or use another lock name')
  end
  if s.v and s.v ~= LAYOUT then
    return redis.error_reply('fairlock: lock ' .. key .. ' has data layout ' ..
      s.v .. ', this library writes layout ' .. LAYOUT .. '; do not mix library versions on one lock: upgrade ' ..
      'every client of it. Its keys expire at most 40 s after the end of the last lease a client of that ' ..
      'layout took; to clear them sooner, once none of those clients runs, delete the keys that start with ' .. key)
  end
  return nil
end

-- A server that lost its data (restarted without persistence, flushed)
-- grants nothing for SETTLE_MS after it first serves an acquisition: a
-- holder made WithPresence that took the restart's broken connection for a
-- blip has that long to learn from its confirming renewal that its hold is
-- gone (docs/presence.md). A fresh server is one too: its first acquisition
-- waits as long. BOOT_KEY records when the server first served one (Redis
-- ms), refreshed to BOOT_TTL_MS by every acquisition that finds its lock's
-- hold missing, the only one that can follow a loss of data. Reached only
-- when the hold is missing, so a hot lock never reads it.
local BOOT_KEY = 'fairlock:boot'
local SETTLE_MS = 200
local BOOT_TTL_MS = 30 * 24 * 3600 * 1000

-- settling returns until when (Redis ms) the server grants nothing, or nil
-- if it may grant now. A call the server refuses (Cluster, where BOOT_KEY
-- is in another slot; an ACL key pattern that leaves it out; GETEX before
-- Redis 6.2) settles nothing: the pause is skipped there.
local function settling(now)
  local born = redis.pcall('GETEX', BOOT_KEY, 'PX', BOOT_TTL_MS)
  if type(born) == 'table' then return nil end
  if not born then
    redis.pcall('SET', BOOT_KEY, int(now), 'PX', BOOT_TTL_MS)
    born = now
  end
  local till = (tonumber(born) or 0) + SETTLE_MS
  if till > now then return till end
  return nil
end

-- The holder settling puts in a hold that a server that lost its data
-- grants to nobody, for as long as it settles.
local SETTLING = '!settling'

-- Is the lock held now? Returns owner, count, expiry, token (owner nil if free).
local function holder(s, now)
  if s.o and tonumber(s.x) > now then
    return s.o, tonumber(s.c), tonumber(s.x), tonumber(s.f)
  end
  return nil
end

-- Percent-escapes the bytes that would break a leadership's text: '%',
-- ' ' and ';' (the separator of notes, which the hub splits on).
local function escape(text)
  return (string.gsub(text, '[%%; ]', function(c) return string.format('%%%02X', string.byte(c)) end))
end

-- An election's leadership, as its observers read it (Go: transport.ParseLeadership):
--   "leader <version> <term> <since ms> <expiry ms> <now ms> <value> <origin>"
-- term 0 (and since, expiry, value and origin empty or 0) when nobody leads.
local function leadership_text(s, now)
  local who, _, expiry, token = holder(s, now)
  if who == nil then
    return 'leader ' .. (s.w or '0') .. ' 0 0 0 ' .. int(now) .. '  '
  end
  return 'leader ' .. (s.w or '0') .. ' ' .. int(token) .. ' ' .. (s.s or '0') .. ' ' .. int(expiry) ..
    ' ' .. int(now) .. ' ' .. (s.l or '') .. ' ' .. escape(s.b or '')
end

-- save writes the hold: s with the fields of w (name -> string) over it, in
-- one SET (w may be s itself, changed in place). ttl (ms) sets the key's
-- TTL; without it the key keeps its TTL, or, had it not existed, gets
-- RETAIN_MS (callers without a ttl normally act on a key that commit
-- already made outlive every hold and deadline). An
-- election's hold whose leader, term or value changed is announced (see
-- announce above).
local function save(s, w, ttl)
  if w ~= s then
    for name, value in pairs(w) do s[name] = value end
  end
  s.v = LAYOUT
  local now = nil
  if announce and (s.o ~= announce.o or s.f ~= announce.f or s.l ~= announce.l) then
    local now_us
    now, now_us = clock()
    if s.f ~= announce.f then s.s = int(now) end
    s.w = int(math.max(tonumber(s.w or '0') + 1, now_us))
  end
  if ttl == nil and missing then ttl = RETAIN_MS end
  if ttl then
    redis.call('SET', KEYS[1], encode(s), 'PX', int(ttl))
  else
    redis.call('SET', KEYS[1], encode(s), 'KEEPTTL')
  end
  if now then
    redis.call(announce.publish, announce.channel .. ':leader', leadership_text(s, now))
  end
end

-- clear_hold ends the hold (the fence, answers and horizons stay); the
-- caller saves.
local function clear_hold(s)
  s.o, s.c, s.x, s.e, s.g, s.b = nil, nil, nil, nil, nil, nil
  s.po, s.pn, s.pl, s.l, s.s, s.pa = nil, nil, nil, nil, nil, nil
  changed = true
end

-- save_changes saves only if w holds a write or the hold was cleared.
local function save_changes(s, w)
  if changed or next(w) ~= nil then save(s, w) end
end

-- Every write ends here: commit saves w, and makes sure each key of the lock
-- lives until the later of the hold's expiry and the last waiter's deadline,
-- plus RETAIN_MS, so nothing is left once every client is gone. The time all
-- keys are kept until is stored in k; only when a write needs longer are they
-- extended (all of them, with SLACK_MS to spare: the hold by its SET, the
-- others by PEXPIRE). force: this write may have created one of the others,
-- which has no TTL yet. The keys after force: the lock's keys besides the
-- hold (a lock's queue and deadlines; none for a semaphore, whose gate's
-- keys are the gate's own business), passed one by one so that the call
-- makes no table.
local function commit(s, w, now, force, ...)
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
    for i = 1, select('#', ...) do
      local key = select(i, ...)
      if key then redis.call('PEXPIRE', key, int(keep - now)) end
    end
  end
end
