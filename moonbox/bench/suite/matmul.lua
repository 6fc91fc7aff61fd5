-- Floating point: dense matrix multiplication, triple nested loop over arrays of rows.
local N = 200

local function matrix(n, seed)
  local m = {}
  for i = 1, n do
    local row = {}
    for j = 1, n do row[j] = ((i * seed + j * 7) % 17) / 8 - 1 end
    m[i] = row
  end
  return m
end

local function multiply(a, b, n)
  local c = {}
  for i = 1, n do
    local ai, ci = a[i], {}
    for j = 1, n do
      local s = 0.0
      for k = 1, n do s = s + ai[k] * b[k][j] end
      ci[j] = s
    end
    c[i] = ci
  end
  return c
end

local a, b = matrix(N, 3), matrix(N, 5)
local c
for _ = 1, 6 do c = multiply(a, b, N) end
local trace = 0
for i = 1, N do trace = trace + c[i][i] + c[i][N + 1 - i] end
local rounded = math.floor(trace * 1000 + 0.5)
assert(rounded == -2518391, rounded)
return rounded
