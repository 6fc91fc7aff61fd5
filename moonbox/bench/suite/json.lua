-- Strings and tables: a JSON encoder and a recursive-descent decoder, round-tripping a
-- generated document of nested objects, arrays, numbers, strings with escapes, booleans.
local byte, sub, char, format, concat = string.byte, string.sub, string.char, string.format,
  table.concat

local ESCAPES = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\t"] = "\\t" }

local encode
local function encode_string(s, out)
  out[#out + 1] = '"'
  local start = 1
  for i = 1, #s do
    local e = ESCAPES[sub(s, i, i)]
    if e then
      out[#out + 1] = sub(s, start, i - 1)
      out[#out + 1] = e
      start = i + 1
    end
  end
  out[#out + 1] = sub(s, start)
  out[#out + 1] = '"'
end

function encode(v, out)
  local t = type(v)
  if t == "table" then
    if v[1] ~= nil or next(v) == nil then
      out[#out + 1] = "["
      for i = 1, #v do
        if i > 1 then out[#out + 1] = "," end
        encode(v[i], out)
      end
      out[#out + 1] = "]"
    else
      local keys = {}
      for k in pairs(v) do keys[#keys + 1] = k end
      table.sort(keys)
      out[#out + 1] = "{"
      for i = 1, #keys do
        if i > 1 then out[#out + 1] = "," end
        encode_string(keys[i], out)
        out[#out + 1] = ":"
        encode(v[keys[i]], out)
      end
      out[#out + 1] = "}"
    end
  elseif t == "string" then
    encode_string(v, out)
  elseif t == "number" then
    if v == math.floor(v) then out[#out + 1] = format("%d", v)
    else out[#out + 1] = format("%.14g", v) end
  else
    out[#out + 1] = tostring(v)
  end
end

local UNESCAPES = { [110] = "\n", [116] = "\t", [34] = '"', [92] = "\\" }

local function decoder(s)
  local pos = 1
  local value

  local function skip()
    local c = byte(s, pos)
    while c == 32 or c == 10 or c == 9 or c == 13 do
      pos = pos + 1
      c = byte(s, pos)
    end
    return c
  end

  local function str()
    pos = pos + 1
    local parts, start = {}, pos
    while true do
      local c = byte(s, pos)
      if c == 34 then break end
      if c == 92 then
        parts[#parts + 1] = sub(s, start, pos - 1)
        parts[#parts + 1] = UNESCAPES[byte(s, pos + 1)]
        pos = pos + 2
        start = pos
      else
        pos = pos + 1
      end
    end
    parts[#parts + 1] = sub(s, start, pos - 1)
    pos = pos + 1
    return concat(parts)
  end

  local function num()
    local start = pos
    local c = byte(s, pos)
    while c and (c == 45 or c == 43 or c == 46 or c == 101 or c == 69 or (c >= 48 and c <= 57)) do
      pos = pos + 1
      c = byte(s, pos)
    end
    return tonumber(sub(s, start, pos - 1))
  end

  function value()
    local c = skip()
    if c == 123 then
      pos = pos + 1
      local obj = {}
      if skip() == 125 then pos = pos + 1 return obj end
      while true do
        skip()
        local k = str()
        skip()
        pos = pos + 1 -- ':'
        obj[k] = value()
        c = skip()
        pos = pos + 1
        if c == 125 then return obj end
      end
    elseif c == 91 then
      pos = pos + 1
      local arr = {}
      if skip() == 93 then pos = pos + 1 return arr end
      while true do
        arr[#arr + 1] = value()
        c = skip()
        pos = pos + 1
        if c == 93 then return arr end
      end
    elseif c == 34 then
      return str()
    elseif c == 116 then pos = pos + 4 return true
    elseif c == 102 then pos = pos + 5 return false
    else
      return num()
    end
  end

  return value()
end

local seed = 7
local function rand(n)
  seed = (seed * 16807) % 2147483647
  return seed % n
end

local WORDS = { "alpha", "beta", "gamma\n", "del\"ta", "eps\\ilon", "zeta", "eta\tx" }
local function document(depth)
  if depth == 0 then
    local k = rand(4)
    if k == 0 then return rand(100000) - 50000
    elseif k == 1 then return rand(1000) / 8
    elseif k == 2 then return WORDS[rand(#WORDS) + 1]
    else return rand(2) == 0 end
  end
  if rand(2) == 0 then
    local arr = {}
    for i = 1, rand(6) + 1 do arr[i] = document(depth - 1) end
    return arr
  end
  local obj = {}
  for i = 1, rand(6) + 1 do obj[WORDS[rand(#WORDS) + 1] .. i] = document(depth - 1) end
  return obj
end

local total = 0
for _ = 1, 4 do
  local doc = document(7)
  local out = {}
  encode(doc, out)
  local text = concat(out)
  local again = {}
  encode(decoder(text), again)
  local text2 = concat(again)
  assert(text2 == text, "round trip differs")
  total = total + #text
end
assert(total == 277649, total)
return total
