-- Allocation: a tree of arrays of arrays built to a fixed depth, with leaf arrays of
-- varying lengths, then walked; the garbage collector does most of the work.
local seed = 74755
local function rand(n)
  seed = (seed * 1309 + 13849) % 65536
  return seed % n
end

local function build(depth)
  if depth == 1 then
    local leaf = {}
    for i = 1, rand(10) + 1 do leaf[i] = i end
    return leaf
  end
  local node = {}
  for i = 1, 4 do node[i] = build(depth - 1) end
  return node
end

local function walk(node, depth)
  if depth == 1 then return #node end
  local n = 0
  for i = 1, #node do n = n + walk(node[i], depth - 1) end
  return n
end

local total = 0
for round = 1, 10 do
  local tree = build(8)
  total = total + walk(tree, 8) + round
end
assert(total == 901023, total)
return total
