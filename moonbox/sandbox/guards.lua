-- Part of the moonbox prelude (prelude.lua): the guarded library functions, each charged
-- for the work its input or result tells (docs/guards.md), with stable ids in place of
-- addresses.

-------------------------------------------------------------------------------------------
-- Guarded library functions. A library call is one C call no check can interrupt, so each
-- one whose work grows with its input is charged for that work: before it runs when the
-- input tells (string.rep, table.sort, unpack...), right after when only the result does
-- (table.concat, string.gsub). A call that would outrun the step budget trips before it
-- starts, and the clock is polled in proportion to the work done. One step is about 64
-- bytes or 64 values copied, or 4 comparisons. docs/guards.md lists every guard.
--
-- A guard behaves as the native function does, errors included (docs/conformance.md):
-- it takes its arguments as `...`, so a missing argument is "no value", not nil, and it
-- hands its arguments to the native by a tail call, so a native's error names the
-- function as the mod's call site does and is placed at the mod's line. A guard that
-- charges after the call runs the native under pcall instead, and places the native's
-- own errors at its caller, as LuaJIT places them.
-------------------------------------------------------------------------------------------
local WORK_PER_STEP = config.work_per_step
local COMPARISONS_PER_STEP = config.comparisons_per_step
local unpack_, rawget_, d_getmetatable = unpack, rawget, debug.getmetatable
local t_sort = table.sort

-- Charges `n` units of copying work (bytes or values).
local function charge_work(n)
  if n >= WORK_PER_STEP then charge(floor(n / WORK_PER_STEP)) end
end

-- The length a value has once a string function coerces it (numbers: a short string).
local function coerced_len(v)
  local tv = type(v)
  if tv == "string" then return #v end
  if tv == "number" then return 24 end
  return 0
end

-- Whether a native would take `v` as an optional integer argument (nil, a number or a
-- numeric string); anything else is its argument error.
local function int_arg(v)
  local tv = type(v)
  return tv == "nil" or tv == "number" or (tv == "string" and tonumber(v) ~= nil)
end

-- A native's own error, caught by the pcall that ran it (so without a position), raised
-- again at the position LuaJIT gives it: the caller of the guard, which is at stack level
-- `level` of the function calling this. An out-of-memory error stays as it is.
local function native_failed(err, level)
  if type(err) == "string" and not is_memory_error(err) then
    err = caller_where(level + 1) .. err
  end
  error(err, 0)
end

do
  local s_rep, s_upper, s_lower, s_reverse, s_char = string.rep, string.upper,
    string.lower, string.reverse, string.char

  -- The count as LuaJIT reads it: an int32, every count out of that range being its
  -- lowest (an empty result); a separator that is not a string is its argument error.
  function wrapped_lib.string.rep(...)
    local s, n, sep = ...
    local count = tonumber(n)
    local ts = type(sep)
    if count and count >= 1 and count < 2 ^ 31 and (sep == nil or ts == "string" or ts == "number")
    then
      charge_work((coerced_len(s) + coerced_len(sep)) * count)
    end
    return s_rep(...)
  end

  function wrapped_lib.string.upper(...)
    charge_work(coerced_len((...)))
    return s_upper(...)
  end

  function wrapped_lib.string.lower(...)
    charge_work(coerced_len((...)))
    return s_lower(...)
  end

  function wrapped_lib.string.reverse(...)
    charge_work(coerced_len((...)))
    return s_reverse(...)
  end

  function wrapped_lib.string.char(...)
    charge_work(select("#", ...))
    return s_char(...)
  end
end

-- Where a string function's index lands, as the runtime clamps it, for an upper bound of
-- the work: NaN lands on `if_nan` (the runtime makes it its lowest integer, which a start
-- clamps to 1 and an end counts from the string's end).
local function clamped_index(x, len, default, if_nan)
  x = tonumber(x) or default
  if x ~= x then return if_nan end
  if x == -huge then return 1 end
  if x < 0 then x = len + x + 1 end
  if x < 1 then return 1 end
  if x > len then return len end
  return x
end

-- string.sub is charged for its result before it runs: the length its indices give.
function wrapped_lib.string.sub(...)
  local s, i, j = ...
  if type(s) == "string" then
    local len = #s
    if len >= WORK_PER_STEP then
      local first = clamped_index(i, len, 1, 1)
      local last = j == nil and len or clamped_index(j, len, len, len)
      if last - first >= WORK_PER_STEP then charge_work(last - first + 1) end
    end
  end
  return s_sub(...)
end

function wrapped_lib.string.byte(...)
  local s, i, j = ...
  local len = coerced_len(s)
  local first = clamped_index(i, len, 1, 1)
  local last = j == nil and (i == nil and 1 or first) or clamped_index(j, len, len, len)
  if last > first then charge_work(last - first) end
  return s_byte(...)
end

function wrapped.tonumber(...)
  local v = ...
  if type(v) == "string" then charge_work(#v) end
  return tonumber(...)
end

function wrapped.unpack(...)
  local t, i, j = ...
  if type(t) ~= "table" then return unpack_(...) end  -- the native's own argument error
  -- Up to four values between two integral bounds, read here as the native reads them
  -- (raw): LuaJIT compiles no call of the native unpack, so a loop that unpacks into a call
  -- (an event's arguments handed to its handlers under pcall) ran interpreted, its checks
  -- and its handlers' with it; this way it compiles whole, handlers included.
  if type(i) == "number" and type(j) == "number" then
    local n = j - i
    if n >= 0 and n < 4 and i == floor(i) and j == floor(j) and i > -2^31 and j < 2^31 then
      if n == 0 then return rawget_(t, i) end
      if n == 1 then return rawget_(t, i), rawget_(t, j) end
      if n == 2 then return rawget_(t, i), rawget_(t, i + 1), rawget_(t, j) end
      return rawget_(t, i), rawget_(t, i + 1), rawget_(t, i + 2), rawget_(t, j)
    end
  end
  local first = tonumber(i) or 1
  local last = tonumber(j)
  if last == nil and type(t) == "table" then last = #t end
  if last and last > first then charge_work(last - first) end
  return unpack_(...)
end

function wrapped.select(...)
  local count = select("#", ...)
  if count > WORK_PER_STEP then charge_work(count - 1) end
  return select(...)
end

-- table.concat: the values it joins, charged before; the bytes of the result, after.
do
  local function concat_done(ok, r)
    if not ok then native_failed(r, 2) end  -- tail-called: the guard's caller is at level 2
    charge_work(#r)
    return r
  end

  function wrapped_lib.table.concat(...)
    local t, sep, i, j = ...
    local ts = type(sep)
    if type(t) ~= "table" or not (sep == nil or ts == "string" or ts == "number")
      or not int_arg(i) or not int_arg(j) then
      return concat(...)  -- the native's own argument error
    end
    local first, last = tonumber(i) or 1, tonumber(j) or #t
    if last > first then charge_work(last - first) end
    return concat_done(pcall(concat, ...))
  end
end

-- Inserting at a position moves every value after it. A position the runtime would turn
-- into a huge count of moves (NaN, infinite, out of the int32 range, far below 1: it
-- converts them to the lowest integer) is refused. Removing moves at most #t values:
-- LuaJIT's table.remove moves nothing for a position outside 1..#t.
do
  local t_insert, t_remove, t_move = table.insert, table.remove, table.move
  local MIN_POSITION = -2 ^ 20

  function wrapped_lib.table.insert(...)
    if select("#", ...) == 3 then
      local t, pos = ...
      local at = tonumber(pos)
      if type(t) == "table" and at ~= nil then
        if not (at >= MIN_POSITION and at < 2 ^ 31) then
          argument_error(1, 2, "position out of bounds")
        end
        charge_work(#t - at)
      end
    end
    return t_insert(...)
  end

  function wrapped_lib.table.remove(...)
    local t, pos = ...
    local at = tonumber(pos)
    if at ~= nil and type(t) == "table" then
      local n = #t
      if at >= 1 and at <= n then charge_work(n - at) end
    end
    return t_remove(...)
  end

  -- table.move(a1, f, e, t [,a2]) moves e - f + 1 values.
  function wrapped_lib.table.move(...)
    local _, f, e = ...
    f, e = tonumber(f), tonumber(e)
    if f and e and e >= f then charge_work(e - f + 1) end
    return t_move(...)
  end
end

-- table.maxn walks the whole array part and every node of the hash part in one call,
-- whatever it finds there, so it is charged for both sizes before it runs. The sizes are
-- the table header's (asize, hmask): their offsets are found at the first call, on tables
-- whose sizes table.new fixes, and checked on a second pair; where they are not found, a
-- walk with `next` stands in for them (it sees the values, not the empty slots).
do
  local t_maxn = table.maxn
  local u32p = ffi.typeof("const uint32_t *")
  local function header(t) return ffi.cast(u32p, tonumber(s_format("%p", t))) end
  local asize_at, hmask_at, probed = nil, nil, false
  local function probe()
    probed = true
    local new_table = require("table.new")
    local a, b, c, d = new_table(0, 0), new_table(1000, 0), new_table(0, 1000), new_table(77, 300)
    local ha, hb, hc, hd = header(a), header(b), header(c), header(d)
    for i = 2, 15 do  -- 32-bit words 2..15: past the GC header, within the smallest GCtab
      if ha[i] == 0 and hb[i] == 1001 and hc[i] == 0 and hd[i] == 78 then asize_at = i end
      if ha[i] == 0 and hb[i] == 0 and hc[i] == 1023 and hd[i] == 511 then hmask_at = i end
    end
  end
  local function slots(t)
    if not probed then probe() end
    if asize_at and hmask_at then
      local h = header(t)
      return h[asize_at] + h[hmask_at] + 1
    end
    local n = 0
    for _ in next, t do n = n + 1 end
    return n
  end

  function wrapped_lib.table.maxn(...)
    local t = ...
    if type(t) == "table" then charge_work(slots(t)) end
    return t_maxn(...)
  end
end

-------------------------------------------------------------------------------------------
-- table.sort. Up to SORT_NATIVE_MAX values with no comparator and no table among them,
-- the native sort runs, charged for n*log2(n) comparisons first (milliseconds at most).
-- Any other sort runs here, in Lua: LuaJIT's own quicksort, step for step (the same
-- comparisons in the same order, so ties end where the native sort leaves them), charged
-- per comparison as it goes, so the time budget can stop a long one midway. Its callbacks
-- (the comparator, a __lt) are called from Lua: no C call nests, so a comparator that
-- sorts again is bounded by the Lua stack.
-------------------------------------------------------------------------------------------
local charged_sort
do
  local SORT_NATIVE_MAX = config.sort_native_max
  local SORT_INVALID = "invalid order function for sorting"
  -- Comparisons charged at once: few enough that, under the count hook of jit=False, a
  -- charge comes soon after the hook finds the window spent inside the prelude (the hook
  -- then fires at every instruction until one does).
  local SORT_BATCH = 64
  local MERGE_BATCH = 16  -- a merge's comparisons charged at once: its loop is shorter
  local rawset_, rawequal_, log, min = rawset, rawequal, math.log, math.min

  -- `a < b` as the native sort compares values without a comparator, its errors worded
  -- as LuaJIT's, raised from a C function (so with no position).
  local function natural_less(a, b)
    local ta, tb = type(a), type(b)
    if ta == tb then
      if ta == "number" or ta == "string" then return a < b end
      if ta == "table" then
        local ma, mb = d_getmetatable(a), d_getmetatable(b)
        local lt = ma and rawget_(ma, "__lt")
        if lt ~= nil and mb and rawequal_(lt, rawget_(mb, "__lt")) then return a < b end
      end
      error("attempt to compare two " .. ta .. " values", 0)
    end
    error("attempt to compare " .. ta .. " with " .. tb, 0)
  end

  -- Sorts t[1..n] with `less` (nil: `<`, for values all numbers or all strings), as the
  -- native sort does; tail-called by the guard, so its caller is the mod's.
  local function lua_sort(t, n, less)
    local ops = 0
    local function lt(a, b)
      ops = ops + 1
      if ops >= SORT_BATCH then
        ops = 0
        charge(SORT_BATCH / COMPARISONS_PER_STEP)
      end
      if less then return less(a, b) end
      return a < b
    end
    local stack, top = {}, 0
    local l, u = 1, n
    while true do
      while l < u do
        -- Order t[l], t[mid] and t[u]: the median becomes the pivot.
        local a, b = rawget_(t, l), rawget_(t, u)
        if lt(b, a) then rawset_(t, l, b) rawset_(t, u, a) end
        if u - l == 1 then break end
        local i = floor((l + u) / 2)
        a, b = rawget_(t, i), rawget_(t, l)
        if lt(a, b) then
          rawset_(t, i, b) rawset_(t, l, a)
        else
          b = rawget_(t, u)
          if lt(b, a) then rawset_(t, i, b) rawset_(t, u, a) end
        end
        if u - l == 2 then break end
        local p = rawget_(t, i)
        rawset_(t, i, rawget_(t, u - 1))
        rawset_(t, u - 1, p)
        -- Partition t[l+1..u-2] around p.
        local j = u - 1
        i = l
        while true do
          i = i + 1
          while lt(rawget_(t, i), p) do
            if i >= u then raise_at_caller(SORT_INVALID, 1) end
            i = i + 1
          end
          j = j - 1
          while lt(p, rawget_(t, j)) do
            if j <= l then raise_at_caller(SORT_INVALID, 1) end
            j = j - 1
          end
          if j < i then break end
          a, b = rawget_(t, i), rawget_(t, j)
          rawset_(t, i, b)
          rawset_(t, j, a)
        end
        a, b = rawget_(t, u - 1), rawget_(t, i)
        rawset_(t, u - 1, b)
        rawset_(t, i, a)
        -- The smaller side next (as the native sort recurses into it), the larger later.
        if i - l < u - i then
          stack[top + 1], stack[top + 2] = i + 1, u
          u = i - 1
        else
          stack[top + 1], stack[top + 2] = l, i - 1
          l = i + 1
        end
        top = top + 2
      end
      if top == 0 then return end
      l, u = stack[top - 1], stack[top]
      top = top - 2
    end
  end

  local function charge_native_sort(n)
    if n > 1 then charge(floor(n * (log(n) / log(2) + 1) / COMPARISONS_PER_STEP) + 1) end
  end

  -- Whether t[1..n], all numbers or all strings, has one sorted order, so that any sort
  -- leaves what the native sort leaves: equal strings are one value, and equal numbers
  -- are told apart only as 0 and -0 (a NaN orders nothing). Charged as kind_of.
  local function one_order(t, n, kind)
    if kind == "string" then return true end
    local zeros = 0
    for base = 1, n, WORK_PER_STEP do
      charge(1)
      for i = base, min(base + WORK_PER_STEP - 1, n) do
        local v = rawget_(t, i)
        if v ~= v then return false end
        if v == 0 then
          zeros = zeros + 1
          if zeros > 1 then return false end
        end
      end
    end
    return true
  end

  -- Whether the heap has room for two copies of n values (a copy is ~8 bytes a value).
  local function room_for(n)
    local kb = collectgarbage("count") + n * 16 / 1024 + 64
    return kb < M.alloc_kb and (M.max_memory <= 0 or kb * 1024 < M.max_memory)
  end

  -- A sort of values with one sorted order (above): blocks of SORT_NATIVE_MAX values
  -- sorted natively, each charged as a native sort, then merged here, a comparison per
  -- value and round, charged as the quicksort's are: n*log2(n/4096) comparisons in Lua
  -- instead of n*log2(n), each without a call. t is written once, at the end. Every loop
  -- charges at least every WORK_PER_STEP values: under the count hook, the meter polls
  -- in the prelude only at a charge (the hook fires at every instruction until one).
  --
  -- Values can be chosen to make the native quicksort quadratic; with one sorted order,
  -- the order a block is handed over in changes nothing but its time, so each block is
  -- shuffled first (a generator seeded from the clock: no mod can know it), and a block
  -- costs what a sort of 4096 values in no chosen order costs.
  local function merge_sort(t, n)
    local src, dst, block = {}, {}, {}
    local seed = floor(now() * 1e6) % 2147483646 + 1
    for base = 1, n, SORT_NATIVE_MAX do
      local m = min(SORT_NATIVE_MAX, n - base + 1)
      for b = 1, m, WORK_PER_STEP do
        charge(1)
        for i = b, min(b + WORK_PER_STEP - 1, m) do
          seed = (seed * 16807) % 2147483647
          local j = seed % i + 1  -- Fisher-Yates, inside out: block[1..i] is a shuffle
          block[i] = block[j]
          block[j] = rawget_(t, base + i - 1)
        end
      end
      for i = m + 1, #block do block[i] = nil end
      charge_native_sort(m)
      t_sort(block)
      for b = 1, m, WORK_PER_STEP do
        charge(1)
        for i = b, min(b + WORK_PER_STEP - 1, m) do src[base + i - 1] = block[i] end
      end
    end
    local width, ops = SORT_NATIVE_MAX, 0
    while width < n do
      for lo = 1, n, 2 * width do
        local mid, hi = min(lo + width, n + 1), min(lo + 2 * width, n + 1)
        local i, j = lo, mid
        for k = lo, hi - 1 do
          ops = ops + 1
          if ops >= MERGE_BATCH then
            ops = 0
            charge(MERGE_BATCH / COMPARISONS_PER_STEP)
          end
          local a = src[i]
          if j >= hi or (i < mid and not (src[j] < a)) then
            dst[k] = a
            i = i + 1
          else
            dst[k] = src[j]
            j = j + 1
          end
        end
      end
      src, dst = dst, src
      width = width * 2
    end
    for b = 1, n, WORK_PER_STEP do
      charge(1)
      for i = b, min(b + WORK_PER_STEP - 1, n) do rawset_(t, i, src[i]) end
    end
  end

  -- Sorts t[1..n] by the rule above; lt nil: the natural order, and `kind` tells what
  -- t[1..n] holds: "number" or "string" (all of that type), "plain" (no table) or nil.
  charged_sort = function(t, n, lt, kind)
    if lt == nil and kind ~= nil and n <= SORT_NATIVE_MAX then
      charge_native_sort(n)
      return t_sort(t)
    end
    if lt == nil and (kind == "number" or kind == "string") and room_for(n)
      and one_order(t, n, kind) then
      return merge_sort(t, n)
    end
    if lt == nil and kind ~= "number" and kind ~= "string" then lt = natural_less end
    return lua_sort(t, n, lt)
  end
  library_frames[lua_sort] = ""
  library_frames[merge_sort] = ""

  -- What t[1..n] holds, as charged_sort takes it. The scan is charged as it goes, a step
  -- per WORK_PER_STEP values (under the count hook, a charge is also where the meter
  -- polls while the prelude runs).
  local function kind_of(t, n)
    local first = type(rawget_(t, 1))
    local kind = (first == "number" or first == "string") and first or "plain"
    for base = 1, n, WORK_PER_STEP do
      charge(1)
      for i = base, min(base + WORK_PER_STEP - 1, n) do
        local tv = type(rawget_(t, i))
        if tv ~= kind then
          if tv == "table" then return nil end
          kind = "plain"
        end
      end
    end
    return kind
  end

  function wrapped_lib.table.sort(...)
    local t, lt = ...
    if type(t) ~= "table" or (lt ~= nil and type(lt) ~= "function") then
      return t_sort(...)  -- the native's own argument error
    end
    local n = #t
    return charged_sort(t, n, lt, lt == nil and kind_of(t, n) or nil)
  end
end

-------------------------------------------------------------------------------------------
-- Patterns. A native find/match/gmatch/gsub can backtrack for minutes inside one C call.
-- The native matcher runs only when its worst case is small: at most NATIVE_PATTERN_OPS
-- steps, where a pattern with k repeating items (* + - ? %b and back-references) on a
-- subject of n bytes needs at most (n + 1)^(k + 1); that bound is charged. Any other call
-- goes to the metered matcher of patterns.lua, which pays as it goes. A plain find with a
-- short needle stays native (memchr and memcmp), charged for its subject. Arguments the
-- native would refuse go to the native, which refuses them before it matches anything.
-------------------------------------------------------------------------------------------
do
  local NATIVE_PATTERN_OPS = config.native_pattern_ops
  local PATTERN_OPS_PER_STEP = config.pattern_ops_per_step
  local PLAIN_NEEDLE_MAX = 32
  local s_find, s_match, s_gmatch, s_gsub = string.find, string.match, string.gmatch,
    string.gsub
  local GMATCH_TEXT = tostring(s_gmatch("", ""))
  -- Built on first use: most mods never need it, and building it costs a sandbox ~1 ms.
  local metered_lib = nil
  local function metered()
    if metered_lib == nil then
      metered_lib = assert(load(patterns_code, nil, "b"))()(charge)
      for _, fn in next, metered_lib do library_frames[fn] = "" end
    end
    return metered_lib
  end

  -- Repeating items of each pattern seen (bounded, emptied when full); nil: not a string.
  local repeats_seen, repeats_seen_count = {}, 0
  local SPECIALS = "[%^%$%*%+%?%.%(%)%[%]%%%-]"

  local function repeats(p)
    local k = repeats_seen[p]
    if k ~= nil then return k end
    if type(p) ~= "string" then return nil end
    k = 0
    local i, len = 1, #p
    while i <= len do
      local c = s_byte(p, i)
      if c == 37 then  -- %
        local d = s_byte(p, i + 1)
        if d == 98 then k = k + 1 i = i + 4        -- %bxy
        else
          if d and d >= 49 and d <= 57 then k = k + 1 end  -- a back-reference
          i = i + 2
        end
      elseif c == 91 then  -- a set: skip to its end ("]" first is a member)
        i = i + 1
        if s_byte(p, i) == 94 then i = i + 1 end
        i = i + 1
        while i <= len and s_byte(p, i) ~= 93 do
          if s_byte(p, i) == 37 then i = i + 1 end
          i = i + 1
        end
        i = i + 1
      elseif c == 42 or c == 43 or c == 45 or c == 63 then  -- * + - ?
        k = k + 1
        i = i + 1
      else
        i = i + 1
      end
    end
    if repeats_seen_count >= 256 then repeats_seen, repeats_seen_count = {}, 0 end
    repeats_seen[p] = k
    repeats_seen_count = repeats_seen_count + 1
    return k
  end

  -- Patterns whose repeats cannot backtrack. A repeating item (* + - ?) of one character
  -- class X is *safe* when what must come next cannot be in X: a literal character not in
  -- X (captures between apart), or the pattern's closing `$`. Then, of the positions the
  -- native tries after X, all but one fail at once, so X costs a scan of the subject and
  -- one way on, and a pattern of safe repeats costs per start at most its length plus a
  -- scan per repeat: (n + 1) * (2#p + 1 + (n + 1) * scan), scan twice the repeats' class
  -- widths + 1. A pattern whose only repeat is its last item (captures apart), or with no
  -- repeat, is *linear*: reaching that item is a match, so its scan is what the match
  -- spans, and a find, a gmatch's whole iteration or a gsub costs at most
  -- (n + 1) * (2#p + 3 + 2 * width): like a plain find, it stays native at any size,
  -- charged for that (tests/sandbox/test_pattern_shapes.py holds both against the work). Anything else (%b, back-references, %f as a
  -- follower, a repeat followed by a class or by another repeat) keeps the bound above.
  -- Per pattern: false (neither), or {linear cost per subject byte, or false; scan}.
  local shapes_seen, shapes_seen_count = {}, 0
  local s_char_ = string.char
  local QUANTIFIER = { [42] = true, [43] = true, [45] = true, [63] = true }  -- * + - ?

  local function class_end(p, i, len)  -- the index after the class at i, or nil
    local c = s_byte(p, i)
    if c == 37 then return i + 1 < len + 1 and i + 2 or nil end  -- %x
    if c ~= 91 then return i + 1 end
    local j = i + 1  -- a set, as the native reads it: a first "]" is a member
    if s_byte(p, j) == 94 then j = j + 1 end
    repeat
      if j > len then return nil end
      local d = s_byte(p, j)
      j = j + 1
      if d == 37 then j = j + 1 end
    until s_byte(p, j) == 93
    return j + 1
  end

  local function literal_of(p, i, e)  -- the character a one-class item at i..e-1 stands for
    local c = s_byte(p, i)
    if e == i + 1 then return c ~= 46 and c or nil end  -- not "."
    if c == 37 and e == i + 2 then
      local d = s_byte(p, i + 1)
      if not ((d >= 48 and d <= 57) or (d >= 65 and d <= 90) or (d >= 97 and d <= 122)) then
        return d  -- %] %. %% ...: an escaped literal
      end
    end
    return nil
  end

  local function shape(p)
    local seen = shapes_seen[p]
    if seen ~= nil then return seen end
    local len = #p
    -- The items: a one-class item is its start, end and quantifier; captures are "(" and
    -- ")"; "$" is a closing anchor; anything else makes the pattern neither kind.
    local starts, ends, quants, kinds, count = {}, {}, {}, {}, 0
    -- A leading "^" anchors (gmatch reads it as a character: the same bound, unless a
    -- quantifier follows it, which makes it a repeat there).
    local i = s_byte(p, 1) == 94 and 2 or 1
    local ok = len <= 256 and not (i == 2 and QUANTIFIER[s_byte(p, 2)])
    while ok and i <= len do
      local c = s_byte(p, i)
      count = count + 1
      if c == 40 or c == 41 then
        kinds[count] = c
        i = i + 1
      elseif c == 36 and i == len then
        kinds[count] = 36
        i = i + 1
      elseif c == 37 and (s_byte(p, i + 1) == 98 or s_byte(p, i + 1) == 102
                          or (s_byte(p, i + 1) or 0) >= 48 and (s_byte(p, i + 1) or 0) <= 57) then
        ok = false  -- %b, %f, a back-reference
      else
        local e = class_end(p, i, len)
        if e == nil then
          ok = false
        else
          kinds[count], starts[count], ends[count] = 0, i, e
          local q = s_byte(p, e)
          if QUANTIFIER[q] then quants[count] = q e = e + 1 end
          i = e
        end
      end
    end
    local result = false
    if ok then
      local repeats_count, last_repeat, scan = 0, 0, 0
      for n = 1, count do
        if ok and quants[n] then
          repeats_count, last_repeat = repeats_count + 1, n
          local m = n + 1
          while kinds[m] == 40 or kinds[m] == 41 do m = m + 1 end
          local width = ends[n] - starts[n]
          if m > count then  -- the last item: the match ends with it
            scan = scan + width + 1 + (m - n)
          elseif kinds[m] == 36 then
            scan = scan + width + 1 + (m - n)
          elseif kinds[m] == 0 and (quants[m] == nil or quants[m] == 43) then
            local lit = literal_of(p, starts[m], ends[m])
            -- Whether the class holds the literal: the native, on one character ("()"
            -- after it, so a "$" class is a character, not the anchor).
            if lit ~= nil and s_find(s_char_(lit), "^" .. s_sub(p, starts[n], ends[n] - 1)
                                     .. "()") == nil then
              scan = scan + width + 1 + (m - n)
            else
              ok = false
            end
          else
            ok = false
          end
        end
      end
      if ok then
        local tail = last_repeat
        if tail > 0 then
          tail = tail + 1
          while kinds[tail] == 40 or kinds[tail] == 41 do tail = tail + 1 end
        end
        -- Counted as the metered matcher counts: a start enters the matcher and tries
        -- each item (2 per pattern byte at most), a scanned character is tested and the
        -- way on from it tried (2 per unit of scan).
        local linear = false
        if repeats_count == 0 then
          linear = 2 * len + 1
        elseif repeats_count == 1 and tail > count then
          linear = 2 * len + 1 + 2 * (ends[last_repeat] - starts[last_repeat] + 1)
        end
        -- The character every match begins with, when the first item (captures apart)
        -- is a literal: a start at any other character fails at that item, before any
        -- scan, so only the starts at one of its occurrences scan (nil: none such, or
        -- an anchored pattern, which gmatch reads otherwise).
        local first = 1
        while kinds[first] == 40 or kinds[first] == 41 do first = first + 1 end
        local lead = nil
        if s_byte(p, 1) ~= 94 and kinds[first] == 0 and quants[first] == nil then
          local lit = literal_of(p, starts[first], ends[first])
          if lit ~= nil then lead = s_char_(lit) end
        end
        result = { linear, 2 * scan, lead }
      end
    end
    if shapes_seen_count >= 256 then shapes_seen, shapes_seen_count = {}, 0 end
    shapes_seen[p] = result
    shapes_seen_count = shapes_seen_count + 1
    return result
  end

  -- `ops` plus `per_start` for each occurrence of `lead` in `s` from `at` (one there), or
  -- nil once that passes NATIVE_PATTERN_OPS.
  local function more_starts(s, lead, at, ops, per_start)
    while at ~= nil do
      ops = ops + per_start
      if ops > NATIVE_PATTERN_OPS then return nil end
      at = s_find(s, lead, at + 1, true)
    end
    return ops
  end

  -- The worst-case steps of the native matcher on this call, or nil when it must not run
  -- (0: an argument the native refuses, or a pattern it cannot backtrack on); and whether
  -- that bound holds for a gmatch's whole iteration (a linear pattern) rather than for
  -- each of its calls.
  local function native_cost(s, p)
    local k = repeats(p)
    if k == nil or (type(s) ~= "string" and type(s) ~= "number") then return 0 end
    local n = coerced_len(s) + 1
    -- A power, not a loop of products: a loop here would stop the JIT from compiling the
    -- loop that calls the pattern function (the same for the count of starts below).
    local ops = n ^ (k + 1)
    if ops <= NATIVE_PATTERN_OPS then return ops end
    local known = shape(p)
    if not known then return nil end
    if known[1] then return n * known[1], true end
    ops = n * (2 * #p + 1)
    local per_start = n * known[2]
    local lead = known[3]
    if lead == nil then
      ops = ops + n * per_start
    else
      -- Only a start at an occurrence of the pattern's leading character scans: counted
      -- (a plain find each), up to as many as the bound leaves room for; the first two
      -- out of the loop, which then runs only for a subject that holds more.
      local at = s_find(s, lead, 1, true)
      if at ~= nil then
        ops = ops + per_start
        at = s_find(s, lead, at + 1, true)
        if at ~= nil then ops = more_starts(s, lead, at, ops, per_start) end
      end
    end
    if ops == nil or ops > NATIVE_PATTERN_OPS then return nil end
    return ops
  end

  local function charge_ops(ops)
    if ops >= PATTERN_OPS_PER_STEP then charge(floor(ops / PATTERN_OPS_PER_STEP)) end
  end

  function wrapped_lib.string.find(...)
    local s, p, init, plain = ...
    if type(p) == "string" and (plain or not s_find(p, SPECIALS)) and #p <= PLAIN_NEEDLE_MAX
    then
      charge_work(coerced_len(s))
      return s_find(...)
    end
    if not int_arg(init) then return s_find(...) end  -- the native's own argument error
    local ops = native_cost(s, p)
    if ops == nil then return metered().find(...) end
    charge_ops(ops)
    return s_find(...)
  end

  function wrapped_lib.string.match(...)
    local s, p, init = ...
    if not int_arg(init) then return s_match(...) end  -- the native's own argument error
    local ops = native_cost(s, p)
    if ops == nil then return metered().match(...) end
    charge_ops(ops)
    return s_match(...)
  end

  -- Each call of a native gmatch iterator is one more match attempt: charged per call.
  function wrapped_lib.string.gmatch(...)
    local s, p = ...
    local ts, tp = type(s), type(p)
    if (ts ~= "string" and ts ~= "number") or (tp ~= "string" and tp ~= "number") then
      return s_gmatch(...)  -- the native's own argument error
    end
    local ops, whole = native_cost(s, p)
    local iter
    if ops == nil then
      iter = metered().gmatch(s, p)
    elseif whole then
      charge_ops(ops)  -- the whole iteration's
      local step = s_gmatch(s, p)
      iter = function() return step() end
    else
      local step = s_gmatch(s, p)
      iter = function()
        charge_ops(ops)
        return step()
      end
    end
    builtin_text[iter] = GMATCH_TEXT
    return iter
  end

  -- gsub. A replacement function, or a table with a metatable (its __index can run), is
  -- a callback. The native gsub calls it from C, so it runs behind the nesting bound; the
  -- native runs under xpcall, whose handler (which runs before the stack unwinds) tells an
  -- error the native raised itself, placed at its caller, from one a callback raised,
  -- which passes as it is. Callbacks of the metered gsub are called from Lua, and charged
  -- for the bytes they return; the native gsub's whole result is charged once built (it
  -- can be far longer than the subject).
  local GSUB_TOO_DEEP = "string.gsub: calls nested too deeply through library functions "
    .. "(more than " .. MAX_C_DEPTH .. " levels)"

  local function charged_value(r)
    if type(r) == "string" then charge_work(#r) end
    return r
  end

  local function metered_callback(repl)
    if type(repl) == "table" then
      return function(c) return charged_value(repl[c]) end
    end
    return function(...) return charged_value((repl(...))) end
  end

  local raised_by_gsub = false
  local function gsub_handler(err)
    -- Allocates nothing for an out-of-memory error, which is never the native's own.
    if not is_memory_error(err) then raised_by_gsub = getinfo(2, "f").func == s_gsub end
    return err
  end

  local function gsub_done(ok, r, n)
    if not ok then native_failed(r, 2) end  -- tail-called: the guard's caller is at level 2
    if type(r) == "string" then charge_work(#r) end
    return r, n
  end

  local function gsub_callback_done(ok, r, n)
    c_depth = c_depth - 1
    if not ok then
      if not raised_by_gsub then error(r, 0) end  -- a callback's own error
      raised_by_gsub = false
      native_failed(r, 2)
    end
    if type(r) == "string" then charge_work(#r) end
    return r, n
  end

  local REPLACEMENTS = { string = true, number = true, table = true, ["function"] = true }

  function wrapped_lib.string.gsub(...)
    local s, p, repl, max_n = ...
    if not REPLACEMENTS[type(repl)] or not int_arg(max_n) then
      return s_gsub(...)  -- the native's own argument error
    end
    local is_callback = type(repl) == "function"
      or (type(repl) == "table" and d_getmetatable(repl) ~= nil)
    local ops = native_cost(s, p)
    if ops == nil then
      if is_callback then repl = metered_callback(repl) end
      return metered().gsub(s, p, repl, max_n)
    end
    charge_ops(ops)
    charge_work(coerced_len(s))
    if not is_callback then return gsub_done(pcall(s_gsub, ...)) end
    if c_depth >= MAX_C_DEPTH then raise_here(GSUB_TOO_DEEP) end
    c_depth = c_depth + 1
    raised_by_gsub = false
    return gsub_callback_done(xpcall(s_gsub, gsub_handler, ...))
  end
end

-------------------------------------------------------------------------------------------
-- No addresses: tostring of a table, function or coroutine, and string.format's %p and %s,
-- show a stable id per sandbox ("table: 0x0000002a") instead of a heap address, so nothing
-- of the host's memory layout reaches a mod and output replays the same. A library
-- function shows what LuaJIT shows for it, "function: builtin#29", which holds no address
-- (and tells code that looks for it that this is LuaJIT).
-------------------------------------------------------------------------------------------
local OBJECT = { table = true, ["function"] = true, thread = true, userdata = true }
local object_ids = setmetatable({}, { __mode = "k" })
local last_object_id = 0

local function object_id(v)
  local id = object_ids[v]
  if id == nil then
    last_object_id = last_object_id + 1
    id = last_object_id
    object_ids[v] = id
  end
  return id
end

local function object_name(v)
  return s_format("%s: 0x%08x", type(v), object_id(v))
end

-- What LuaJIT shows for `v`, an object with no __tostring, with ids for addresses: a
-- builtin's text holds none (a function that stands for one shows the builtin's).
local function plain_text(v)
  if type(v) == "function" then
    local text = builtin_text[v]
    if text then return text end
    text = tostring(real_of[v] or v)
    if s_sub(text, 1, #BUILTIN_PREFIX) == BUILTIN_PREFIX then return text end
  end
  return object_name(v)
end

-- A __tostring that Lua can call: a function, or a table whose __call is one.
local function callable(f)
  if type(f) == "function" then return true end
  local mt = type(f) == "table" and d_getmetatable(f)
  return mt and type(rawget_(mt, "__call")) == "function" or false
end

-- tostring as LuaJIT's: a __tostring is called (here from Lua, so no C call nests) and
-- its results are tostring's, whatever they are.
function wrapped.tostring(...)
  if select("#", ...) == 0 then return tostring() end  -- the native's own error
  local v = ...
  if not OBJECT[type(v)] then return tostring(v) end
  local mt = d_getmetatable(v)
  local ts = type(mt) == "table" and rawget_(mt, "__tostring")
  if ts then
    if callable(ts) then return ts(v) end
    return tostring(v)  -- the native's own error: it calls what is not callable
  end
  return plain_text(v)
end

-- print's text for one value (print calls this): tostring's, which must be a string or a
-- number.
local TOSTRING_FOR_PRINT = "'tostring' must return a string to 'print'"
print_text = function(tostring_, v)
  local s = tostring_(v)
  local ts = type(s)
  if ts == "string" then return s end
  if ts == "number" then return tostring(s) end
  raise_at_caller(TOSTRING_FOR_PRINT, 2)  -- print is at level 2
end

do
  local s_find = string.find
  local PRIMITIVE = { number = true, string = true, boolean = true, ["nil"] = true }

  -- The text of an object for %s: a __tostring's result taken as %s takes a value, with
  -- no second __tostring (LuaJIT's rule).
  local function object_for_format(v)
    local mt = d_getmetatable(v)
    local ts = type(mt) == "table" and rawget_(mt, "__tostring")
    if not ts then return plain_text(v) end
    if not callable(ts) then error("attempt to call a " .. type(ts) .. " value", 0) end
    local r = ts(v)
    local tr = type(r)
    if tr == "string" or tr == "number" then return r end
    if OBJECT[tr] then return plain_text(r) end
    return tostring(r)
  end

  -- The bytes string.format is charged for: its format and its string arguments (widths
  -- and precisions add at most 99 bytes a conversion, numbers a few dozen).
  local function format_bytes(...)
    local bytes = 0
    for i = 1, select("#", ...) do
      local v = select(i, ...)
      if type(v) == "string" then bytes = bytes + #v end
    end
    return bytes
  end

  -- The slow path of string.format: an argument that is an object, or a format that may
  -- hold %p. Rewrites %p to %s of the object's id and gives %s of an object its text.
  -- No argument the native formats can then be an object with a __tostring: the native
  -- never calls back into Lua.
  local function format_objects(fmt, ...)
    local n = select("#", ...)
    local args = { ... }
    local i, k = 1, 0
    while true do
      local p = s_find(fmt, "%", i, true)
      if p == nil then break end
      if s_sub(fmt, p + 1, p + 1) == "%" then
        i = p + 2
      else
        local c = s_find(fmt, "[^-+ #0-9.]", p + 1)
        if c == nil then break end
        k = k + 1
        local conv, v = s_sub(fmt, c, c), args[k]
        if conv == "p" then
          fmt = s_sub(fmt, 1, c - 1) .. "s" .. s_sub(fmt, c + 1)
          args[k] = OBJECT[type(v)] and s_format("0x%08x", object_id(v)) or "NULL"
        elseif (conv == "s" or conv == "q") and OBJECT[type(v)] then
          -- LuaJIT shows an object under %q by its address too: the sandbox's id instead.
          args[k] = object_for_format(v)
        end
        i = c + 1
      end
    end
    charge_work(#fmt + format_bytes(unpack_(args, 1, n)))
    return s_format(fmt, unpack_(args, 1, n))
  end
  library_frames[format_objects] = ""  -- string.format hands its frame to it

  -- Format strings known to hold no %p: bounded, emptied when full.
  local formats_plain, formats_plain_count = {}, 0

  -- Whether a format holds a %p conversion, read as format_objects reads it (a format
  -- with the letter elsewhere, "path=%s", is plain: it once took the slow path on every
  -- call, ten times the native's time).
  local function holds_p(fmt)
    local i = 1
    while true do
      local p = s_find(fmt, "%", i, true)
      if p == nil then return false end
      if s_byte(fmt, p + 1) == 37 then
        i = p + 2
      else
        local c = s_find(fmt, "[^-+ #0-9.]", p + 1)
        if c == nil then return false end
        if s_byte(fmt, c) == 112 then return true end
        i = c + 1
      end
    end
  end

  local function format_slow(...)
    local fmt = ...
    if type(fmt) ~= "string" then return s_format(...) end  -- the native's own error
    local plain = not holds_p(fmt)
    if plain then
      if formats_plain_count >= 256 then formats_plain, formats_plain_count = {}, 0 end
      formats_plain[fmt] = true
      formats_plain_count = formats_plain_count + 1
      for i = 2, select("#", ...) do
        if not PRIMITIVE[type((select(i, ...)))] then plain = false break end
      end
    end
    if not plain then return format_objects(...) end
    charge_work(format_bytes(...))
    return s_format(...)
  end

  -- The bytes an argument adds, or far below zero for one that is not a primitive (the
  -- slow path's): a sum of them is negative as soon as one is an object.
  local NOT_PRIMITIVE = -2 ^ 52
  local function arg_bytes(v)
    local tv = type(v)
    if tv == "string" then return #v end
    if PRIMITIVE[tv] then return 0 end
    return NOT_PRIMITIVE
  end

  -- string.format is charged before it runs, for the length of its format and arguments,
  -- and called last: code after a call the JIT cannot compile would push the caller's
  -- loop out of its trace. Up to eight arguments are read by name: a loop of select(i,
  -- ...) over them stays out of the caller's trace and costs a call several times over.
  function wrapped_lib.string.format(...)
    local fmt, a, b, c, d, e, f, g, h = ...
    if formats_plain[fmt] then
      if select("#", ...) <= 9 then
        local bytes = #fmt + arg_bytes(a) + arg_bytes(b) + arg_bytes(c) + arg_bytes(d)
          + arg_bytes(e) + arg_bytes(f) + arg_bytes(g) + arg_bytes(h)
        if bytes < 0 then return format_slow(...) end
        if bytes >= WORK_PER_STEP then charge_work(bytes) end
        return s_format(...)
      end
      local bytes = 0
      for i = 1, select("#", ...) do
        local v = select(i, ...)
        local tv = type(v)
        if tv == "string" then
          bytes = bytes + #v
        elseif not PRIMITIVE[tv] then
          return format_slow(...)
        end
      end
      if bytes >= WORK_PER_STEP then charge_work(bytes) end
      return s_format(...)
    end
    return format_slow(...)
  end
end

-- collectgarbage tells a mod its heap ("count") and nothing more: the collector is the
-- host's. In deterministic mode not even that: the heap's size differs from run to run
-- (the prelude's own allocations, the string hash seed, when the collector ran), so a
-- figure a mod could read would make a seeded game diverge between runs.
do
  local GC_ONLY_COUNT = "collectgarbage: only \"count\" is available in a mod"
  local GC_NOT_DETERMINISTIC = "collectgarbage: \"count\" is not available in deterministic "
    .. "mode (the heap's size differs from run to run, so it would not replay)"
  local deterministic = config.deterministic

  function wrapped.collectgarbage(...)
    local opt = ...
    if opt ~= "count" then raise_at_caller(GC_ONLY_COUNT, 1) end
    if deterministic then raise_at_caller(GC_NOT_DETERMINISTIC, 1) end
    return collectgarbage("count")
  end
end
