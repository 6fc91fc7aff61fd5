-- Number keys that share one hash chain (DESIGN.md §2, fact 12).
--
-- LuaJIT's number hash is not seeded: it mixes the two 32-bit halves of a double with fixed
-- rotations. This picks, for each key, the low half that makes the hash agree with a fixed
-- target in its low 17 bits, so every key lands in one chain of any table of up to 2^17
-- slots. The sign bit is not hashed: each double and its negation make two keys.
-- The fuzzer prepends this to the programs of its colliding-keys cases (moonbox.fuzz).
local function colliding_keys(count)
  local band, bor, bxor, rol, lshift = bit.band, bit.bor, bit.bxor, bit.rol, bit.lshift
  local MASK, TARGET, HI = 0x1FFFF, 0x1234, 0x40F00001
  local hi = lshift(HI, 1)
  local c0 = band(rol(hi, 19), MASK)
  local keys, n, top = {}, 0, 0
  while n < count do
    local high = lshift(top, 17)
    for low4 = 0, 15 do
      local r = band(rol(bor(high, low4), 13), MASK)
      local low = band(bxor(band(TARGET + r, MASK), c0), MASK)
      if band(low, 15) == low4 then
        local lo = bxor(bit.tobit(bor(high, low) + rol(hi, 14)), hi)
        if lo < 0 then lo = lo + 4294967296 end
        local d = (1 + (band(HI, 0xFFFFF) * 4294967296 + lo) / 2^52) * 65536
        keys[n + 1], keys[n + 2] = d, -d
        n = n + 2
        break
      end
    end
    top = top + 1
  end
  return keys
end

-- As many number keys that do not collide (the twin a colliding table is measured against).
local function plain_keys(count)
  local keys = {}
  for i = 1, count do keys[i] = i + 0.5 end
  return keys
end
