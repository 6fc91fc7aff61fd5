-- Floating point: the spectral norm of an infinite matrix, by power iteration with
-- function calls in the inner loops.
local function a(i, j)
  local ij = i + j - 1
  return 1.0 / (ij * (ij - 1) * 0.5 + i)
end

local function av(x, y, n)
  for i = 1, n do
    local s = 0
    for j = 1, n do s = s + a(i, j) * x[j] end
    y[i] = s
  end
end

local function atv(x, y, n)
  for i = 1, n do
    local s = 0
    for j = 1, n do s = s + a(j, i) * x[j] end
    y[i] = s
  end
end

local function atav(x, y, t, n)
  av(x, t, n)
  atv(t, y, n)
end

local N = 1000
local u, v, t = {}, {}, {}
for i = 1, N do u[i] = 1 end
for _ = 1, 10 do
  atav(u, v, t, N)
  atav(v, u, t, N)
end
local vbv, vv = 0, 0
for i = 1, N do
  local ui, vi = u[i], v[i]
  vbv, vv = vbv + ui * vi, vv + vi * vi
end
local result = string.format("%.9f", math.sqrt(vbv / vv))
assert(result == "1.274224148", result)
return result
