-- Graphs and objects: a compiler's loop-finding pass. Builds control-flow graphs of
-- nested loops (block objects with successor and predecessor lists), numbers them by
-- depth-first search, computes dominators iteratively, then finds each natural loop from
-- its back edges and the loops' nesting depths.
local Block = {}
Block.__index = Block
local function block(id) return setmetatable({ id = id, succ = {}, pred = {} }, Block) end
function Block:edge(to)
  self.succ[#self.succ + 1] = to
  to.pred[#to.pred + 1] = self
end

local function build_cfg(width, depth)
  local blocks = {}
  local function new()
    local b = block(#blocks + 1)
    blocks[#blocks + 1] = b
    return b
  end
  -- A loop nest: header -> body (inner nests in sequence) -> latch -> header, latch -> exit.
  local function nest(entry, level)
    local header = new()
    entry:edge(header)
    local cur = header
    if level > 0 then
      for _ = 1, width do cur = nest(cur, level - 1) end
    else
      local a, b, join = new(), new(), new()
      cur:edge(a); cur:edge(b); a:edge(join); b:edge(join)
      cur = join
    end
    local latch = new()
    cur:edge(latch)
    latch:edge(header)
    local exit = new()
    latch:edge(exit)
    return exit
  end
  local start = new()
  local last = start
  for _ = 1, 3 do last = nest(last, depth) end
  return blocks, start
end

local function find_loops(blocks, start)
  -- Depth-first numbering (iterative), reverse postorder.
  local order, visited, post = {}, {}, {}
  local stack, idx = { start }, { 1 }
  visited[start] = true
  while #stack > 0 do
    local b, i = stack[#stack], idx[#idx]
    if i <= #b.succ then
      idx[#idx] = i + 1
      local s = b.succ[i]
      if not visited[s] then
        visited[s] = true
        stack[#stack + 1], idx[#idx + 1] = s, 1
      end
    else
      post[#post + 1] = b
      stack[#stack], idx[#idx] = nil, nil
    end
  end
  local rpo = {}
  for i = #post, 1, -1 do
    local b = post[i]
    rpo[#rpo + 1] = b
    order[b] = #rpo
  end
  -- Dominators by iteration to a fixed point over reverse postorder.
  local idom = { [start] = start }
  local function intersect(a, b)
    while a ~= b do
      while order[a] > order[b] do a = idom[a] end
      while order[b] > order[a] do b = idom[b] end
    end
    return a
  end
  local changed = true
  while changed do
    changed = false
    for i = 2, #rpo do
      local b = rpo[i]
      local new
      for _, p in ipairs(b.pred) do
        if idom[p] then new = new and intersect(p, new) or p end
      end
      if idom[b] ~= new then idom[b] = new; changed = true end
    end
  end
  local function dominates(a, b)
    while true do
      if a == b then return true end
      if b == start then return false end
      b = idom[b]
    end
  end
  -- Natural loops: for a back edge latch -> header (an edge against reverse postorder
  -- whose target dominates its source), the blocks reaching latch without passing header.
  local loops = {}
  for _, b in ipairs(rpo) do
    for _, s in ipairs(b.succ) do
      if order[s] <= order[b] and dominates(s, b) then
        local body, work = { [s] = true, [b] = true }, { b }
        local size = 2
        while #work > 0 do
          local x = work[#work]
          work[#work] = nil
          if x ~= s then
            for _, p in ipairs(x.pred) do
              if not body[p] then body[p] = true; size = size + 1; work[#work + 1] = p end
            end
          end
        end
        loops[#loops + 1] = { header = s, body = body, size = size }
      end
    end
  end
  -- Nesting depth of each block: how many loop bodies hold it.
  local depth_sum = 0
  for _, loop in ipairs(loops) do
    for _ in pairs(loop.body) do depth_sum = depth_sum + 1 end
  end
  return #loops, depth_sum
end

local total = 0
for round = 1, 4 do
  local blocks, start = build_cfg(3, 5)
  local count, depth_sum = find_loops(blocks, start)
  total = total + #blocks + count * 7 + depth_sum + round
end
assert(total == 172742, total)
return total
