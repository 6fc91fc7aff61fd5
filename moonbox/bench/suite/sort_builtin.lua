-- Sorting: table.sort without a comparator, on numbers and on strings, several orders
-- (random, sorted, reversed, few distinct values), each result checked.
local seed = 2024
local function rand(n)
  seed = (seed * 16807) % 2147483647
  return seed % n
end

local function check(t)
  for i = 2, #t do assert(not (t[i] < t[i - 1]), "not sorted") end
end

local N = 3000
local total = 0
for round = 1, 70 do
  local nums = {}
  local kind = round % 4
  for i = 1, N do
    if kind == 0 then nums[i] = rand(1000000)
    elseif kind == 1 then nums[i] = i
    elseif kind == 2 then nums[i] = N - i
    else nums[i] = rand(10) end
  end
  table.sort(nums)
  check(nums)
  total = total + nums[1] + nums[N / 2] + nums[N]
  local words = {}
  for i = 1, N / 3 do words[i] = "w" .. rand(100000) end
  table.sort(words)
  check(words)
  total = total + #words[1] + #words[#words]
end
assert(total == 25612407, total)
return total
