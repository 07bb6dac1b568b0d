-- retry.lua: what a retried request is answered, and the memory of final
-- releases that gives a late retry its answer.

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
-- acquired_answer is an acquiring request's answer: {1, token, 0}, or
-- {1, token, 1, g} while the hold is a hand-off to entry that is
-- not yet claimed. Only held answers write q. If the hold has ended since
-- (expired, or forced open), the answer still names its token: the caller
-- finds it gone at its next renewal or release, as it would have had the
-- reply arrived.
local function acquired_answer(s, entry)
  if entry and s.e == entry then
    return {1, tonumber(s.f), 1, tonumber(s.g)}
  end
  return {1, tonumber(s.f), 0}
end

-- released_answer is a releasing request's answer: {2} if it left the hold
-- re-entered (a, the count it left), {1} if it ended the hold.
local function released_answer(s)
  if s.a then return {2} end
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
