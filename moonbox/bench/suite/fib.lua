-- Calls: naive doubly recursive Fibonacci, one function entry per call.
local function fib(n)
  if n < 2 then return n end
  return fib(n - 1) + fib(n - 2)
end

local result = fib(33) + fib(32)
assert(result == 5702887, result)
return result
