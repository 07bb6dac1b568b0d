-- wire.lua: every string the scripts build or read besides the hold's
-- JSON, in one place. Its mirror on the Go side is internal/transport (wire.go, argv.go): a change
-- to one is a change to both.
--
--   queue element   "<entry>|<lease ms>|<wait ms>|<request>|<origin>" (entry
--                   ids have no '|'; request is "" or, on a semaphore's
--                   gate, "<permit owner> <n> <lease ms>", what the waiter
--                   asks for, or in an election "=<value>", the candidate's
--                   value as the Go side escaped it (no '|', ' ' or ';');
--                   the origin, "<host>\t<pid>\t<label>", comes last and
--                   may hold anything)
--   owner id        "<client>.<handle>", client a go-redis client's id
--   entry id        "<owner>/<join number>"
--   permit record   "<n>|<expiry ms>|<token>|<g>|<origin>"
--   notes           one message carries one or more, separated by ';', each
--                   for the waiter its first word names:
--                     "<entry> <token> <grant ms>"                 hand-off
--                     "<entry> head <expiry ms>"                   head notice
--                     "<id> permits <token> <grant ms> <expiry ms>" permits served
--                     "<id> freed"                                 look again
--                   ("freed" is also the reentrant lock's wake-up: the lock
--                   was freed, and the waiter id is the longest-waiting)
--   inbox           "<channel>:<client>": every note is published there, to
--                   the client whose waiter it names (publish_notes), never
--                   on the shared channel

-- A permit request as a queue element holds it ("" for none).
local function request_text(owner, n, lease)
  if owner == nil or owner == '' then return '' end
  return owner .. ' ' .. int(n) .. ' ' .. int(lease)
end

-- The queue element of an entry; request as request_text makes it.
local function element(entry, lease, wait, request, origin)
  return entry .. '|' .. int(lease) .. '|' .. int(wait) .. '|' .. request .. '|' .. origin
end

-- The entry id of a queue element.
local function element_entry(element)
  return string.match(element, '^[^|]*')
end

-- What follows the entry id in a queue element:
-- "<lease>|<wait>|<request>|<origin>".
local function element_info(element)
  return string.match(element, '^[^|]*|(.*)$')
end

-- The lease and origin of a queue element; nil if fairlock did not write it.
local function element_lease(element)
  local lease, origin = string.match(element, '^[^|]*|(%d+)|%d+|[^|]*|(.*)$')
  return tonumber(lease), origin
end

-- The permit request of a queue element: the permit hold's owner id, the
-- permits and their lease; nil if it has none.
local function element_request(element)
  local owner, n, lease = string.match(element, '^[^|]*|%d+|%d+|([^| ]+) (%d+) (%d+)|')
  if owner == nil then return nil end
  return owner, tonumber(n), tonumber(lease)
end

-- An election candidate's value in its queue element (escaped, as it came);
-- nil if the element has none.
local function element_value(element)
  return string.match(element, '^[^|]*|%d+|%d+|=([^|]*)|')
end

-- The request field of a queue element: a permit request (request_text), or
-- an election candidate's value.
local function element_request_text(po, pn, pl, value)
  if value then return '=' .. value end
  return request_text(po, pn, pl)
end

-- The owner of a queue entry.
local function entry_owner(entry)
  return string.match(entry, '^(.*)/[^/]*$')
end

-- Semaphore: one permit hold's record (g: the grant time of permits served
-- to a waiter until it claims them, else 0).
local function permit_record(n, x, token, g, origin)
  return int(n) .. '|' .. int(x) .. '|' .. int(token) .. '|' .. int(g) .. '|' .. origin
end

-- Semaphore: a permit hold's record read back: n, expiry, token, g, origin;
-- nil if fairlock did not write it.
local function read_permit_record(rec)
  local n, x, t, g, origin = string.match(tostring(rec), '^(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
  return tonumber(n), tonumber(x), tonumber(t), tonumber(g), origin
end

-- Notes.
local function head_notice(head, expiry)
  return head .. ' head ' .. int(expiry)
end

local function handoff_note(entry, token, granted)
  return entry .. ' ' .. token .. ' ' .. int(granted)
end

local function permits_note(id, token, granted, expiry)
  return id .. ' permits ' .. int(token) .. ' ' .. int(granted) .. ' ' .. int(expiry)
end

local function freed_note(id)
  return id .. ' freed'
end

local function notes(list)
  return table.concat(list, ';')
end

-- The client a note is for: its first word (an entry or owner id) up to the
-- first '.'; the whole word if it has none (as Go's transport.ClientOf reads it).
local function note_client(note)
  return string.match(note, '^[^. ]*')
end

-- Publish the notes of list, each to the inbox of the client it names
-- (channel .. ':' .. client): one message per client, carrying its notes in
-- list order, the clients in the order they first appear. Only a client
-- with a waiter named gets anything, so a hand-off costs Redis the same
-- output however many clients wait.
local function publish_notes(publish, channel, list)
  if #list == 1 then
    redis.call(publish, channel .. ':' .. note_client(list[1]), list[1])
    return
  end
  local order, by = {}, {}
  for _, note in ipairs(list) do
    local client = note_client(note)
    local group = by[client]
    if group == nil then
      group = {}
      by[client] = group
      order[#order + 1] = client
    end
    group[#group + 1] = note
  end
  for _, client in ipairs(order) do
    redis.call(publish, channel .. ':' .. client, notes(by[client]))
  end
end
