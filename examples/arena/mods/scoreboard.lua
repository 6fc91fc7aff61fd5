-- scoreboard: other mods add points through an exported function; the standings live in
-- this mod's state and are announced every 10 ticks.

-- add{player = name, points = n}: called by other mods; returns the player's new total.
export("add", function(entry)
  local scores = state_get("scores") or {}
  scores[entry.player] = (scores[entry.player] or 0) + entry.points
  state_set("scores", scores)
  return scores[entry.player]
end)

every(10, function(t)
  local scores = state_get("scores") or {}
  local names = {}
  for name in pairs(scores) do names[#names + 1] = name end
  -- Highest first, ties by name, so the order never depends on the table's layout.
  table.sort(names, function(a, b)
    if scores[a] ~= scores[b] then return scores[a] > scores[b] end
    return a < b
  end)
  local parts = {}
  for i, name in ipairs(names) do parts[i] = name .. " " .. scores[name] end
  report("tick " .. t .. ": " .. (#parts > 0 and table.concat(parts, ", ") or "no points yet"))
  emit("standings", scores)
end)
