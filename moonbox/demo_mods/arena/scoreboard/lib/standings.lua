-- standings: the scores as one line, highest first, ties by name, so the order never
-- depends on the table's layout. Required by main.lua as require("lib.standings").

local M = {}

function M.line(scores)
  local names = {}
  for name in pairs(scores) do names[#names + 1] = name end
  table.sort(names, function(a, b)
    if scores[a] ~= scores[b] then return scores[a] > scores[b] end
    return a < b
  end)
  local parts = {}
  for i, name in ipairs(names) do parts[i] = name .. " " .. scores[name] end
  return #parts > 0 and table.concat(parts, ", ") or "no points yet"
end

return M
