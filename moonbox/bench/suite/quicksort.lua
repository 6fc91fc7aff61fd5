-- Sorting: a hand-written quicksort (median of three, insertion sort for short runs) and
-- a heapsort over arrays of numbers.
local seed = 31337
local function rand(n)
  seed = (seed * 16807) % 2147483647
  return seed % n
end

local function insertion(t, lo, hi)
  for i = lo + 1, hi do
    local v, j = t[i], i - 1
    while j >= lo and t[j] > v do
      t[j + 1] = t[j]
      j = j - 1
    end
    t[j + 1] = v
  end
end

local function quicksort(t, lo, hi)
  while hi - lo > 16 do
    local mid = lo + (hi - lo - (hi - lo) % 2) / 2
    if t[mid] < t[lo] then t[mid], t[lo] = t[lo], t[mid] end
    if t[hi] < t[lo] then t[hi], t[lo] = t[lo], t[hi] end
    if t[hi] < t[mid] then t[hi], t[mid] = t[mid], t[hi] end
    local pivot = t[mid]
    local i, j = lo, hi
    while i <= j do
      while t[i] < pivot do i = i + 1 end
      while t[j] > pivot do j = j - 1 end
      if i <= j then
        t[i], t[j] = t[j], t[i]
        i, j = i + 1, j - 1
      end
    end
    if j - lo < hi - i then
      quicksort(t, lo, j)
      lo = i
    else
      quicksort(t, i, hi)
      hi = j
    end
  end
  insertion(t, lo, hi)
end

local function heapsort(t, n)
  local function sift(start, stop)
    local root = start
    while 2 * root <= stop do
      local child = 2 * root
      if child + 1 <= stop and t[child] < t[child + 1] then child = child + 1 end
      if t[root] >= t[child] then return end
      t[root], t[child] = t[child], t[root]
      root = child
    end
  end
  for start = (n - n % 2) / 2, 1, -1 do sift(start, n) end
  for stop = n, 2, -1 do
    t[1], t[stop] = t[stop], t[1]
    sift(1, stop - 1)
  end
end

local N = 50000
local total = 0
for round = 1, 3 do
  local a, b = {}, {}
  for i = 1, N do
    local v = rand(1000000)
    a[i], b[i] = v, v
  end
  quicksort(a, 1, N)
  heapsort(b, N)
  for i = 1, N do assert(a[i] == b[i], "sorts disagree") end
  for i = 2, N do assert(a[i - 1] <= a[i], "not sorted") end
  total = total + a[1] + a[N] + a[N / 2] + round
end
assert(total == 4498317, total)
return total
