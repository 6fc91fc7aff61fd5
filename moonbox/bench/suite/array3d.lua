-- Nested numeric loops with small bodies over a 3-D grid of nested tables: fill, then
-- repeated neighbour sums (a few arithmetic operations per innermost iteration).
local N = 64

local function grid(n)
  local g = {}
  for i = 1, n do
    local plane = {}
    for j = 1, n do
      local row = {}
      for k = 1, n do row[k] = (i * 7 + j * 3 + k) % 11 end
      plane[j] = row
    end
    g[i] = plane
  end
  return g
end

local a, b = grid(N), grid(N)
for _ = 1, 80 do
  for i = 2, N - 1 do
    local ap, am, an, bp = a[i], a[i - 1], a[i + 1], b[i]
    for j = 2, N - 1 do
      local row, up, down, left, right, out = ap[j], am[j], an[j], ap[j - 1], ap[j + 1], bp[j]
      for k = 2, N - 1 do
        out[k] = (row[k - 1] + row[k + 1] + up[k] + down[k] + left[k] + right[k]) % 1000
      end
    end
  end
  a, b = b, a
end

local sum = 0
for i = 1, N do
  for j = 1, N do
    local row = a[i][j]
    for k = 1, N do sum = sum + row[k] end
  end
end
assert(sum == 119058749, sum)
return sum
