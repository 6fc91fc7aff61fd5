-- Doubles a string until memory runs out; the heap cap stops it, the host survives.
local s = "x"
while true do
  s = s .. s
end
