-- sem_resize.lua: change how many permits one permit hold has, keeping its
-- token and lease: an RWMutex's writer that still holds the read lock keeps
-- one permit of all (a downgrade). Fewer permits wake the first waiter.
-- KEYS[1] the permits, KEYS[2] the gate's hold.
-- ARGV[1] owner id of the hold, ARGV[2] its token, ARGV[3] its new number of
-- permits, ARGV[4] publish command, ARGV[5] channel.
-- Returns 1 done (also when it already had that number: safe to retry), 0
-- when the hold is gone.
local owner, token, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local s = load()
local bad = layout_error(s)
if bad then return bad end
local now = clock()
local w = {}

local mine = own_permit(s, w, now, owner, token)
if not mine then return 0 end
s.p[owner] = permit_record(n, mine.x, token, mine.label)
w.p = s.p
save(s, w)
if n < mine.n then wake_gate(KEYS[2], now, ARGV[4], ARGV[5]) end
return 1
