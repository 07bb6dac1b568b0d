-- reentrant_release.lua: undo one level of a hold; the last level frees the
-- lock and wakes one waiter: the longest-waiting live one.
-- KEYS[1..3]: the hold, the waiters, their deadlines (see hold.lua).
-- ARGV[1] owner id, ARGV[2] request id, ARGV[3] token of the hold,
-- ARGV[4] publish command (PUBLISH or SPUBLISH), ARGV[5] channel,
-- ARGV[6] (optional) an acquiring request to undo: token is then ignored.
-- Returns 1 or {1} released ({1, 1}: and the releasing owner should look again a
-- poll later, reentrant_watch.lua), {2} still held (a re-entry undone), {0}
-- not held.
local owner, req, token = ARGV[1], ARGV[2], tonumber(ARGV[3])

-- The uncontended path (hold.lua's release_own): the final release of this
-- very hold, with no waiter that can be live to wake, on the hold's text.
-- The last branch below would end it the same way.
local raw = redis.pcall('GET', KEYS[1])
if type(raw) == 'string' and ARGV[6] == nil and release_own(raw, owner, req, ARGV[3]) then
  return 1
end

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

-- Only the owner of this very hold may release it; anyone else changes nothing.
local now = clock()
local who, count, _, held_token = holder(s, now)
if who ~= owner or held_token ~= token then
  -- Not held, unless this is a retry of the final release that ended this
  -- very hold, after others wrote q: it gets its first answer.
  if released_hold(s, token) then return {1} end
  return {0}
end

local w, answer = s, nil
if count > 1 then
  w.c = int(count - 1)
  w.a = w.c
  answer = {2}
else
  clear_hold(s)
  local woken = wake_waiter(s, w, now, ARGV[4], ARGV[5])
  note_released(s, w, token)
  s.a = nil
  answer = {1}
  -- A woken waiter whose client keeps a presence may have died as this ran
  -- (Redis had not read its socket's close yet), and, once it holds, the
  -- waiter behind it should poll: the releasing owner looks once more a
  -- poll later (reentrant_watch.lua), unless a look asked for by an earlier
  -- release is due within the poll (wt): that one sees this release's
  -- outcome too, so a busy lock is looked at once a poll, not once a
  -- release.
  if woken and presence_channel(entry_owner(woken)) and tonumber(s.wt or '0') <= now then
    w.wt = int(now + PRESENCE_POLL_MS)
    answer = {1, 1}
  end
end
-- The key outlives the hold by RETAIN_MS already (commit): it keeps its TTL.
w.q = req
save(s, w)
return answer
