-- Cost of one host call: the same loop with and without a call to the `add` binding.
-- `...` is the loop count and whether to call; the difference in time is n calls.
local n, call = ...
local x = 0
if call then
  for _ = 1, n do x = add(x, 1) end
else
  for _ = 1, n do x = x + 1 end
end
return x
