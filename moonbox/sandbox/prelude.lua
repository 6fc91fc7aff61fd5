-- moonbox prelude: host-side Lua that runs once in every sandbox runtime, before any mod.
--
-- It owns the meter (the step cell, the slow path, the count hook of jit=False mode), builds
-- each mod environment from the allowlist it is given, loads mod chunks in text mode, runs
-- them in coroutines under a budget, and checks values before they cross to Python.
--
-- Mod code can never reach anything defined here: every name below is a local of this chunk,
-- the environment a mod gets is a fresh table, and the library tables in it are copies.

local config, dispatch = ...

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
-- the interpreter). The host reads the resume's start time from the same clock itself.
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
-------------------------------------------------------------------------------------------
local cell = ffi.new("double[1]")
local STICKY = -4503599627370496          -- -2^52: stays negative whatever is subtracted
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

local function slow()
  if tripped then raise_trip() end
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
local function hook()
  if not m_active then return end
  local c = cell[0] - HOOK_STEPS
  cell[0] = c
  if c < 0 then
    -- Never poll or trip inside the prelude's own code (the host's work between the mod's
    -- steps): the next hook in mod code does.
    local info = getinfo(2, "S")
    if info and info.source == PRELUDE_SOURCE then return end
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

-- Charge `cost` steps for work done outside instrumented code (bindings).
local function charge(cost)
  local c = cell[0] - cost
  cell[0] = c
  if c < 0 then slow() end
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

wrapped_lib.string.gsub = depth_guarded(string.gsub, "string.gsub")
wrapped_lib.table.sort = depth_guarded(table.sort, "table.sort")

-- tostring and string.format reach Lua only through a table's __tostring: other arguments
-- skip the guard (it would double the cost of string-heavy code).
local guarded_tostring = depth_guarded(tostring, "tostring")
function wrapped.tostring(...)
  if type((...)) ~= "table" then return tostring(...) end
  return guarded_tostring(...)
end

local guarded_format = depth_guarded(s_format, "string.format")
function wrapped_lib.string.format(...)
  for i = 2, select("#", ...) do
    if type((select(i, ...))) == "table" then return guarded_format(...) end
  end
  return s_format(...)
end

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
local function finish(ok, ...)
  if ok then return ... end
  local err = ...
  if type(err) ~= "string" then err = "host function failed" end  -- never a host object
  if not tripped and is_memory_error(err) then
    local limit, used = memory_trip_figures()
    set_trip("memory", limit, used)
  end
  if tripped then raise_trip() end
  raise_here(err)
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

local function make_host_function(name, cost)
  return function(...)
    local c = cell[0] - cost
    cell[0] = c
    if c < 0 then slow() end
    local kb = collectgarbage("count")
    if kb > b_max_memory / 1024 - HOST_CALL_MARGIN_KB then
      set_trip("memory", b_max_memory, floor(kb * 1024))
      raise_trip()
    end
    return finish(dispatch(name, ...))
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

function host.make_host_function(name, cost)
  return make_host_function(name, cost)
end

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

local function finish_resume(run, ok, ...)
  m_active = false
  account()
  m_run_co = nil
  local kb = collectgarbage("count")
  if kb > m_peak_kb then m_peak_kb = kb end
  if m_used < 0 then m_used = 0 end
  run.total = run.total + m_used
  local stats_steps, stats_peak = m_used, m_peak_kb * 1024
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
    return "budget", stats_steps, stats_peak, {
      kind = t_kind, limit = t_limit, used = t_used, chunk = t_chunk, line = t_line,
      traceback = frames,
    }
  end
  if not ok then
    return "error", stats_steps, stats_peak, {
      message = error_text((...)), traceback = frames_of(run.co, run.main),
    }
  end
  if (...) == PREEMPT and select("#", ...) == 1 and co_status(run.co) == "suspended" then
    return "preempted", stats_steps, stats_peak, nil
  end
  local status = co_status(run.co) == "dead" and "done" or "yielded"
  local problem = check_values(...)
  if problem then return "bad_value", stats_steps, stats_peak, problem, status end
  return status, stats_steps, stats_peak, ...
end

function host.set_budget(steps, wall_s, total_limit, preempt, alloc_bytes, max_memory)
  b_steps, b_wall_s, b_total_limit, b_preempt = steps, wall_s, total_limit, preempt
  b_alloc_bytes, b_max_memory = alloc_bytes, max_memory
end

-- Resumes run `id` with a fresh budget. Returns the status, steps used, peak heap bytes,
-- then for done/yielded the values, for the other statuses the error info (a table, or a
-- message for bad_value).
function host.resume(id, start, growth_limited, ...)
  local run = runs[id]
  if not run then return "closed" end
  if co_status(run.co) == "dead" then return "closed" end
  tripped = false
  t_kind, t_chunk, t_line = nil, nil, nil
  c_depth = 0
  m_used = 0
  m_total_base = run.total
  m_run_co = run.co
  m_peak_kb = collectgarbage("count")
  m_start_kb = m_peak_kb
  m_alloc_kb = m_peak_kb + b_alloc_bytes / 1024
  m_growth_limited = growth_limited
  m_start = start
  m_last_poll = start
  m_deadline = start + b_wall_s
  if m_k > 4096 then m_k = 4096 end
  refill()
  m_active = true
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

-- Where a function of a mod chunk was defined (chunk name and first line), for a callback
-- handle; nil for anything else (library and C functions cannot be a run's body).
function host.function_site(fn)
  if type(fn) ~= "function" then return nil end
  local info = getinfo(fn, "S")
  if not info or not m_chunks[info.source] or info.what ~= "Lua" then return nil end
  return info.source, info.linedefined
end

function host.type_of(value)
  return type(value)
end

host.clock = CLOCK

-- The `python` module lupa installs is removed from the runtime entirely.
_G.python = nil
package.loaded.python = nil

return host
