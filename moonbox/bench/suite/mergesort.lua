-- Sorting: a hand-written top-down merge sort with a scratch array, stable, on records by
-- key, and a bottom-up merge sort of numbers.
local seed = 4242
local function rand(n)
  seed = (seed * 16807) % 2147483647
  return seed % n
end

local function merge_sort(t, tmp, lo, hi, key)
  if hi - lo < 1 then return end
  local mid = lo + (hi - lo - (hi - lo) % 2) / 2
  merge_sort(t, tmp, lo, mid, key)
  merge_sort(t, tmp, mid + 1, hi, key)
  local i, j, k = lo, mid + 1, lo
  while i <= mid and j <= hi do
    if t[j][key] < t[i][key] then tmp[k] = t[j]; j = j + 1
    else tmp[k] = t[i]; i = i + 1 end
    k = k + 1
  end
  while i <= mid do tmp[k] = t[i]; i = i + 1; k = k + 1 end
  while j <= hi do tmp[k] = t[j]; j = j + 1; k = k + 1 end
  for m = lo, hi do t[m] = tmp[m] end
end

local function bottom_up(a, n)
  local b = {}
  local width = 1
  while width < n do
    local lo = 1
    while lo <= n do
      local mid, hi = math.min(lo + width - 1, n), math.min(lo + 2 * width - 1, n)
      local i, j, k = lo, mid + 1, lo
      while i <= mid and j <= hi do
        if a[j] < a[i] then b[k] = a[j]; j = j + 1 else b[k] = a[i]; i = i + 1 end
        k = k + 1
      end
      while i <= mid do b[k] = a[i]; i = i + 1; k = k + 1 end
      while j <= hi do b[k] = a[j]; j = j + 1; k = k + 1 end
      lo = lo + 2 * width
    end
    a, b = b, a
    width = width * 2
  end
  return a
end

local N = 25000
local total = 0
for round = 1, 5 do
  local records = {}
  for i = 1, N do records[i] = { key = rand(1000), order = i } end
  merge_sort(records, {}, 1, N, "key")
  for i = 2, N do
    local p, q = records[i - 1], records[i]
    assert(p.key < q.key or (p.key == q.key and p.order < q.order), "not stable")
  end
  local nums = {}
  for i = 1, N do nums[i] = rand(1000000) end
  nums = bottom_up(nums, N)
  for i = 2, N do assert(nums[i - 1] <= nums[i], "not sorted") end
  total = total + records[1].order + records[N].order + nums[1] + nums[N] + round
end
assert(total == 5124810, total)
return total
