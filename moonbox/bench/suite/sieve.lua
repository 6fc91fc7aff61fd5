-- Arrays: the sieve of Eratosthenes on a boolean table, repeated.
local N = 1000000

local function sieve(n)
  local composite = {}
  for i = 1, n do composite[i] = false end
  local count = 0
  for i = 2, n do
    if not composite[i] then
      count = count + 1
      for j = i * i, n, i do composite[j] = true end
    end
  end
  return count
end

local total = 0
for _ = 1, 4 do total = total + sieve(N) end
assert(total == 4 * 78498, total)
return total
