-- Objects and floating point: a small ray tracer. Vectors are tables made by a
-- constructor with metamethods (+, -, *), so the hot path allocates; a scene of spheres
-- and a plane, diffuse lighting with shadows, one reflection bounce.
local Vec = {}
Vec.__index = Vec
local function vec(x, y, z) return setmetatable({ x = x, y = y, z = z }, Vec) end
Vec.__add = function(a, b) return vec(a.x + b.x, a.y + b.y, a.z + b.z) end
Vec.__sub = function(a, b) return vec(a.x - b.x, a.y - b.y, a.z - b.z) end
Vec.__mul = function(a, s) return vec(a.x * s, a.y * s, a.z * s) end
function Vec:dot(b) return self.x * b.x + self.y * b.y + self.z * b.z end
function Vec:norm()
  local l = math.sqrt(self:dot(self))
  return vec(self.x / l, self.y / l, self.z / l)
end

local Sphere = {}
Sphere.__index = Sphere
local function sphere(center, radius, shade)
  return setmetatable({ center = center, radius = radius, shade = shade }, Sphere)
end
function Sphere:hit(origin, dir)
  local oc = origin - self.center
  local b = oc:dot(dir)
  local c = oc:dot(oc) - self.radius * self.radius
  local disc = b * b - c
  if disc < 0 then return nil end
  local t = -b - math.sqrt(disc)
  if t > 1e-4 then return t end
  return nil
end
function Sphere:normal(p) return (p - self.center):norm() end

local Plane = {}
Plane.__index = Plane
local function plane(y, shade) return setmetatable({ y = y, shade = shade }, Plane) end
function Plane:hit(origin, dir)
  if dir.y > -1e-6 then return nil end
  local t = (self.y - origin.y) / dir.y
  if t > 1e-4 then return t end
  return nil
end
function Plane:normal() return vec(0, 1, 0) end

local scene = {
  sphere(vec(0, 1, 5), 1, 0.9), sphere(vec(-2, 0.6, 6), 0.6, 0.7),
  sphere(vec(2, 0.8, 4.5), 0.8, 0.5), sphere(vec(0.8, 0.3, 3), 0.3, 0.8),
  plane(0, 0.6),
}
local light = vec(-5, 8, -2)

local function nearest(origin, dir)
  local best, hit = math.huge, nil
  for i = 1, #scene do
    local t = scene[i]:hit(origin, dir)
    if t and t < best then best, hit = t, scene[i] end
  end
  return hit, best
end

local function trace(origin, dir, depth)
  local obj, t = nearest(origin, dir)
  if not obj then return 0.1 end
  local p = origin + dir * t
  local n = obj:normal(p)
  local to_light = (light - p):norm()
  local diffuse = math.max(0, n:dot(to_light))
  if diffuse > 0 and nearest(p, to_light) then diffuse = diffuse * 0.3 end
  local color = obj.shade * (0.15 + 0.85 * diffuse)
  if depth > 0 then
    local r = dir - n * (2 * dir:dot(n))
    color = color * 0.8 + 0.2 * trace(p, r, depth - 1)
  end
  return color
end

local W, H = 480, 360
local eye = vec(0, 1.2, -1)
local sum = 0
for y = 0, H - 1 do
  for x = 0, W - 1 do
    local dir = vec((x - W / 2) / H, (H / 2 - y) / H, 1):norm()
    sum = sum + math.floor(trace(eye, dir, 1) * 255)
  end
end
assert(sum == 10812369, sum)
return sum
