-- Functions: higher-order code with closures made in loops: map, filter and reduce over
-- arrays, composed functions, counters held in upvalues, and memoised calls.
local function map(t, f)
  local r = {}
  for i = 1, #t do r[i] = f(t[i]) end
  return r
end

local function filter(t, p)
  local r = {}
  for i = 1, #t do if p(t[i]) then r[#r + 1] = t[i] end end
  return r
end

local function reduce(t, f, acc)
  for i = 1, #t do acc = f(acc, t[i]) end
  return acc
end

local function compose(f, g) return function(x) return f(g(x)) end end

local function counter()
  local n = 0
  return function(k) n = n + k return n end
end

local function memoize(f)
  local cache = {}
  return function(x)
    local v = cache[x]
    if v == nil then v = f(x) cache[x] = v end
    return v
  end
end

local data = {}
for i = 1, 5000 do data[i] = i end

local total = 0
for round = 1, 600 do
  local scale = round % 7 + 1
  local f = compose(function(x) return x * scale end, function(x) return x + round end)
  local mapped = map(data, f)
  local kept = filter(mapped, function(x) return x % 3 ~= 0 end)
  local c = counter()
  local sum = reduce(kept, function(acc, x) c(1) return acc + x end, 0)
  local square = memoize(function(x) return x * x % 1009 end)
  local memo = 0
  for i = 1, #kept do memo = memo + square(kept[i] % 500) end
  total = total + sum + c(0) + memo
end
assert(total == 15890042763, total)
return total
