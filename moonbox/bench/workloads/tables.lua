-- Tables: array appends and reads, hash updates with string keys, pairs() traversal.
-- `...` is how many items to insert; returns a checksum.
local n = ...
local keys = {}
for i = 1, 500 do keys[i] = "key" .. i end   -- hash keys, built once

local list, counts = {}, {}
for i = 1, n do
  table.insert(list, i % 1000)           -- array append
  local k = keys[i % 500 + 1]
  counts[k] = (counts[k] or 0) + 1       -- hash read and write
end

local sum = 0
for i = 1, #list do sum = sum + list[i] end          -- array read
for _, c in pairs(counts) do sum = sum + c * c end   -- hash traversal
return sum
