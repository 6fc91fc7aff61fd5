-- Poking at the walls: none of these reach the host.
local found = {}
for _, name in ipairs({ "python", "debug", "io", "os", "load", "require", "getfenv", "jit" }) do
  if _G[name] ~= nil then found[#found + 1] = name end
end
report("host handles found: " .. (#found == 0 and "none" or table.concat(found, ", ")))
report("string.dump through the string metatable: " .. tostring(("").dump))
return #found
