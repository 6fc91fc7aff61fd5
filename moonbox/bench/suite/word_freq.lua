-- Strings and hash tables: generated text split into words by hand (string.byte and
-- string.sub), counted in a table keyed by string, the most frequent found, then the
-- counts merged across rounds.
local seed = 5
local function rand(n)
  seed = (seed * 16807) % 2147483647
  return seed % n
end

local SYLLABLES = { "ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "qua", "bre", "sto" }
local function text(words)
  local parts = {}
  for i = 1, words do
    local w = {}
    for j = 1, rand(3) + 1 do w[j] = SYLLABLES[rand(#SYLLABLES) + 1] end
    parts[i] = table.concat(w)
  end
  return table.concat(parts, " ")
end

local function count_words(s, counts)
  local start, n = nil, #s
  for i = 1, n + 1 do
    local c = i <= n and s:byte(i) or 32
    if c == 32 then
      if start then
        local w = s:sub(start, i - 1)
        counts[w] = (counts[w] or 0) + 1
        start = nil
      end
    elseif not start then
      start = i
    end
  end
end

local total_counts = {}
local checksum = 0
for round = 1, 6 do
  local counts = {}
  count_words(text(40000), counts)
  local best, best_n, distinct = nil, 0, 0
  for w, n in pairs(counts) do
    distinct = distinct + 1
    if n > best_n or (n == best_n and w < best) then best, best_n = w, n end
    total_counts[w] = (total_counts[w] or 0) + n
  end
  checksum = checksum + distinct + best_n + #best
end
local words = 0
for _, n in pairs(total_counts) do words = words + n end
checksum = checksum + words
assert(checksum == 258317, checksum)
return checksum
