-- moonbox fuzz: a sandbox's view of its own environment, as one comparable value.
--
-- Runs as mod code in the sibling sandbox, before and after every fuzzed program: if any
-- program changed the sibling's globals, library tables, string methods, string metatable
-- or random sequence, the fingerprint differs. It changes nothing itself except the random
-- state, which it seeds first.

local names = {}
for name, value in next, _G do
  names[#names + 1] = tostring(name) .. ":" .. type(value)
  if type(value) == "table" and name ~= "_G" then
    for field, v in next, value do
      names[#names + 1] = tostring(name) .. "." .. tostring(field) .. ":" .. type(v)
    end
  end
end
table.sort(names)
math.randomseed(7)
local mt = getmetatable("")
return table.concat(names, " "), type(mt), tostring(mt), ("abc"):upper(), ("x"):rep(3),
  1 + 1, math.random(1000), math.pi, undefined_global == nil
