-- A game mod's kind of work: entities with components in tables keyed by name, systems
-- run each tick over them, events queued and dispatched to handlers registered by name
-- (varargs, pcall around each handler), and a spatial hash rebuilt every tick.
local seed = 2718
local function rand(n)
  seed = (seed * 16807) % 2147483647
  return seed % n
end

local handlers = {}
local function on(event, fn)
  local list = handlers[event]
  if not list then list = {} handlers[event] = list end
  list[#list + 1] = fn
end
local queue, queued = {}, 0
local function emit(event, ...)
  queued = queued + 1
  queue[queued] = { event, select("#", ...), ... }
end
local function dispatch()
  local handled = 0
  for i = 1, queued do
    local e = queue[i]
    local list = handlers[e[1]]
    if list then
      for j = 1, #list do
        local ok = pcall(list[j], unpack(e, 3, 2 + e[2]))
        if ok then handled = handled + 1 end
      end
    end
    queue[i] = nil
  end
  queued = 0
  return handled
end

local entities = {}
for i = 1, 2000 do
  entities[i] = {
    id = i,
    position = { x = rand(1000), y = rand(1000) },
    velocity = { x = rand(11) - 5, y = rand(11) - 5 },
    health = { value = 100, max = 100 },
    tags = { enemy = i % 3 == 0, flying = i % 5 == 0 },
  }
end

local score, hits = 0, 0
on("hit", function(id, damage)
  local h = entities[id].health
  h.value = h.value - damage
  hits = hits + 1
  if h.value <= 0 then emit("died", id) end
end)
on("died", function(id)
  score = score + (entities[id].tags.enemy and 10 or 1)
  entities[id].health.value = entities[id].health.max
end)
on("hit", function(id, damage) if damage > 1000 then error("impossible") end end)

local CELL = 50
local total = 0
for tick = 1, 50 do
  local grid, cells = {}, {}
  for i = 1, #entities do
    local e = entities[i]
    local p, v = e.position, e.velocity
    p.x = (p.x + v.x) % 1000
    p.y = (p.y + v.y) % 1000
    local key = math.floor(p.x / CELL) * 100 + math.floor(p.y / CELL)
    local cell = grid[key]
    if not cell then
      cell = {}
      grid[key] = cell
      cells[#cells + 1] = cell
    end
    cell[#cell + 1] = e
  end
  for c = 1, #cells do
    local cell = cells[c]
    for a = 1, #cell - 1 do
      local e = cell[a]
      for b = a + 1, #cell do
        local f = cell[b]
        if e.tags.enemy ~= f.tags.enemy then emit("hit", f.id, rand(30)) end
      end
    end
  end
  total = total + dispatch() + tick
end
total = total + score + hits
assert(total == 335925, total)
return total
