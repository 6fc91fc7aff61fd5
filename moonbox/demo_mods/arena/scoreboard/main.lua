-- scoreboard: other mods add points through an exported function; the standings live in
-- this mod's state (so they survive a reload) and are announced every 10 ticks.

local standings = require("lib.standings")

-- add{player = name, points = n}: called by other mods; returns the player's new total.
export("add", function(entry)
  local scores = state_get("scores") or {}
  scores[entry.player] = (scores[entry.player] or 0) + entry.points
  state_set("scores", scores)
  return scores[entry.player]
end)

every(10, function(t)
  local scores = state_get("scores") or {}
  report("tick " .. t .. ": " .. standings.line(scores))
  emit("standings", scores)
end)

-- After a hot reload: the state is already carried over; say so.
function on_reload(old_state)
  local n = 0
  for _ in pairs(old_state.scores or {}) do n = n + 1 end
  report("reloaded with the scores of " .. n .. " players")
end
