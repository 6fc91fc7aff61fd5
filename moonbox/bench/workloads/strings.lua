-- Strings: formatting, concatenation, byte/sub/upper and table.concat (no patterns).
-- `...` is how many records to format; returns a checksum of the lengths and bytes.
local n = ...
local parts, total = {}, 0
for i = 1, n do
  local s = string.format("item-%d:%.1f", i, i / 3) .. "/" .. tostring(i % 97)
  total = total + #s + s:byte(-1) + #s:upper():sub(2, 6)
  parts[#parts + 1] = s
  if #parts == 100 then            -- flush a batch: one join per 100 records
    total = total + #table.concat(parts, ",")
    parts = {}
  end
end
return total
