-- Dynamic programming: edit distances between generated strings with two rolling rows,
-- and the longest common subsequence with a full table of rows.
local seed = 3
local function rand(n)
  seed = (seed * 16807) % 2147483647
  return seed % n
end

local function word(n)
  local b = {}
  for i = 1, n do b[i] = 97 + rand(6) end
  return string.char(unpack(b))
end

local function edit_distance(a, b)
  local prev, cur = {}, {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    cur[0] = i
    local ca = a:byte(i)
    for j = 1, #b do
      local cost = ca == b:byte(j) and 0 or 1
      local v = prev[j - 1] + cost
      local del, ins = prev[j] + 1, cur[j - 1] + 1
      if del < v then v = del end
      if ins < v then v = ins end
      cur[j] = v
    end
    prev, cur = cur, prev
  end
  return prev[#b]
end

local function lcs(a, b)
  local rows = {}
  for i = 0, #a do
    local row = {}
    for j = 0, #b do row[j] = 0 end
    rows[i] = row
  end
  for i = 1, #a do
    local row, up, ca = rows[i], rows[i - 1], a:byte(i)
    for j = 1, #b do
      if ca == b:byte(j) then row[j] = up[j - 1] + 1
      else
        local x, y = up[j], row[j - 1]
        row[j] = x > y and x or y
      end
    end
  end
  return rows[#a][#b]
end

local total = 0
for round = 1, 10 do
  local a, b = word(500 + round * 10), word(480 + round * 7)
  total = total + edit_distance(a, b) + lcs(a, b)
end
assert(total == 6448, total)
return total
