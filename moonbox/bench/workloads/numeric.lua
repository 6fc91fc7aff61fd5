-- Numeric loops: a Mandelbrot set on a grid of `...` x 64 points, inner `while` loop of up
-- to 50 iterations per point. Returns how many points stay bounded (an exact integer).
local n = ...
local inside = 0
for row = 1, n do
  local ci = (row % 64) / 32 - 1.0
  for col = 1, 64 do
    local cr = col / 32 - 1.5
    local zr, zi, k = 0.0, 0.0, 0
    while k < 50 and zr * zr + zi * zi <= 4.0 do
      zr, zi = zr * zr - zi * zi + cr, 2 * zr * zi + ci
      k = k + 1
    end
    if k == 50 then inside = inside + 1 end
  end
end
return inside
