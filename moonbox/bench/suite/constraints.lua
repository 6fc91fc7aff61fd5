-- Objects: an incremental constraint solver. Variables joined by constraints of several
-- classes (stay, edit, equality, scale with offset), each with a strength; planning
-- satisfies the strongest first and orients each two-way constraint from what is already
-- determined, then the plan runs through virtual calls. Chains and projections, edited
-- at one end and checked at the other.
local REQUIRED, STRONG, MEDIUM, WEAK = 0, 1, 2, 3

local Variable = {}
Variable.__index = Variable
local function variable(name, value)
  return setmetatable({ name = name, value = value, constraints = {}, determined_by = nil },
    Variable)
end

local Constraint = {}
Constraint.__index = Constraint
function Constraint:satisfied() return self.output ~= nil end

local Unary = setmetatable({}, { __index = Constraint })
Unary.__index = Unary
function Unary:variables() return self.v end
function Unary:try_satisfy()
  if self.v.determined_by == nil then
    self.output = self.v
    self.v.determined_by = self
    return true
  end
  return false
end
function Unary:execute() end

local Stay = setmetatable({}, { __index = Unary })
Stay.__index = Stay
local Edit = setmetatable({}, { __index = Unary })
Edit.__index = Edit
function Edit:execute() self.v.value = self.target end

local Binary = setmetatable({}, { __index = Constraint })
Binary.__index = Binary
-- Orients the constraint away from the side already determined.
function Binary:orient_from(known)
  local other = known == self.a and self.b or self.a
  if other.determined_by ~= nil then return nil end
  self.output = other
  other.determined_by = self
  return other
end
function Binary:other(v) return v == self.a and self.b or self.a end

local Equal = setmetatable({}, { __index = Binary })
Equal.__index = Equal
function Equal:execute()
  if self.output == self.b then self.b.value = self.a.value else self.a.value = self.b.value end
end

local Scale = setmetatable({}, { __index = Binary })
Scale.__index = Scale
function Scale:execute()
  if self.output == self.b then
    self.b.value = self.a.value * self.scale.value + self.offset.value
  else
    self.a.value = (self.b.value - self.offset.value) / self.scale.value
  end
end

local function new(class, strength, fields)
  fields.strength = strength
  local c = setmetatable(fields, class)
  if fields.v then
    local list = fields.v.constraints
    list[#list + 1] = c
  else
    local la, lb = fields.a.constraints, fields.b.constraints
    la[#la + 1] = c
    lb[#lb + 1] = c
  end
  return c
end

local Solver = {}
Solver.__index = Solver
local function solver() return setmetatable({ vars = {}, unary = {}, plan = {} }, Solver) end
function Solver:var(name, value)
  local v = variable(name, value)
  self.vars[#self.vars + 1] = v
  return v
end
function Solver:add_unary(c)
  self.unary[#self.unary + 1] = c
  return c
end
function Solver:remove_unary(c)
  for i = #self.unary, 1, -1 do
    if self.unary[i] == c then table.remove(self.unary, i) end
  end
  local list = c.v.constraints
  for i = #list, 1, -1 do if list[i] == c then table.remove(list, i) end end
end

-- Plans by strength, strongest first: at each level the unary constraints of that
-- strength determine their variables if still free, then determination spreads from
-- every determined variable through the two-way constraints as strong or stronger.
function Solver:replan()
  for _, v in ipairs(self.vars) do
    v.determined_by = nil
    for _, c in ipairs(v.constraints) do c.output = nil end
  end
  local plan, frontier = {}, {}
  for level = REQUIRED, WEAK do
    for _, c in ipairs(self.unary) do
      if c.strength == level and c:try_satisfy() then
        plan[#plan + 1] = c
        frontier[#frontier + 1] = c.v
      end
    end
    local head = 1
    while head <= #frontier do
      local v = frontier[head]
      head = head + 1
      for _, c in ipairs(v.constraints) do
        if c.a and c.output == nil and c.strength <= level then
          local out = c:orient_from(v)
          if out then
            plan[#plan + 1] = c
            frontier[#frontier + 1] = out
          end
        end
      end
    end
  end
  self.plan = plan
end

function Solver:run_plan()
  local plan = self.plan
  for i = 1, #plan do plan[i]:execute() end
end

local function chain_test(n)
  local s = solver()
  local prev, first
  for i = 1, n do
    local v = s:var("v" .. i, 0)
    if prev then new(Equal, REQUIRED, { a = prev, b = v }) else first = v end
    prev = v
  end
  s:add_unary(new(Stay, STRONG, { v = prev }))
  local edit = s:add_unary(new(Edit, REQUIRED, { v = first, target = 0 }))
  s:replan()
  local sum = 0
  for i = 1, 100 do
    edit.target = i
    s:run_plan()
    assert(prev.value == i, "chain failed")
    sum = sum + prev.value
  end
  s:remove_unary(edit)
  return sum
end

local function projection_test(n)
  local s = solver()
  local scale, offset = s:var("scale", 10), s:var("offset", 1000)
  s:add_unary(new(Stay, REQUIRED, { v = scale }))
  s:add_unary(new(Stay, REQUIRED, { v = offset }))
  local srcs, dsts = {}, {}
  for i = 1, n do
    local src, dst = s:var("src" .. i, i), s:var("dst" .. i, i)
    srcs[i], dsts[i] = src, dst
    s:add_unary(new(Stay, MEDIUM, { v = src }))
    s:add_unary(new(Stay, WEAK, { v = dst }))
    new(Scale, REQUIRED, { a = src, b = dst, scale = scale, offset = offset })
  end
  local sum = 0
  -- Edit a source: its destination follows.
  local edit = s:add_unary(new(Edit, STRONG, { v = srcs[1], target = 17 }))
  s:replan()
  s:run_plan()
  assert(dsts[1].value == 1170, "projection 1 failed")
  s:remove_unary(edit)
  -- Edit a destination: its source is solved backwards.
  edit = s:add_unary(new(Edit, REQUIRED, { v = dsts[n], target = 2000 }))
  s:replan()
  s:run_plan()
  assert(srcs[n].value == 100, "projection 2 failed")
  s:remove_unary(edit)
  for i = 1, n do sum = sum + dsts[i].value end
  return sum
end

local total = 0
for round = 1, 10 do
  total = total + chain_test(2000) + projection_test(1000) + round
end
assert(total == 60012155, total)
return total
