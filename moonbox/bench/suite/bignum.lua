-- Integers in arrays: arbitrary-precision arithmetic on arrays of base-10^7 limbs:
-- factorials by multiplication, Fibonacci numbers by addition, and a digit sum of each.
local BASE = 10000000

local function from_int(n) return { n } end

local function mul_small(a, m)
  local carry = 0
  for i = 1, #a do
    local v = a[i] * m + carry
    carry = math.floor(v / BASE)
    a[i] = v - carry * BASE
  end
  while carry > 0 do
    local next_carry = math.floor(carry / BASE)
    a[#a + 1] = carry - next_carry * BASE
    carry = next_carry
  end
  return a
end

local function add(a, b)
  local r, carry = {}, 0
  for i = 1, math.max(#a, #b) do
    local v = (a[i] or 0) + (b[i] or 0) + carry
    if v >= BASE then r[i], carry = v - BASE, 1 else r[i], carry = v, 0 end
  end
  if carry > 0 then r[#r + 1] = carry end
  return r
end

local function digit_sum(a)
  local sum = 0
  for i = 1, #a do
    local v = a[i]
    while v > 0 do
      local d = v % 10
      sum = sum + d
      v = (v - d) / 10
    end
  end
  return sum
end

local total = 0
for round = 1, 3 do
  local f = from_int(1)
  for k = 2, 1600 + round * 200 do mul_small(f, k) end
  total = total + digit_sum(f) + #f
  local a, b = from_int(0), from_int(1)
  for _ = 1, 9000 do a, b = b, add(a, b) end
  total = total + digit_sum(a) + #a
end
assert(total == 99334, total)
return total
