-- Objects: a class hierarchy built with metatables (inheritance through __index chains,
-- overridden methods, constructors calling their parent's), many objects linked into a
-- graph, and virtual calls over them.
local function class(parent)
  local c = {}
  c.__index = c
  if parent then setmetatable(c, { __index = parent }) end
  c.new = function(...)
    local o = setmetatable({}, c)
    o:init(...)
    return o
  end
  return c
end

local Shape = class()
function Shape:init(id) self.id = id; self.links = {} end
function Shape:area() return 0 end
function Shape:link(other) self.links[#self.links + 1] = other end
function Shape:weight()
  local w = self:area()
  for i = 1, #self.links do w = w + self.links[i]:area() * 0.5 end
  return w
end

local Rect = class(Shape)
function Rect:init(id, w, h) Shape.init(self, id); self.w = w; self.h = h end
function Rect:area() return self.w * self.h end

local Square = class(Rect)
function Square:init(id, s) Rect.init(self, id, s, s) end

local Circle = class(Shape)
function Circle:init(id, r) Shape.init(self, id); self.r = r end
function Circle:area() return 3 * self.r * self.r end

local Tri = class(Shape)
function Tri:init(id, b, h) Shape.init(self, id); self.b = b; self.h = h end
function Tri:area() return self.b * self.h / 2 end

local seed = 42
local function rand(n)
  seed = (seed * 16807) % 2147483647
  return seed % n
end

local total = 0
for round = 1, 5 do
  local objects = {}
  for i = 1, 20000 do
    local kind = rand(4)
    local o
    if kind == 0 then o = Rect.new(i, rand(10) + 1, rand(10) + 1)
    elseif kind == 1 then o = Square.new(i, rand(10) + 1)
    elseif kind == 2 then o = Circle.new(i, rand(5) + 1)
    else o = Tri.new(i, rand(10) + 1, 2 * (rand(10) + 1)) end
    objects[i] = o
  end
  for i = 1, #objects do
    local o = objects[i]
    for _ = 1, 3 do o:link(objects[rand(#objects) + 1]) end
  end
  local sum = 0
  for i = 1, #objects do sum = sum + objects[i]:weight() end
  total = total + sum + round
end
assert(total == 8243955, total)
return total
