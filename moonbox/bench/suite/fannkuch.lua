-- Arrays: the pancake-flipping count over every permutation of n elements (permutations
-- generated in place by rotation), with a checksum of alternating signs.
local function fannkuch(n)
  local perm, perm1, count = {}, {}, {}
  for i = 0, n - 1 do perm1[i] = i end
  local max_flips, checksum, sign = 0, 0, 1
  local r = n
  while true do
    while r ~= 1 do
      count[r - 1] = r
      r = r - 1
    end
    for i = 0, n - 1 do perm[i] = perm1[i] end
    local flips = 0
    local k = perm[0]
    while k ~= 0 do
      local i, j = 0, k
      while i < j do
        perm[i], perm[j] = perm[j], perm[i]
        i, j = i + 1, j - 1
      end
      flips = flips + 1
      k = perm[0]
    end
    if flips > max_flips then max_flips = flips end
    checksum = checksum + sign * flips
    sign = -sign
    while true do
      if r == n then return checksum, max_flips end
      local first = perm1[0]
      for i = 0, r - 1 do perm1[i] = perm1[i + 1] end
      perm1[r] = first
      count[r] = count[r] - 1
      if count[r] > 0 then break end
      r = r + 1
    end
  end
end

local checksum, flips = fannkuch(9)
local c2, f2 = fannkuch(9)
local result = checksum * 100 + flips + c2 + f2
assert(result == 871589, result)
return result
