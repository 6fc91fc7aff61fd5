-- Calls and recursion: naive Fibonacci, the worst case for a check at every function entry.
-- `...` is how many times to compute fib(20); returns the sum.
local n = ...

local function fib(k)
  if k < 2 then return k end
  return fib(k - 1) + fib(k - 2)
end

local sum = 0
for _ = 1, n do
  sum = sum + fib(20)
end
return sum
