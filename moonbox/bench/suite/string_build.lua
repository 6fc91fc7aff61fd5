-- Strings: building text by table.concat of parts, by repeated .. in a loop, and with
-- string.format; then reading it back with string.byte and string.sub.
local function build_rows(n)
  local parts = {}
  for i = 1, n do
    parts[#parts + 1] = string.format("row %d: %s=%0.2f;", i, "v" .. (i % 7), i / 3)
  end
  return table.concat(parts, "\n")
end

local function build_line(n)
  local s = ""
  for i = 1, n do s = s .. string.char(97 + i % 26) end
  return s
end

local function checksum_of(s)
  local sum = 0
  for i = 1, #s, 3 do sum = (sum + s:byte(i)) % 1000000007 end
  return sum
end

local total = 0
for round = 1, 10 do
  local text = build_rows(20000)
  total = total + #text + checksum_of(text)
  local line = build_line(3000)
  total = total + checksum_of(line) + #line:sub(round, -round)
  local words = {}
  for i = 1, 5000 do words[i] = line:sub(i % 2000 + 1, i % 2000 + 5):upper() end
  total = total + #table.concat(words, ",")
end
assert(total == 96781570, total)
return total
