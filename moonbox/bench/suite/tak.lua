-- Calls: Takeuchi's function, three-argument recursion.
local function tak(x, y, z)
  if y >= x then return z end
  return tak(tak(x - 1, y, z), tak(y - 1, z, x), tak(z - 1, x, y))
end

local sum = 0
for i = 0, 79 do
  sum = sum + tak(20 + i % 3, 12, 6)
end
assert(sum == 695, sum)
return sum
