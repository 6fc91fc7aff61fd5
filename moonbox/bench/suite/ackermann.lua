-- Calls: the Ackermann function, deep non-tail recursion with tiny bodies.
local function ack(m, n)
  if m == 0 then return n + 1 end
  if n == 0 then return ack(m - 1, 1) end
  return ack(m - 1, ack(m, n - 1))
end

local sum = 0
for n = 1, 8 do
  sum = sum + ack(2, n * 50) + ack(3, n)
end
for _ = 1, 10 do sum = sum + ack(3, 8) end
assert(sum == 28130, sum)
return sum
