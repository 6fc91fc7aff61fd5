-- Coroutines: a ring of coroutines passing a token, each resume a switch, plus a
-- producer/filter/consumer pipeline built with coroutine.wrap.
local RING, PASSES = 100, 12000

local function ring()
  local threads = {}
  for i = 1, RING do
    threads[i] = coroutine.create(function(token)
      while true do token = coroutine.yield(token + i) end
    end)
  end
  local token = 0
  for _ = 1, PASSES do
    for i = 1, RING do
      local ok
      ok, token = coroutine.resume(threads[i], token)
      assert(ok)
    end
    token = token % 1000003
  end
  return token
end

local function pipeline(n)
  local producer = coroutine.wrap(function()
    for i = 1, n do coroutine.yield(i) end
    coroutine.yield(nil)
  end)
  local evens = coroutine.wrap(function()
    while true do
      local v = producer()
      if v == nil then coroutine.yield(nil) end
      if v % 2 == 0 then coroutine.yield(v) end
    end
  end)
  local sum = 0
  while true do
    local v = evens()
    if v == nil then break end
    sum = sum + v
  end
  return sum
end

local a = ring()
local b = pipeline(400000)
assert(b == 40000200000, b)
local checksum = a + b
assert(checksum == 40000799820, checksum)
return checksum
