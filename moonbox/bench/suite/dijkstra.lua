-- Graphs: Dijkstra's shortest paths with a binary heap (decrease-key by reinsertion) on
-- a random weighted grid-like graph.
local SIDE = 160
local V = SIDE * SIDE

local seed = 99
local function rand(n)
  seed = (seed * 16807) % 2147483647
  return seed % n
end

local edges = {}
for v = 1, V do
  local list = {}
  edges[v] = list
end
for v = 1, V do
  local x = (v - 1) % SIDE
  local list = edges[v]
  if x > 0 then list[#list + 1] = { v - 1, rand(20) + 1 } end
  if x < SIDE - 1 then list[#list + 1] = { v + 1, rand(20) + 1 } end
  if v > SIDE then list[#list + 1] = { v - SIDE, rand(20) + 1 } end
  if v <= V - SIDE then list[#list + 1] = { v + SIDE, rand(20) + 1 } end
  if rand(8) == 0 then list[#list + 1] = { rand(V) + 1, rand(200) + 50 } end
end

local function shortest(source)
  local dist = {}
  for v = 1, V do dist[v] = math.huge end
  dist[source] = 0
  local heap_d, heap_v, size = { 0 }, { source }, 1
  local settled = 0
  while size > 0 do
    local d, v = heap_d[1], heap_v[1]
    heap_d[1], heap_v[1] = heap_d[size], heap_v[size]
    heap_d[size], heap_v[size] = nil, nil
    size = size - 1
    local i = 1
    while true do
      local l, r, m = 2 * i, 2 * i + 1, i
      if l <= size and heap_d[l] < heap_d[m] then m = l end
      if r <= size and heap_d[r] < heap_d[m] then m = r end
      if m == i then break end
      heap_d[i], heap_d[m] = heap_d[m], heap_d[i]
      heap_v[i], heap_v[m] = heap_v[m], heap_v[i]
      i = m
    end
    if d == dist[v] then
      settled = settled + 1
      local list = edges[v]
      for k = 1, #list do
        local e = list[k]
        local w, nd = e[1], d + e[2]
        if nd < dist[w] then
          dist[w] = nd
          size = size + 1
          local j = size
          heap_d[j], heap_v[j] = nd, w
          while j > 1 do
            local p = (j - j % 2) / 2
            if heap_d[p] <= heap_d[j] then break end
            heap_d[p], heap_d[j] = heap_d[j], heap_d[p]
            heap_v[p], heap_v[j] = heap_v[j], heap_v[p]
            j = p
          end
        end
      end
    end
  end
  local sum = 0
  for v = 1, V do sum = sum + dist[v] end
  return sum + settled
end

local total = 0
for s = 1, 3 do total = total + shortest(s * 4999 % V + 1) end
assert(total == 19254090, total)
return total
