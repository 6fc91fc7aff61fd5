-- Arrays: Conway's game of life on a torus, two grids of rows swapped each generation,
-- eight neighbour reads per cell.
local W, H = 128, 128

local seed = 1
local function rand(n)
  seed = (seed * 16807) % 2147483647
  return seed % n
end

local function grid(fill)
  local g = {}
  for y = 0, H - 1 do
    local row = {}
    for x = 0, W - 1 do row[x] = fill and (rand(4) == 0 and 1 or 0) or 0 end
    g[y] = row
  end
  return g
end

local cur, nxt = grid(true), grid(false)
for _ = 1, 250 do
  for y = 0, H - 1 do
    local up, row, down = cur[(y - 1) % H], cur[y], cur[(y + 1) % H]
    local out = nxt[y]
    for x = 0, W - 1 do
      local l, r = (x - 1) % W, (x + 1) % W
      local n = up[l] + up[x] + up[r] + row[l] + row[r] + down[l] + down[x] + down[r]
      if n == 3 or (n == 2 and row[x] == 1) then out[x] = 1 else out[x] = 0 end
    end
  end
  cur, nxt = nxt, cur
end

local alive = 0
for y = 0, H - 1 do
  local row = cur[y]
  for x = 0, W - 1 do alive = alive + row[x] end
end
assert(alive == 1014, alive)
return alive
