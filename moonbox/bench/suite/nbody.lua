-- Floating point: a gravitational n-body simulation of five bodies, objects as tables
-- with named fields, an O(n^2) pairwise inner loop.
local PI = 3.141592653589793
local SOLAR_MASS = 4 * PI * PI
local DAYS = 365.24

local function body(x, y, z, vx, vy, vz, mass)
  return { x = x, y = y, z = z, vx = vx * DAYS, vy = vy * DAYS, vz = vz * DAYS,
           mass = mass * SOLAR_MASS }
end

local bodies = {
  body(0, 0, 0, 0, 0, 0, 1),
  body(4.84, -1.16, -0.10, 1.66e-3, 7.70e-3, -6.90e-5, 9.55e-4),
  body(8.34, 4.12, -0.40, -2.77e-3, 5.00e-3, 2.30e-5, 2.86e-4),
  body(12.89, -15.11, -0.22, 2.96e-3, 2.37e-3, -2.96e-5, 4.37e-5),
  body(15.38, -25.92, 0.18, 2.68e-3, 1.63e-3, -9.52e-5, 5.15e-5),
}
local n = #bodies

local function offset_momentum()
  local px, py, pz = 0, 0, 0
  for i = 1, n do
    local b = bodies[i]
    px, py, pz = px + b.vx * b.mass, py + b.vy * b.mass, pz + b.vz * b.mass
  end
  local sun = bodies[1]
  sun.vx, sun.vy, sun.vz = -px / SOLAR_MASS, -py / SOLAR_MASS, -pz / SOLAR_MASS
end

local function advance(dt)
  for i = 1, n do
    local bi = bodies[i]
    local bix, biy, biz, bimass = bi.x, bi.y, bi.z, bi.mass
    local bivx, bivy, bivz = bi.vx, bi.vy, bi.vz
    for j = i + 1, n do
      local bj = bodies[j]
      local dx, dy, dz = bix - bj.x, biy - bj.y, biz - bj.z
      local d2 = dx * dx + dy * dy + dz * dz
      local mag = dt / (d2 * math.sqrt(d2))
      local bm = bj.mass * mag
      bivx, bivy, bivz = bivx - dx * bm, bivy - dy * bm, bivz - dz * bm
      bm = bimass * mag
      bj.vx, bj.vy, bj.vz = bj.vx + dx * bm, bj.vy + dy * bm, bj.vz + dz * bm
    end
    bi.vx, bi.vy, bi.vz = bivx, bivy, bivz
    bi.x, bi.y, bi.z = bix + dt * bivx, biy + dt * bivy, biz + dt * bivz
  end
end

local function energy()
  local e = 0
  for i = 1, n do
    local bi = bodies[i]
    e = e + 0.5 * bi.mass * (bi.vx * bi.vx + bi.vy * bi.vy + bi.vz * bi.vz)
    for j = i + 1, n do
      local bj = bodies[j]
      local dx, dy, dz = bi.x - bj.x, bi.y - bj.y, bi.z - bj.z
      e = e - bi.mass * bj.mass / math.sqrt(dx * dx + dy * dy + dz * dz)
    end
  end
  return e
end

offset_momentum()
local before = energy()
for _ = 1, 400000 do advance(0.01) end
local after = energy()
local checksum = string.format("%.9f %.9f", before, after)
assert(checksum == "-0.169184971 -0.169152651", checksum)
return checksum
