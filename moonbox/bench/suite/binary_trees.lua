-- Allocation: complete binary trees built, walked and dropped, many short-lived and one
-- long-lived. Each node is a small table with two children.
local MIN_DEPTH, MAX_DEPTH = 4, 14

local function build(depth)
  if depth == 0 then return { false, false } end
  depth = depth - 1
  return { build(depth), build(depth) }
end

local function count(node)
  local left = node[1]
  if not left then return 1 end
  return 1 + count(left) + count(node[2])
end

local long_lived = build(MAX_DEPTH)
local checksum = 0
for depth = MIN_DEPTH, MAX_DEPTH, 2 do
  local trees = 2 ^ (MAX_DEPTH - depth + MIN_DEPTH - 2)
  local nodes = 0
  for _ = 1, trees do
    nodes = nodes + count(build(depth))
  end
  assert(nodes == trees * (2 ^ (depth + 1) - 1), "wrong node count")
  checksum = checksum + nodes
end
checksum = checksum + count(long_lived)
assert(checksum == 813739, checksum)
return checksum
