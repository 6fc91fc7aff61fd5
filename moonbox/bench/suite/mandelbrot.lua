-- Floating point: points of the Mandelbrot set on a grid, an inner while loop per point.
local SIZE, ITER = 1000, 50

local inside = 0
for y = 0, SIZE - 1 do
  local ci = 2 * y / SIZE - 1
  for x = 0, SIZE - 1 do
    local cr = 2 * x / SIZE - 1.5
    local zr, zi, k = 0.0, 0.0, 0
    while k < ITER do
      local zr2, zi2 = zr * zr, zi * zi
      if zr2 + zi2 > 4 then break end
      zi = 2 * zr * zi + ci
      zr = zr2 - zi2 + cr
      k = k + 1
    end
    if k == ITER then inside = inside + 1 end
  end
end
assert(inside == 397380, inside)
return inside
