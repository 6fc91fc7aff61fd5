-- Integers: a sieve of Eratosthenes over bits packed 32 to an array slot, with the bit
-- library (band, bor, lshift, rshift), then a population count over the words.
local function sieve(n)
  local words = {}
  local nw = math.floor(n / 32) + 1
  for i = 0, nw do words[i] = -1 end  -- all bits set: every number a candidate
  local count = 0
  for i = 2, n do
    if bit.band(words[bit.rshift(i, 5)], bit.lshift(1, bit.band(i, 31))) ~= 0 then
      count = count + 1
      for j = i + i, n, i do
        local w = bit.rshift(j, 5)
        words[w] = bit.band(words[w], bit.bnot(bit.lshift(1, bit.band(j, 31))))
      end
    end
  end
  return count, words, nw
end

local function popcount(x)
  x = x - bit.band(bit.rshift(x, 1), 0x55555555)
  x = bit.band(x, 0x33333333) + bit.band(bit.rshift(x, 2), 0x33333333)
  x = bit.band(x + bit.rshift(x, 4), 0x0F0F0F0F)
  return bit.rshift(x * 0x01010101, 24) % 256
end

local total = 0
for round = 1, 4 do
  local n = 1000000 * round
  local count, words, nw = sieve(n)
  local bits = 0
  for i = 0, nw do bits = bits + popcount(bit.tobit(words[i])) end
  total = total + count + bits
end
assert(total == 1454918, total)
return total
