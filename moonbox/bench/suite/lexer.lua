-- Strings: a hand-written tokenizer for a small expression language over generated
-- source (string.byte dispatch, string.sub for lexemes, keyword lookup in a table),
-- then a count of each token kind and a checksum of the numbers.
local seed = 8
local function rand(n)
  seed = (seed * 16807) % 2147483647
  return seed % n
end

local PIECES = { "let", "x", "=", "42", "+", "foo_bar", "*", "(", "3.25", ")", ";", "if",
  "then", "else", "end", "while", "do", "alpha", "<=", ">=", "==", "\"str ing\"", "--c\n", "7" }

local function source(n)
  local parts = {}
  for i = 1, n do parts[i] = PIECES[rand(#PIECES) + 1] end
  return table.concat(parts, " ")
end

local KEYWORDS = { let = true, ["if"] = true, ["then"] = true, ["else"] = true,
  ["end"] = true, ["while"] = true, ["do"] = true }

local function is_alpha(c) return (c >= 97 and c <= 122) or (c >= 65 and c <= 90) or c == 95 end
local function is_digit(c) return c >= 48 and c <= 57 end

local function tokenize(s, counts)
  local i, n = 1, #s
  local numbers = 0
  local byte, sub = string.byte, string.sub
  while i <= n do
    local c = byte(s, i)
    if c == 32 or c == 10 then
      i = i + 1
    elseif is_alpha(c) then
      local j = i + 1
      while j <= n do
        local d = byte(s, j)
        if not (is_alpha(d) or is_digit(d)) then break end
        j = j + 1
      end
      local word = sub(s, i, j - 1)
      local kind = KEYWORDS[word] and "keyword" or "name"
      counts[kind] = (counts[kind] or 0) + 1
      i = j
    elseif is_digit(c) then
      local j = i + 1
      while j <= n and (is_digit(byte(s, j)) or byte(s, j) == 46) do j = j + 1 end
      numbers = numbers + tonumber(sub(s, i, j - 1))
      counts.number = (counts.number or 0) + 1
      i = j
    elseif c == 34 then
      local j = i + 1
      while byte(s, j) ~= 34 do j = j + 1 end
      counts.string = (counts.string or 0) + 1
      i = j + 1
    elseif c == 45 and byte(s, i + 1) == 45 then
      while i <= n and byte(s, i) ~= 10 do i = i + 1 end
      counts.comment = (counts.comment or 0) + 1
    else
      local two = sub(s, i, i + 1)
      if two == "<=" or two == ">=" or two == "==" then
        i = i + 2
      else
        i = i + 1
      end
      counts.op = (counts.op or 0) + 1
    end
  end
  return numbers
end

local checksum = 0
for _ = 1, 14 do
  local counts = {}
  local numbers = tokenize(source(60000), counts)
  checksum = checksum + numbers + counts.keyword * 3 + counts.name * 5 + counts.number * 7
    + counts.string * 11 + counts.comment * 13 + counts.op * 17
end
assert(checksum == 10005288.25, checksum)
return checksum
