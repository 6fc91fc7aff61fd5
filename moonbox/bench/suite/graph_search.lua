-- Graphs: breadth-first search from many sources and an iterative depth-first search
-- (discovery and finish times) over a random sparse directed graph in adjacency lists.
local V, E = 20000, 80000

local seed = 12345
local function rand(n)
  seed = (seed * 16807) % 2147483647
  return seed % n
end

local adj = {}
for v = 1, V do adj[v] = {} end
for _ = 1, E do
  local a, b = rand(V) + 1, rand(V) + 1
  local list = adj[a]
  list[#list + 1] = b
end

local function bfs(source)
  local dist = { [source] = 0 }
  local queue, head, tail = { source }, 1, 1
  local far = 0
  while head <= tail do
    local v = queue[head]
    head = head + 1
    local d = dist[v] + 1
    local list = adj[v]
    for i = 1, #list do
      local w = list[i]
      if dist[w] == nil then
        dist[w] = d
        if d > far then far = d end
        tail = tail + 1
        queue[tail] = w
      end
    end
  end
  return tail, far
end

local function dfs()
  local discovered, finished, time = {}, {}, 0
  local stack, index = {}, {}
  local sum = 0
  for root = 1, V do
    if not discovered[root] then
      local top = 1
      stack[1], index[1] = root, 1
      time = time + 1
      discovered[root] = time
      while top > 0 do
        local v, i = stack[top], index[top]
        local list = adj[v]
        if i <= #list then
          index[top] = i + 1
          local w = list[i]
          if not discovered[w] then
            time = time + 1
            discovered[w] = time
            top = top + 1
            stack[top], index[top] = w, 1
          end
        else
          time = time + 1
          finished[v] = time
          sum = sum + time % 97
          top = top - 1
        end
      end
    end
  end
  return sum
end

local total = 0
for s = 1, 8 do
  local reached, far = bfs(s * 1013 % V + 1)
  total = total + reached + far
end
for _ = 1, 3 do total = total + dfs() end
assert(total == 3035705, total)
return total
