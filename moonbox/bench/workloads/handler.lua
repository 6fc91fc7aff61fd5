-- A typical event handler: a small function, called once per event, that reads an event
-- table, updates the mod's state and calls a binding (`add`, a host function).
-- `...` is how many events to deliver; returns a checksum of the state.
local n = ...
local KINDS = { "damage", "heal", "spawn" }
local state = { events = 0, score = 0, by_kind = {}, last_target = 0 }

local function on_event(event)
  state.events = state.events + 1
  state.by_kind[event.kind] = (state.by_kind[event.kind] or 0) + 1
  state.score = add(state.score, event.amount)   -- one host call per event
  state.last_target = event.target
end

for i = 1, n do
  on_event({ kind = KINDS[i % 3 + 1], amount = i % 10, target = i })
end
return state.events + state.score + state.by_kind.damage + state.last_target
