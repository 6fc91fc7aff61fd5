-- moonbox prelude: host-side Lua that runs once in every sandbox runtime, before any mod.
--
-- It owns the meter (the step cell, the slow path, the count hook of jit=False mode), builds
-- each mod environment from the allowlist it is given, loads mod chunks in text mode, runs
-- them in coroutines under a budget, and checks values before they cross to Python.
--
-- Mod code can never reach anything defined here: every name below is a local of this chunk,
-- the environment a mod gets is a fresh table, and the library tables in it are copies.

local config, dispatch, patterns_code = ...

-- Everything the prelude uses is captured now, before any mod runs.
local type, next, select, error, tostring, tonumber = type, next, select, error, tostring, tonumber
local setmetatable, getmetatable, pcall, xpcall, load = setmetatable, getmetatable, pcall, xpcall, load
local co_create, co_resume, co_status = coroutine.create, coroutine.resume, coroutine.status
local co_yield, co_running = coroutine.yield, coroutine.running
local getinfo, sethook = debug.getinfo, debug.sethook
local s_sub, s_format, s_byte = string.sub, string.format, string.byte
local floor, huge = math.floor, math.huge
local collectgarbage = collectgarbage
local concat = table.concat
local ffi = require("ffi")
local jit = require("jit")

local PRELUDE_SOURCE = getinfo(1, "S").source

-------------------------------------------------------------------------------------------
-- Clock: CLOCK_MONOTONIC through the FFI (tens of nanoseconds once compiled, ~0.8 us from
-- the interpreter). The host reads a resume's start and end on the same clock.
-------------------------------------------------------------------------------------------
local now = os.clock
local CLOCK = "process"
do
  local ok = pcall(ffi.cdef, [[
    typedef struct { long tv_sec; long tv_nsec; } moonbox_timespec;
    int clock_gettime(int clk_id, moonbox_timespec *tp);
  ]])
  if ok and ffi.os == "Linux" then
    local ts = ffi.new("moonbox_timespec")
    local C = ffi.C
    local function mono()
      C.clock_gettime(1, ts)
      return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
    end
    if pcall(mono) then now, CLOCK = mono, "monotonic" end
  end
end

-------------------------------------------------------------------------------------------
-- The meter.
--
-- `cell[0]` is the step window: instrumented checks decrement it and call `slow` when it
-- drops below zero. `slow` accounts the window, polls the clock and the heap, adapts the
-- poll interval K, and either refills the window, preempts (yields) or trips.
--
-- The cell is a 32-bit integer: in compiled code a check is then an integer subtract, and
-- the chain of checks through the cell (every function entry of a recursion) is shorter
-- than with a double (fib, the worst case, runs ~5% faster). Everything stored in it stays
-- in range: a window holds at most K_MAX steps, a check subtracts its weight (far below
-- 2^24) and calls `slow` as soon as the cell is negative, and charges that go past the
-- window are accounted exactly by `overdrawn`, never stored.
-------------------------------------------------------------------------------------------
local cell = ffi.new("int32_t[1]")
local STICKY = -1073741824                -- -2^30: stays negative whatever a check subtracts
-- K_MAX bounds the time between polls: a step is at most a bounded amount of straight-line
-- work (the instrumenter weighs big bodies), so 2^17 steps stay within milliseconds.
local K_MIN, K_MAX = 1, 131072
local POLL_LOW_S, POLL_HIGH_S = 0.0002, 0.001  -- aim: one poll every 0.2-1 ms

local m_active = false      -- a resume is running
local m_window = 0          -- steps granted to the cell at the last refill
local m_used = 0            -- steps accounted in this resume
local m_total_base = 0      -- steps used by earlier resumes of the run (for total_steps)
local m_start = 0           -- clock at resume start
local m_deadline = huge     -- clock value at which the resume runs out of time
local m_alloc_kb = huge     -- heap (KiB) at which the resume runs out of allocation
local m_start_kb = 0        -- heap (KiB) when the resume began
local m_growth_limited = false  -- the allocator's limit this resume is the growth allowance
local m_peak_kb = 0
local m_k = 256             -- steps between polls, adapted to the workload
local m_last_poll = 0
local m_run_co = nil        -- coroutine of the running run
local m_chunks = {}         -- source name -> true, for every mod chunk loaded here

-- The budget of every resume, until the host sends another (b_total_limit -1: no cap).
-- The allocator enforces max_memory and alloc_bytes; the meter checks alloc_bytes too.
local b_steps, b_wall_s, b_total_limit, b_preempt = 0, 0, -1, false
local b_alloc_bytes, b_max_memory = 0, 0
local host_call_max_kb = 0  -- a host call is refused above this heap (see make_host_function)

-- Trip state: sticky until the next resume begins.
local tripped = false
local t_kind, t_limit, t_used, t_chunk, t_line = nil, 0, 0, nil, nil
local TRIP_MESSAGE = "moonbox: budget exceeded"

local PREEMPT = {}          -- yielded to the host at slice end; unforgeable

local function mod_frame(level)
  -- First frame at or above `level` that runs a mod chunk: its source and line.
  for lvl = level, level + 200 do
    local info = getinfo(lvl, "Sl")
    if not info then return nil, nil end
    if m_chunks[info.source] and info.currentline > 0 then
      return info.source, info.currentline
    end
  end
  return nil, nil
end

local function account()
  local c = cell[0]
  if c > STICKY / 2 then
    m_used = m_used + (m_window - c)
  end
  m_window = c
end

local function set_trip(kind, limit, used)
  if tripped then return end
  tripped = true
  t_kind, t_limit, t_used = kind, limit, used
  t_chunk, t_line = mod_frame(2)
end

local function raise_trip()
  cell[0] = STICKY
  m_window = STICKY
  error(TRIP_MESSAGE, 0)
end

local function refill()
  local w = m_k
  local left = b_steps - m_used
  if left < w then w = left end
  if b_total_limit >= 0 then
    local total_left = b_total_limit - m_total_base - m_used
    if total_left < w then w = total_left end
  end
  if w < 0 then w = 0 end
  m_window = w
  cell[0] = w
end

-- jit=False: set when the count hook was armed for single instructions (see hook below).
local hook_pending = false
local restore_hook  -- set with the hook

local function slow()
  if tripped then raise_trip() end
  if hook_pending then restore_hook() end
  account()
  local t = now()
  local dt = t - m_last_poll
  m_last_poll = t
  if dt < POLL_LOW_S then
    if m_k < K_MAX then m_k = m_k * 2 end
  elseif dt > POLL_HIGH_S and m_k > K_MIN then
    m_k = floor(m_k / 2)
  end
  local kb = collectgarbage("count")
  if kb > m_peak_kb then m_peak_kb = kb end
  if kb > m_alloc_kb then
    set_trip("memory", b_alloc_bytes, floor((kb - m_start_kb) * 1024))
    raise_trip()
  end
  if b_total_limit >= 0 and m_total_base + m_used > b_total_limit then
    set_trip("steps", b_total_limit, m_total_base + m_used)
    raise_trip()
  end
  local over_steps = m_used > b_steps
  local over_time = t > m_deadline
  if over_steps or over_time then
    if b_preempt and co_running() == m_run_co then
      -- Yield to the host; the next resume refills the window with a fresh slice.
      if pcall(co_yield, PREEMPT) then return end
    end
    if over_steps then
      set_trip("steps", b_steps, m_used)
    else
      set_trip("time", b_wall_s, t - m_start)
    end
    raise_trip()
  end
  refill()
end

-- jit=False mode: a count hook drives the same meter. One hook call is HOOK_STEPS steps.
local HOOK_INSTRUCTIONS = config.hook_instructions
local HOOK_STEPS = config.hook_steps
local hook

-- Armed for one instruction at a time when the meter ran out inside the prelude: polls at
-- the first instruction back in mod code. (Waiting for the next full count instead let a
-- loop whose length divides the count land in the prelude every time, and never trip:
-- found by the fuzzer.)
restore_hook = function()
  hook_pending = false
  sethook(hook, "", HOOK_INSTRUCTIONS)
end

local function pending_hook()
  local info = getinfo(2, "S")
  if info and info.source == PRELUDE_SOURCE then return end
  restore_hook()
  if m_active then slow() end
end

hook = function()
  if not m_active then return end
  local c = cell[0] - HOOK_STEPS
  cell[0] = c
  if c < 0 then
    -- Never poll or trip inside the prelude's own code (the host's work between the mod's
    -- steps): the first instruction back in mod code does.
    local info = getinfo(2, "S")
    if info and info.source == PRELUDE_SOURCE then
      hook_pending = true
      sethook(pending_hook, "", 1)
      return
    end
    slow()
  end
end

if config.jit then
  jit.on()
else
  jit.off()
  jit.flush()
  sethook(hook, "", HOOK_INSTRUCTIONS)
end

-- The window is overdrawn to `c` (below zero, possibly far below what the cell can hold)
-- by a charge: accounted here exactly, then the slow path polls, and refills or trips.
local function overdrawn(c)
  if cell[0] > STICKY / 2 then  -- once tripped, slow raises again
    m_used = m_used + (m_window - c)
    m_window = 0
    cell[0] = 0
  end
  slow()
end

-- Charge `cost` steps for work done outside instrumented code (bindings, library calls).
-- A cost that is not a number below MAX_CHARGE (NaN, infinite, huge) is MAX_CHARGE: far
-- past any step budget, and still small enough for the meter to account. A cost below
-- zero charges nothing.
local MAX_CHARGE = 2 ^ 50
local function charge(cost)
  if not (cost < MAX_CHARGE) then
    cost = MAX_CHARGE
  elseif not (cost > 0) then
    cost = 0
  end
  local c = cell[0] - cost
  if c < 0 then
    overdrawn(c)
  else
    cell[0] = c
  end
end

local function is_memory_error(err)
  return err == "not enough memory"
end

-- An allocation failed: the limit it hit, and what was used against it.
local function memory_trip_figures()
  local kb = collectgarbage("count")
  if m_growth_limited then return b_alloc_bytes, floor((kb - m_start_kb) * 1024) end
  return b_max_memory, floor(kb * 1024)
end

-- The re-raise behind every protected call a mod can make: once a budget tripped, no
-- pcall, xpcall or coroutine.resume returns to the mod.
local function rethrow(ok, ...)
  if not ok and not tripped and is_memory_error((...)) then
    local limit, used = memory_trip_figures()
    set_trip("memory", limit, used)
  end
  if tripped then raise_trip() end
  return ok, ...
end

-------------------------------------------------------------------------------------------
-- Values that cross to Python: plain data only, checked with raw access.
-------------------------------------------------------------------------------------------
local DATA_TYPES = { ["nil"] = true, boolean = true, number = true, string = true }

-- Checks a value tree before Python copies it: nil or an error message, and the number of
-- entries walked. strict: functions, coroutines and userdata are errors; otherwise Python
-- shows them as placeholders. depth0 is the depth of `value` itself (0 for the wrapper
-- table of returned values). Never calls a metamethod.
local function check_export(value, strict, max_depth, max_items, max_bytes, depth0)
  local seen = {}
  local items, bytes = 0, 0
  local function walk(v, depth, path)
    local tv = type(v)
    if tv == "string" then
      bytes = bytes + #v
      if bytes > max_bytes then
        return s_format("%s: strings too large (more than %d bytes in all)", path, max_bytes)
      end
      return nil
    end
    if DATA_TYPES[tv] then return nil end
    if tv ~= "table" then
      if strict then return s_format("%s: a %s cannot cross to the host", path, tv) end
      return nil
    end
    if seen[v] then
      return s_format("%s: the table contains itself (a cycle); only trees can cross", path)
    end
    if depth > max_depth then
      return s_format("%s: nested deeper than %d levels", path, max_depth)
    end
    seen[v] = true
    local k, x = next(v)
    while k ~= nil do
      items = items + 1
      if items > max_items then
        return s_format("%s: too large (more than %d items in all)", path, max_items)
      end
      local tk = type(k)
      if tk == "string" then
        bytes = bytes + #k
      elseif tk ~= "number" then
        return s_format("%s: a %s key cannot cross to the host (keys are strings or numbers)",
          path, tk)
      elseif k ~= k then
        return s_format("%s: a NaN key cannot cross to the host", path)
      end
      local err = walk(x, depth + 1, path)
      if err then return err end
      k, x = next(v, k)
    end
    seen[v] = nil
    return nil
  end
  return walk(value, depth0, "value"), items
end

-------------------------------------------------------------------------------------------
-- Error descriptions: message, position and the mod's own frames, without metamethods.
-------------------------------------------------------------------------------------------
local MAX_MESSAGE = config.max_message_bytes

local function error_text(err)
  local te = type(err)
  if te == "string" then
    if #err > MAX_MESSAGE then return s_sub(err, 1, MAX_MESSAGE) .. "..." end
    return err
  elseif te == "number" or te == "boolean" or te == "nil" then
    return tostring(err)
  end
  return "(error object is a " .. te .. " value)"
end

local function frames_of(co, main)
  -- The mod's own frames, innermost first: chunk, line and function name.
  local frames = {}
  for lvl = 0, 200 do
    local info = getinfo(co, lvl, "Slnf")
    if not info then break end
    if m_chunks[info.source] then
      local name = info.name
      if info.func == main then name = "main chunk" end
      local line = info.currentline
      if line <= 0 then line = nil end
      frames[#frames + 1] = { chunk = info.source, line = line, name = name }
    end
  end
  return frames
end

-------------------------------------------------------------------------------------------
-- Environments.
-------------------------------------------------------------------------------------------
local real = {
  _G = _G, string = string, table = table, math = math, bit = bit, coroutine = coroutine,
}

local wrapped = {}
local wrapped_lib = { coroutine = {}, string = {}, table = {} }

-- Nested calls through C. Library functions that call back into Lua (gsub callbacks, sort
-- comparators, __tostring, coroutine resumes) recurse on the C stack, where LuaJIT does not
-- always check depth: unchecked, a recursive gsub callback or nested coroutine resumes crash
-- the process. They share one bounded depth; passing it is one catchable error.
--
-- The depth is exact: every guarded call gives its level back on every way out (a normal
-- return, or an error it re-raises). It is never restored from a saved value: a coroutine
-- parked inside a pcall and resumed deeper would otherwise reset it and pass the bound.
local MAX_C_DEPTH = config.max_c_depth
local c_depth = 0

local function raise_here(message)
  -- Raises with the position of the innermost mod frame (tail calls hide the caller).
  local src, line = mod_frame(2)
  if src then
    local first = s_sub(src, 1, 1)
    local short = (first == "@" or first == "=") and s_sub(src, 2) or src
    message = short .. ":" .. line .. ": " .. message
  end
  error(message, 0)
end

local function leave_c(ok, ...)
  c_depth = c_depth - 1
  if ok then return ... end
  error((...), 0)
end

local function depth_guarded(fn, name)
  local message = name .. ": calls nested too deeply through library functions (more than "
    .. MAX_C_DEPTH .. " levels)"
  return function(...)
    if c_depth >= MAX_C_DEPTH then raise_here(message) end
    c_depth = c_depth + 1
    return leave_c(pcall(fn, ...))
  end
end

function wrapped.pcall(f, ...)
  return rethrow(pcall(f, ...))
end

-- xpcall runs its handler after the error has unwound, through pcall: LuaJIT runs a real
-- xpcall handler with hooks off, so under jit=False a handler that loops would never be
-- metered. A handler that fails gives "error in error handling", as in Lua; a trip or an
-- out-of-memory error never reaches the handler.
local function after_handler(ok, ...)
  if ok then return false, ... end
  if tripped then raise_trip() end
  return false, "error in error handling"
end

local function handle(handler, ok, ...)
  if ok then return true, ... end
  local err = ...
  if not tripped and is_memory_error(err) then return rethrow(false, err) end
  if tripped then raise_trip() end
  return after_handler(pcall(handler, err))
end

function wrapped.xpcall(f, handler, ...)
  if type(handler) ~= "function" then return xpcall(f, handler, ...) end
  return handle(handler, pcall(f, ...))
end

local RESUME_TOO_DEEP = "coroutine.resume: coroutines nested too deeply (more than "
  .. MAX_C_DEPTH .. " levels)"

-- coroutine.resume never raises for a coroutine (it returns false and the error), so the
-- level is given back on its return.
local function resumed(ok, ...)
  c_depth = c_depth - 1
  return rethrow(ok, ...)
end

local host_cos = setmetatable({}, { __mode = "k" })  -- the coroutines of host runs

function wrapped_lib.coroutine.resume(co, ...)
  if type(co) ~= "thread" then return co_resume(co, ...) end  -- the usual error
  if host_cos[co] then return false, "cannot resume non-suspended coroutine" end
  if c_depth >= MAX_C_DEPTH then raise_here(RESUME_TOO_DEEP) end
  c_depth = c_depth + 1
  return resumed(co_resume(co, ...))
end

local function wrap_result(ok, ...)
  if ok then return ... end
  error((...), 0)
end

function wrapped_lib.coroutine.wrap(f)
  local co = co_create(f)
  return function(...)
    if c_depth >= MAX_C_DEPTH then raise_here(RESUME_TOO_DEEP) end
    c_depth = c_depth + 1
    return wrap_result(resumed(co_resume(co, ...)))
  end
end

-- The run's own coroutine is the host's: to the mod it is the main thread (nil, as in
-- Lua 5.1), so no other run can resume or inspect it.
function wrapped_lib.coroutine.running()
  local co = co_running()
  if co == nil or host_cos[co] then return nil end
  return co
end

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
      elseif conv == "s" and OBJECT[type(v)] then
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

-------------------------------------------------------------------------------------------
-- Replay: math.random starts from the sandbox's seed; in deterministic mode pairs visits
-- keys in a fixed order (the order of next follows the runtime's string hash seed).
-------------------------------------------------------------------------------------------
math.randomseed(config.seed)

local KEY_RANK = { number = 1, string = 2, boolean = 3 }

local function key_less(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return (KEY_RANK[ta] or 4) < (KEY_RANK[tb] or 4) or
    (KEY_RANK[ta] == nil and KEY_RANK[tb] == nil and ta < tb) end
  if ta == "number" or ta == "string" then return a < b end
  if ta == "boolean" then return b and not a end
  return object_id(a) < object_id(b)
end

-- Keys are sorted as table.sort sorts (charged_sort): a mod can choose number keys whose
-- order makes a quicksort quadratic, and one native call of any length would then run
-- unmetered for seconds. The keys are distinct and totally ordered: every correct sort
-- gives the same order.
-- Numbers and strings are sorted apart, each by the runtime's own comparison (no Lua
-- comparator to call per comparison: several times faster), then put in KEY_RANK order:
-- the same order key_less gives.
local function ordered_pairs(t)
  if type(t) ~= "table" then return pairs(t) end  -- the usual error
  local nums, strs, n_nums, n_strs = {}, {}, 0, 0
  local others, has_false, has_true = nil, false, false
  for k in next, t do
    local tk = type(k)
    if tk == "number" then
      n_nums = n_nums + 1
      nums[n_nums] = k
    elseif tk == "string" then
      n_strs = n_strs + 1
      strs[n_strs] = k
    elseif k == true then
      has_true = true
    elseif k == false then
      has_false = true
    else
      others = others or {}
      others[#others + 1] = k
    end
  end
  local n = n_nums + n_strs + (has_false and 1 or 0) + (has_true and 1 or 0)
    + (others and #others or 0)
  charge_work(n)
  charged_sort(nums, n_nums, nil, t_sort)
  charged_sort(strs, n_strs, nil, t_sort)
  local keys = nums
  for i = 1, n_strs do keys[n_nums + i] = strs[i] end
  n = n_nums + n_strs
  if has_false then n = n + 1 keys[n] = false end
  if has_true then n = n + 1 keys[n] = true end
  if others then
    charged_sort(others, #others, key_less, t_sort)
    for i = 1, #others do keys[n + i] = others[i] end
    n = n + #others
  end
  local i = 0
  return function()
    while i < n do
      i = i + 1
      local k = keys[i]
      local v = rawget_(t, k)
      if v ~= nil then return k, v end  -- a key removed during the traversal is skipped
    end
    return nil
  end, t, nil
end

if config.deterministic then wrapped.pairs = ordered_pairs end

function wrapped.collectgarbage(opt)
  if opt == "count" then return collectgarbage("count") end
  error("collectgarbage: only \"count\" is available in a mod", 2)
end

local string_mt = getmetatable("")

-- Parses the allowlist the host sends as text: "name name lib:field,field ...".
local function parse_spec(spec)
  local globals = {}
  for word in string.gmatch(spec, "%S+") do
    local lib, fields = string.match(word, "^([%w_]+):(.*)$")
    if lib then
      local list = {}
      for f in string.gmatch(fields, "[^,]+") do list[#list + 1] = f end
      globals[lib] = list
    else
      globals[word] = true
    end
  end
  return globals
end

-- Builds a fresh environment: `globals` maps global names to true (take the real or
-- wrapped function) or to a list of field names (a fresh copy of that library table).
local function make_env(globals, host_functions)
  local env = {}
  for name, fields in next, globals do
    if fields == true then
      local v = wrapped[name]
      if v == nil then v = real._G[name] end
      env[name] = v
    else
      local lib, src, wl = {}, real[name] or real._G[name], wrapped_lib[name] or {}
      for i = 1, #fields do
        local f = fields[i]
        local v = wl[f]
        if v == nil then v = src[f] end
        lib[f] = v
      end
      env[name] = lib
    end
  end
  for name, fn in next, host_functions do env[name] = fn end
  if globals.print and host_functions.report then
    -- print() writes to the run's reports, one line per call, like report().
    local report, tostring_ = host_functions.report, env.tostring or tostring
    env.print = function(...)
      local n = select("#", ...)
      local parts = {}
      for i = 1, n do parts[i] = tostring_((select(i, ...))) end
      return report(concat(parts, "\t"))
    end
  else
    env.print = nil
  end
  env._G = env
  if env.string then
    -- Method calls on strings ("x"):rep(3) use the mod's own string table, never the real one
    -- (which still holds string.dump); the metatable itself is hidden.
    string_mt.__index = env.string
    string_mt.__metatable = false
  end
  return env
end

-------------------------------------------------------------------------------------------
-- Host functions: closures over the one dispatcher.
-------------------------------------------------------------------------------------------
-- The dispatcher answers with the results themselves (one value as it is, several as a
-- tuple lupa unpacks), or with this marker first and the message second on a failure: the
-- common call then crosses no extra value. Only the host holds the marker.
local HOST_FAILED = setmetatable({}, { __metatable = false })

local function fail(err)
  if type(err) ~= "string" then err = "host function failed" end  -- never a host object
  if not tripped and is_memory_error(err) then
    local limit, used = memory_trip_figures()
    set_trip("memory", limit, used)
  end
  if tripped then raise_trip() end
  raise_here(err)
end

local function finish(...)
  if ... == HOST_FAILED then return fail((select(2, ...))) end
  return ...
end

-- lupa's metatable of Python objects: the dispatcher is the one Python object in this
-- runtime, out of every mod's reach; its metatable is hidden all the same.
do
  local mt = getmetatable(dispatch)
  if type(mt) == "table" then mt.__metatable = false end
end

-- A host call near the heap cap is refused as a memory trip before it starts: lupa copies
-- arguments and results with unprotected allocations, where an out-of-memory error would
-- unwind through the Python interpreter.
local HOST_CALL_MARGIN_KB = config.host_call_margin_bytes / 1024

local function make_host_function(id, cost)
  if not (cost < MAX_CHARGE) then
    cost = MAX_CHARGE
  elseif not (cost > 0) then
    cost = 0
  end
  return function(...)
    local c = cell[0] - cost
    if c < 0 then
      overdrawn(c)
    else
      cell[0] = c
    end
    local kb = collectgarbage("count")
    if kb > host_call_max_kb then
      if m_growth_limited then
        set_trip("memory", b_alloc_bytes, floor((kb - m_start_kb) * 1024))
      else
        set_trip("memory", b_max_memory, floor(kb * 1024))
      end
      raise_trip()
    end
    return finish(dispatch(id, ...))
  end
end

-------------------------------------------------------------------------------------------
-- Loading and running.
-------------------------------------------------------------------------------------------
local runs = {}
local next_run = 0
local main_of = setmetatable({}, { __mode = "k" })  -- entry function -> the mod's main

local host = {}

-- Compiles source text as a chunk; returns the chunk function or nil and the message.
-- `wrapped_source` is the instrumented text (a chunk returning the meter wrapper) or nil
-- when the sandbox uses the count hook.
function host.compile(source, wrapped_source, chunkname, env)
  if s_byte(source, 1) == 27 then
    return nil, "bytecode is refused: moonbox loads Lua source text only"
  end
  local fn, err = load(source, chunkname, "t", env)
  if not fn then return nil, err end
  if wrapped_source then
    local maker
    maker, err = load(wrapped_source, chunkname, "t", env)
    if not maker then
      return nil, "moonbox could not instrument this source (" .. err .. ")", true
    end
    local body = maker()
    fn = function(...) return body(cell, slow, ...) end
    main_of[fn] = body
  end
  m_chunks[chunkname] = true
  return fn
end

function host.make_env(spec, host_functions)
  return make_env(parse_spec(spec), host_functions)
end

function host.make_host_function(id, cost)
  return make_host_function(id, cost)
end

host.host_failed = HOST_FAILED

function host.start(fn)
  next_run = next_run + 1
  local co = co_create(fn)
  host_cos[co] = true
  runs[next_run] = { co = co, main = main_of[fn] or fn, total = 0 }
  return next_run
end

function host.close(id)
  runs[id] = nil
end

-- Functions the host holds handles to, by key. The host never keeps a Lua object of its
-- own past the call that gave it: an object made inside a run's coroutine remembers that
-- coroutine, and freeing it after the coroutine was collected would touch freed memory.
local kept, last_kept, kept_count = {}, 0, 0

-- Keeps `fn`, a function of a mod chunk; returns its key, chunk name and first line, or
-- nil for anything else (library and C functions cannot be a run's body).
function host.keep_function(fn)
  if type(fn) ~= "function" then return nil end
  local info = getinfo(fn, "S")
  if not info or not m_chunks[info.source] or info.what ~= "Lua" then return nil end
  last_kept = last_kept + 1
  kept[last_kept] = fn
  kept_count = kept_count + 1
  return last_kept, info.source, info.linedefined
end

function host.start_kept(key)
  local fn = kept[key]
  if fn == nil then return nil end
  return host.start(fn)
end

function host.drop_kept(key)
  if kept[key] ~= nil then
    kept[key] = nil
    kept_count = kept_count - 1
  end
end

function host.kept_count()
  return kept_count
end

local VALUE_MAX_DEPTH = config.value_max_depth
local VALUE_MAX_ITEMS = config.value_max_items
local VALUE_MAX_BYTES = config.value_max_bytes

-- Checks the values a run returned or yielded; nil when they may cross, or a message.
local function check_values(...)
  local n = select("#", ...)
  local bytes = 0
  for i = 1, n do
    local v = select(i, ...)
    local tv = type(v)
    if tv == "string" then bytes = bytes + #v end
    if tv == "table" or bytes > VALUE_MAX_BYTES then
      return check_export({ ... }, false, VALUE_MAX_DEPTH, VALUE_MAX_ITEMS, VALUE_MAX_BYTES, 0)
    end
  end
  return nil
end

-- What a resume ended in, as the first value host.resume returns: small numbers, which
-- cross to Python without an allocation (the host's _sandbox.py has the same table).
local YIELDED, DONE, PREEMPTED, BUDGET, FAILED, BAD_VALUE, CLOSED = 1, 2, 3, 4, 5, 6, 7

-- The bookkeeping around a resume lives in begin and settle, small functions that take no
-- varargs and call no coroutine function: the JIT compiles each of them, where host.resume
-- and finish_resume stay interpreted (coroutine.resume cannot be compiled). The heap is
-- read by their callers: a library call inside them would split their traces.

-- Accounts a resume that just ended, with the heap (KiB) at its end; returns whether it
-- ended plainly (no error, no trip, within its allowance). The host measures the wall time:
-- a clock read through the FFI costs ~0.8 us in the interpreter, where a runtime resumed
-- once per tick (an engine mod's) runs this code.
local function settle(run, ok, kb)
  m_active = false
  if not ok then run.dead = true end  -- a coroutine that raised is dead
  account()
  m_run_co = nil
  if kb > m_peak_kb then m_peak_kb = kb end
  if m_used < 0 then m_used = 0 end
  run.total = run.total + m_used
  return ok and not tripped and kb <= m_alloc_kb
end

local function finish_resume(run, ok, ...)
  local kb = collectgarbage("count")
  local plain = settle(run, ok, kb)
  local stats_steps, stats_peak = m_used, m_peak_kb * 1024
  if plain and select("#", ...) == 0 then
    -- Most resumes: nothing yielded or returned. A yield of nothing answers with the
    -- two figures alone (no status first).
    if co_status(run.co) == "suspended" then return stats_steps, stats_peak end
    run.dead = true
    return DONE, stats_steps, stats_peak
  end
  if not ok and not tripped and is_memory_error((...)) then
    tripped = true
    t_kind, t_limit, t_used = "memory", memory_trip_figures()
    t_chunk, t_line = nil, nil
  elseif not tripped and kb > m_alloc_kb then
    -- Grew past the allowance between polls and finished before the next one.
    tripped = true
    t_kind, t_limit, t_used = "memory", b_alloc_bytes, floor((kb - m_start_kb) * 1024)
    t_chunk, t_line = nil, nil
  end
  if tripped then
    local frames = frames_of(run.co, run.main)
    if t_chunk == nil then
      for i = 1, #frames do
        if frames[i].line then t_chunk, t_line = frames[i].chunk, frames[i].line break end
      end
    end
    return BUDGET, stats_steps, stats_peak, {
      kind = t_kind, limit = t_limit, used = t_used, chunk = t_chunk, line = t_line,
      traceback = frames,
    }
  end
  if not ok then
    return FAILED, stats_steps, stats_peak, {
      message = error_text((...)), traceback = frames_of(run.co, run.main),
    }
  end
  if (...) == PREEMPT and select("#", ...) == 1 and co_status(run.co) == "suspended" then
    return PREEMPTED, stats_steps, stats_peak
  end
  local status = YIELDED
  if co_status(run.co) == "dead" then
    status = DONE
    run.dead = true
  end
  local problem = check_values(...)
  if problem then return BAD_VALUE, stats_steps, stats_peak, problem, status end
  return status, stats_steps, stats_peak, ...
end

function host.set_budget(steps, wall_s, total_limit, preempt, alloc_bytes, max_memory)
  b_steps, b_wall_s, b_total_limit, b_preempt = steps, wall_s, total_limit, preempt
  b_alloc_bytes, b_max_memory = alloc_bytes, max_memory
  host_call_max_kb = max_memory / 1024 - HOST_CALL_MARGIN_KB
end

-- Sets the meter up for a resume of `run` that starts at `start`, with the heap at `kb`.
local function begin(run, start, growth_limited, kb)
  if tripped then
    tripped = false
    t_kind, t_chunk, t_line = nil, nil, nil
  end
  c_depth = 0
  m_used = 0
  m_total_base = run.total
  m_run_co = run.co
  m_peak_kb = kb
  m_start_kb = kb
  m_alloc_kb = kb + b_alloc_bytes / 1024
  m_growth_limited = growth_limited
  -- A host call is refused within the margin of the limit the allocator holds this resume
  -- to: the growth allowance when it is the tighter one, else the heap cap.
  if growth_limited then
    host_call_max_kb = m_alloc_kb - HOST_CALL_MARGIN_KB
  else
    host_call_max_kb = b_max_memory / 1024 - HOST_CALL_MARGIN_KB
  end
  m_start = start
  m_last_poll = start
  m_deadline = start + b_wall_s
  if m_k > 4096 then m_k = 4096 end
  refill()
  if hook_pending then restore_hook() end  -- a resume that ended inside the prelude
  m_active = true
end

-- Resumes run `id` with a fresh budget; `start` is the host's clock reading as it began.
-- Returns the status, steps used, peak heap bytes, then for done/yielded the values, for
-- the other statuses the error info (a table, or a message for bad_value). A yield of no
-- values, the commonest end, returns the two figures alone, without the status.
function host.resume(id, start, growth_limited, ...)
  local run = runs[id]
  if not run or run.dead then return CLOSED end
  begin(run, start, growth_limited, collectgarbage("count"))
  return finish_resume(run, co_resume(run.co, ...))
end

-- Checking is host work, bounded by the value limits: the count hook does not meter it.
local function unmetered(was_active, ok, ...)
  m_active = was_active
  if not ok then error((...), 0) end
  return ...
end

-- Checks a table argument of a host call (strictly: no functions, coroutines or userdata);
-- nil, or a message. The mod pays one step per table entry checked, in both metering modes:
-- a huge argument costs what it weighs, not one step.
function host.check_argument(value)
  local was_active = m_active
  m_active = false
  local problem, items = unmetered(was_active, pcall(check_export, value, true,
    VALUE_MAX_DEPTH, VALUE_MAX_ITEMS, VALUE_MAX_BYTES, 1))
  if m_active then charge(items) end
  return problem
end

-- A flat table argument (the common case: `{x = 1, name = "a"}`) in one call: its pairs
-- as multiple values after their count, when it has at most FLAT_MAX entries, string or
-- number keys and boolean, number or string values, within the byte limit; else nil (and
-- the host takes check_argument's way). Charged as check_argument charges.
local FLAT_MAX = 16
local flat = {}
local function flat_pairs(t)
  local n, bytes = 0, 0
  local k, v = next(t)
  while k ~= nil do
    n = n + 1
    if n > FLAT_MAX or n > VALUE_MAX_ITEMS then return nil end
    local tk, tv = type(k), type(v)
    if tk == "string" then
      bytes = bytes + #k
    elseif tk ~= "number" then
      return nil
    end
    if tv == "string" then
      bytes = bytes + #v
    elseif tv ~= "number" and tv ~= "boolean" then
      return nil
    end
    flat[2 * n - 1], flat[2 * n] = k, v
    k, v = next(t, k)
  end
  if bytes > VALUE_MAX_BYTES then return nil end
  return n
end

function host.flat_argument(t)
  local was_active = m_active
  m_active = false
  local n = unmetered(was_active, pcall(flat_pairs, t))
  if n == nil then return nil end
  if m_active then charge(n) end
  return n, unpack_(flat, 1, 2 * n)
end

-- Called by the host when a host function returns past the resume's deadline: the next
-- check polls the clock and trips.
function host.expire()
  if m_active and not tripped and cell[0] > 0 then
    account()
    m_window = 0
    cell[0] = 0
  end
end

-- Called by the host after host work that does not count against the resume's time (an
-- approval a person answers): the deadline moves by the time that work took.
function host.extend(seconds)
  if m_active then m_deadline = m_deadline + seconds end
end

host.clock = CLOCK

-- The `python` module lupa installs is removed from the runtime entirely.
_G.python = nil
package.loaded.python = nil

-- The runtime's own globals keep no `debug` either (the prelude captured what it uses).
-- No mod could reach it there anyway; it goes because lupa looks up `debug.traceback` as
-- the error handler of every call the host makes into Lua: without it, each resume skips
-- two table lookups and a stack shuffle, and a host-side Lua error arrives as its message.
_G.debug = nil

return host
