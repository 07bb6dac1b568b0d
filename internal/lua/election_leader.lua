-- election_leader.lua: read-only, who leads an election now
-- (fair.Election.Leader, and its observers' fallback). Changes nothing.
-- KEYS[1] the election's hold.
-- Returns leadership_text (hold.lua): the version, term, start of the term,
-- expiry, Redis's clock, value and origin; term 0 when nobody leads.
local s = load()
local bad = layout_error(s)
if bad then return bad end
return leadership_text(s, clock())
