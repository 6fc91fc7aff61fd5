-- A mod that tries to survive its budget: catch the trip, then keep going.
local ok = pcall(function()
  while true do end
end)
report("still running after the trip?")  -- never printed: the trip is sticky
return ok
