-- moonbox fuzz: which functions of a fresh mod environment the prelude wrapped.
--
-- Runs with the runtime's real globals. Given a freshly built environment, returns the
-- names ("pcall", "coroutine.resume", ...) whose value is not the runtime's own function:
-- the real versions of those must never be reachable from a mod (reach.lua checks it).

local env = ...
local names = {}
for name, value in next, env do
  local real = rawget(_G, name)
  if name ~= "_G" and type(value) == "table" and type(real) == "table" then
    for field, fn in next, value do
      if type(fn) == "function" and real[field] ~= nil and real[field] ~= fn then
        names[#names + 1] = name .. "." .. field
      end
    end
  elseif type(value) == "function" and real ~= nil and real ~= value then
    names[#names + 1] = name
  end
end
table.sort(names)
return table.concat(names, " ")
