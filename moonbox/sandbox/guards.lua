-- Part of the moonbox prelude (prelude.lua): the guarded library functions, each charged
-- for the work its input or result tells (docs/guards.md), with stable ids in place of
-- addresses.

-------------------------------------------------------------------------------------------
-- Guarded library functions. A library call is one C call no check can interrupt, so each
-- one whose work grows with its input is charged for that work: before it runs when the
-- input tells (string.rep, table.sort, unpack...), right after when only the result does
-- (string.format, table.concat...). A call that would outrun the step budget trips before
-- it starts, and the clock is polled in proportion to the work done. One step is about 64
-- bytes or 64 values copied, or 4 comparisons. docs/guards.md lists every guard.
-------------------------------------------------------------------------------------------
local WORK_PER_STEP = config.work_per_step
local COMPARISONS_PER_STEP = config.comparisons_per_step
local s_rep, s_find, s_upper, s_lower, s_reverse = string.rep, string.find, string.upper,
  string.lower, string.reverse
local s_char = string.char
local t_sort, t_insert, t_remove = table.sort, table.insert, table.remove
local unpack_, log = unpack, math.log
local d_getmetatable, rawget_ = debug.getmetatable, rawget

-- Charges `n` units of copying work (bytes or values).
local function charge_work(n)
  if n >= WORK_PER_STEP then charge(floor(n / WORK_PER_STEP)) end
end

-- Charges for a string result after the call that built it. (One result only: returning
-- `r, ...` is not compiled, and would push every caller's loop out of the JIT.)
local function charged(r)
  if type(r) == "string" then charge_work(#r) end
  return r
end

-- The length a value has once a string function coerces it (numbers: a short string).
local function coerced_len(v)
  local tv = type(v)
  if tv == "string" then return #v end
  if tv == "number" then return 24 end
  return 0
end

function wrapped_lib.string.rep(s, n, sep)
  local count = tonumber(n)
  if count and count > 0 then charge_work((coerced_len(s) + coerced_len(sep)) * count) end
  return s_rep(s, n, sep)
end

function wrapped_lib.string.upper(s, ...)
  charge_work(coerced_len(s))
  return s_upper(s, ...)
end

function wrapped_lib.string.lower(s, ...)
  charge_work(coerced_len(s))
  return s_lower(s, ...)
end

function wrapped_lib.string.reverse(s, ...)
  charge_work(coerced_len(s))
  return s_reverse(s, ...)
end

function wrapped_lib.string.sub(s, i, j)
  return charged(s_sub(s, i, j))
end

function wrapped_lib.string.char(...)
  charge_work(select("#", ...))
  return s_char(...)
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

function wrapped_lib.string.byte(s, i, j)
  local len = coerced_len(s)
  local first = clamped_index(i, len, 1, 1)
  local last = j == nil and (i == nil and 1 or first) or clamped_index(j, len, len, len)
  if last > first then charge_work(last - first) end
  return s_byte(s, i, j)
end

function wrapped.tonumber(v, ...)
  if type(v) == "string" then charge_work(#v) end
  return tonumber(v, ...)
end

function wrapped.unpack(t, i, j)
  local first = tonumber(i) or 1
  local last = tonumber(j)
  if last == nil and type(t) == "table" then last = #t end
  if last and last > first then charge_work(last - first) end
  return unpack_(t, i, j)
end

function wrapped.select(n, ...)
  local count = select("#", ...)
  if count >= WORK_PER_STEP then charge_work(count) end
  return select(n, ...)
end

function wrapped_lib.table.concat(t, sep, i, j)
  if type(t) == "table" then
    local first, last = tonumber(i) or 1, tonumber(j) or #t
    if last > first then charge_work(last - first) end
  end
  return charged(concat(t, sep, i, j))
end

-- Inserting or removing at a position moves every value after it. A position the runtime
-- would turn into a huge count of moves (NaN, infinite, far below 1: it converts them to
-- the lowest integer) is refused.
local MIN_POSITION = -2 ^ 20

local function position(pos, fname)
  local at = tonumber(pos)
  if at == nil or not (at >= MIN_POSITION and at <= 2 ^ 31) then
    raise_here("bad argument #2 to '" .. fname .. "' (position out of bounds)")
  end
  return at
end

function wrapped_lib.table.insert(t, ...)
  if select("#", ...) >= 2 and type(t) == "table" then
    charge_work(#t - position((...), "insert"))
  end
  return t_insert(t, ...)
end

function wrapped_lib.table.remove(t, pos)
  if pos ~= nil and type(t) == "table" then
    charge_work(#t - position(pos, "remove"))
  end
  return t_remove(t, pos)
end

-- table.sort: up to SORT_NATIVE_MAX values the native sort runs, charged for n*log2(n)
-- comparisons first (milliseconds at most). A longer table is sorted here, in Lua, where
-- the comparisons are charged as they happen, so the time budget can stop it midway. Ties
-- may end in another order than the native sort's (neither is stable).
local SORT_NATIVE_MAX = config.sort_native_max
local SORT_INVALID = "invalid order function for sorting"
local SORT_BATCH = 256  -- comparisons charged at once

local function metered_sort(t, lt)
  local ops = 0
  local function less(a, b)
    ops = ops + 1
    if ops >= SORT_BATCH then
      ops = 0
      charge(SORT_BATCH / COMPARISONS_PER_STEP)
    end
    if lt then return lt(a, b) end
    return a < b
  end
  local stack, top = { 1, #t }, 2
  while top > 0 do
    local lo, hi = stack[top - 1], stack[top]
    top = top - 2
    while hi - lo > 12 do
      -- Median of three: t[lo] <= t[mid] <= t[hi] are then sentinels for the partition.
      local mid = floor((lo + hi) / 2)
      if less(t[hi], t[lo]) then t[lo], t[hi] = t[hi], t[lo] end
      if less(t[mid], t[lo]) then
        t[mid], t[lo] = t[lo], t[mid]
      elseif less(t[hi], t[mid]) then
        t[mid], t[hi] = t[hi], t[mid]
      end
      local pivot = t[mid]
      t[mid], t[hi - 1] = t[hi - 1], t[mid]
      local i, j = lo, hi - 1
      while true do
        i = i + 1
        while less(t[i], pivot) do
          i = i + 1
          if i >= hi then raise_here(SORT_INVALID) end
        end
        j = j - 1
        while less(pivot, t[j]) do
          j = j - 1
          if j < lo then raise_here(SORT_INVALID) end
        end
        if i >= j then break end
        t[i], t[j] = t[j], t[i]
      end
      t[hi - 1], t[i] = t[i], t[hi - 1]
      -- Loop on the smaller side, keep the larger for later: the stack stays O(log n).
      if i - lo < hi - i then
        stack[top + 1], stack[top + 2] = i + 1, hi
        hi = i - 1
      else
        stack[top + 1], stack[top + 2] = lo, i - 1
        lo = i + 1
      end
      top = top + 2
    end
    for i = lo + 1, hi do  -- insertion sort of the short run left
      local v = t[i]
      local j = i - 1
      while j >= lo and less(v, t[j]) do
        t[j + 1] = t[j]
        j = j - 1
      end
      t[j + 1] = v
    end
  end
end

-- The rule above, for n values of t: `native` sorts up to SORT_NATIVE_MAX, charged first.
local function charged_sort(t, n, lt, native)
  if n > SORT_NATIVE_MAX then return metered_sort(t, lt) end
  if n > 1 then charge(floor(n * (log(n) / log(2) + 1) / COMPARISONS_PER_STEP) + 1) end
  return native(t, lt)
end

local guarded_sort = depth_guarded(t_sort, "table.sort")
function wrapped_lib.table.sort(t, lt)
  if type(t) == "table" and (lt == nil or type(lt) == "function") then
    return charged_sort(t, #t, lt, guarded_sort)
  end
  return guarded_sort(t, lt)
end

-------------------------------------------------------------------------------------------
-- Patterns. A native find/match/gmatch/gsub can backtrack for minutes inside one C call.
-- The native matcher runs only when its worst case is small: at most NATIVE_PATTERN_OPS
-- steps, where a pattern with k repeating items (* + - ? %b and back-references) on a
-- subject of n bytes needs at most (n + 1)^(k + 1); that bound is charged. Any other call
-- goes to the metered matcher of patterns.lua, which pays as it goes. A plain find with a
-- short needle stays native (memchr and memcmp), charged for its subject.
-------------------------------------------------------------------------------------------
local NATIVE_PATTERN_OPS = config.native_pattern_ops
local PATTERN_OPS_PER_STEP = config.pattern_ops_per_step
local PLAIN_NEEDLE_MAX = 32
-- Built on first use: most mods never need it, and building it costs a sandbox ~1 ms.
local metered_lib = nil
local function metered()
  if metered_lib == nil then metered_lib = assert(load(patterns_code, nil, "b"))()(charge) end
  return metered_lib
end
local s_match, s_gmatch, s_gsub = string.match, string.gmatch, string.gsub
local guarded_gsub = depth_guarded(s_gsub, "string.gsub")

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

-- The worst-case steps of the native matcher on this call, or nil when it must not run.
local function native_cost(s, p)
  local k = repeats(p)
  if k == nil or (type(s) ~= "string" and type(s) ~= "number") then return 0 end  -- errors
  local n = coerced_len(s) + 1
  local ops = n
  for _ = 1, k do
    ops = ops * n
    if ops > NATIVE_PATTERN_OPS then return nil end
  end
  return ops
end

local function charge_ops(ops)
  if ops >= PATTERN_OPS_PER_STEP then charge(floor(ops / PATTERN_OPS_PER_STEP)) end
end

function wrapped_lib.string.find(s, p, init, plain)
  if type(p) == "string" and (plain or not s_find(p, SPECIALS)) and #p <= PLAIN_NEEDLE_MAX then
    charge_work(coerced_len(s))
    return s_find(s, p, init, plain)
  end
  local ops = native_cost(s, p)
  if ops == nil then return metered().find(s, p, init, plain) end
  charge_ops(ops)
  return s_find(s, p, init, plain)
end

function wrapped_lib.string.match(s, p, init)
  local ops = native_cost(s, p)
  if ops == nil then return metered().match(s, p, init) end
  charge_ops(ops)
  return s_match(s, p, init)
end

-- Each call of a native gmatch iterator is one more match attempt: charged per call.
function wrapped_lib.string.gmatch(s, p)
  local ops = native_cost(s, p)
  if ops == nil then return metered().gmatch(s, p) end
  local step = s_gmatch(s, p)
  return function()
    charge_ops(ops)
    return step()
  end
end

-- gsub's result can be far longer than its input: charged once built (the heap cap bounds
-- how long that can take).
local function gsub_result(r, n)
  if type(r) == "string" then charge_work(#r) end
  return r, n
end

function wrapped_lib.string.gsub(s, p, ...)
  local ops = native_cost(s, p)
  if ops == nil then return gsub_result(metered().gsub(s, p, ...)) end
  charge_ops(ops)
  charge_work(coerced_len(s))
  return gsub_result(guarded_gsub(s, p, ...))
end

-------------------------------------------------------------------------------------------
-- No addresses: tostring of a table, function or coroutine, and string.format's %p and %s,
-- show a stable id per sandbox ("table: 0x0000002a") instead of a heap address, so nothing
-- of the host's memory layout reaches a mod and output replays the same.
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

-- tostring reaches Lua only through a table's __tostring: other values skip the depth
-- guard (it would double the cost of string-heavy code).
local guarded_tostring = depth_guarded(tostring, "tostring")
function wrapped.tostring(...)
  if select("#", ...) == 0 then return tostring() end  -- the usual error
  local v = ...
  if not OBJECT[type(v)] then return tostring(v) end
  local mt = d_getmetatable(v)
  if type(mt) == "table" and rawget_(mt, "__tostring") ~= nil then
    return guarded_tostring(v)
  end
  return object_name(v)
end

local PRIMITIVE = { number = true, string = true, boolean = true, ["nil"] = true }
local guarded_format = depth_guarded(s_format, "string.format")

-- The slow path of string.format: an argument that is an object, or a format that may
-- hold %p. Rewrites %p to %s of the object's id and gives %s of an object our tostring.
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
        args[k] = wrapped.tostring(v)
      end
      i = c + 1
    end
  end
  return guarded_format(fmt, unpack_(args, 1, n))
end

-- Format strings known to hold no 'p' (so no %p): bounded, emptied when full.
local formats_plain, formats_plain_count = {}, 0

local function format_slow(fmt, ...)
  if type(fmt) ~= "string" then return guarded_format(fmt, ...) end  -- the usual error
  local plain = s_find(fmt, "p", 1, true) == nil
  if plain then
    if formats_plain_count >= 256 then formats_plain, formats_plain_count = {}, 0 end
    formats_plain[fmt] = true
    formats_plain_count = formats_plain_count + 1
    for i = 1, select("#", ...) do
      if not PRIMITIVE[type((select(i, ...)))] then plain = false break end
    end
  end
  local r = plain and s_format(fmt, ...) or format_objects(fmt, ...)
  charge_work(#r)
  return r
end

-- string.format is charged before it runs, for the length of its format and arguments
-- (widths and precisions add at most 99 bytes a conversion), and called last: code after
-- a call the JIT cannot compile would push the caller's loop out of its trace.
function wrapped_lib.string.format(fmt, ...)
  if formats_plain[fmt] then
    local bytes = #fmt
    for i = 1, select("#", ...) do
      local v = select(i, ...)
      local tv = type(v)
      if tv == "string" then
        bytes = bytes + #v
      elseif not PRIMITIVE[tv] then
        return format_slow(fmt, ...)
      end
    end
    if bytes >= WORK_PER_STEP then charge_work(bytes) end
    return s_format(fmt, ...)
  end
  return format_slow(fmt, ...)
end

-- collectgarbage tells a mod its heap ("count") and nothing more: the collector is the host's.
function wrapped.collectgarbage(opt)
  if opt == "count" then return collectgarbage("count") end
  error("collectgarbage: only \"count\" is available in a mod", 2)
end
