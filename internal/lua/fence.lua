-- fence.lua: fencing tokens.

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
  -- A new hold: whatever was seen of the last holder's presence is moot
  -- (a semaphore's pa, its permit holders' absences, stays).
  if type(s.pa) ~= 'table' then s.pa = nil end
  return token, text
end
