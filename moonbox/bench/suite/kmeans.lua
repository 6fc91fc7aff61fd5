-- Floating point and tables: k-means clustering of generated 2-D points in blobs, with
-- point records, centroid updates and an assignment loop until nothing moves.
local seed = 11
local function rand()
  seed = (seed * 16807) % 2147483647
  return seed / 2147483647
end

local K, N = 8, 20000
local points = {}
for i = 1, N do
  local c = i % K
  local cx, cy = math.cos(c) * 10, math.sin(c) * 10
  points[i] = { x = cx + (rand() - 0.5) * 6, y = cy + (rand() - 0.5) * 6, cluster = 0 }
end

local function kmeans(k)
  local centroids = {}
  for c = 1, k do centroids[c] = { x = points[c * 7].x, y = points[c * 7].y } end
  local iterations = 0
  while true do
    iterations = iterations + 1
    local moved = 0
    for i = 1, N do
      local p = points[i]
      local best, best_d = 0, math.huge
      for c = 1, k do
        local q = centroids[c]
        local dx, dy = p.x - q.x, p.y - q.y
        local d = dx * dx + dy * dy
        if d < best_d then best, best_d = c, d end
      end
      if p.cluster ~= best then p.cluster = best moved = moved + 1 end
    end
    local sums = {}
    for c = 1, k do sums[c] = { x = 0, y = 0, n = 0 } end
    for i = 1, N do
      local p = points[i]
      local s = sums[p.cluster]
      s.x, s.y, s.n = s.x + p.x, s.y + p.y, s.n + 1
    end
    for c = 1, k do
      local s = sums[c]
      if s.n > 0 then centroids[c] = { x = s.x / s.n, y = s.y / s.n } end
    end
    if moved == 0 or iterations >= 60 then break end
  end
  local inertia = 0
  for i = 1, N do
    local p, q = points[i], centroids[points[i].cluster]
    inertia = inertia + (p.x - q.x) ^ 2 + (p.y - q.y) ^ 2
  end
  return iterations, inertia
end

local total = 0
for round = 1, 3 do
  for i = 1, N do points[i].cluster = 0 end
  local iterations, inertia = kmeans(K + round - 2)
  total = total + iterations + math.floor(inertia)
end
assert(total == 324803, total)
return total
