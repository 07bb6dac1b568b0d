-- fair_release.lua: undo one level of a fair hold; the last level hands the
-- lock straight to the live head of the queue (see hand_off in queue.lua).
-- KEYS[1..3]: hold, queue, deadlines.
-- ARGV[1] owner id, ARGV[2] request id, ARGV[3] token of the hold,
-- ARGV[4] publish command, ARGV[5] channel,
-- ARGV[6] (optional) an acquiring request to undo: token is then ignored.
-- Returns 1 or {1} released, {2} still held (a re-entry undone), {0} not held;
-- {1, 1}: released, and handed to a waiter whose client keeps a presence,
-- which the caller's owner looks at once more a poll later (core's
-- watchHandOff: the release cannot see a death whose close Redis has not
-- read yet).
local owner, req, token = ARGV[1], ARGV[2], tonumber(ARGV[3])

-- The uncontended path (hold.lua's release_own): the final release of this
-- very hold (not an election's: KEYS[1] fairlock:e:..., whose tenth byte
-- is 101, "e"; watch_leader below), with no waiter that can be live to
-- hand it to, on the hold's text. The last branch below would end it the
-- same way.
local raw = redis.pcall('GET', KEYS[1])
if type(raw) == 'string' and string.byte(KEYS[1], 10) ~= 101 and ARGV[6] == nil and
    release_own(raw, owner, req, ARGV[3]) then
  return 1
end
watch_leader(ARGV[4], ARGV[5])

caller = owner -- absences count only where its session is (queue.lua)
local s = load(nil, raw)
local bad = layout_error(s)
if bad then return bad end

-- A retried release returns its first answer instead of releasing twice.
if s.q == req then return released_answer(s) end
if ARGV[6] then
  token = undone_token(s, ARGV[6])
  if token == nil then return {0} end
end

local now, now_us = clock()
local Q = queue_keys(KEYS[1], KEYS[2], KEYS[3])
local who, count, _, held_token = holder(s, now)
if who ~= owner or held_token ~= token then
  -- Not held, unless this is a retry of the final release that ended this
  -- very hold, after others wrote q: it gets its first answer.
  if released_hold(s, token) then return {1} end
  return {0}
end

local w, answer = {}, nil
if count > 1 then
  w.c = int(count - 1)
  w.a = w.c
  answer = {2}
else
  -- The next live waiter gets the lock in this same call; with nobody
  -- waiting the hold just ends.
  if not hand_off(s, w, Q, now, now_us, ARGV[4], ARGV[5]) then clear_hold(s) end
  note_released(s, w, token)
  s.a = nil
  answer = {1}
  if w.o and presence_channel(w.o) then answer = {1, 1} end
end
-- The keys already live past the hold and every deadline (commit), and a
-- hand-off's grant ends no later than the grantee's deadline: no PEXPIRE.
w.q = req
save(s, w)
return answer
