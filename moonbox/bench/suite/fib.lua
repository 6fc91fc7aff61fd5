-- Calls: naive doubly recursive Fibonacci, one function entry per call.
local function fib(n)
  if n < 2 then return n end
  return fib(n - 1) + fib(n - 2)
end

local result = fib(32) + fib(31)
assert(result == 3524578, result)
return result
