-- Part of the moonbox prelude (prelude.lua): the protected calls a mod can make (pcall,
-- xpcall, error and the coroutine functions), which re-raise a budget trip and place
-- errors where LuaJIT places them, and the bounded depth of calls nested through C.

-------------------------------------------------------------------------------------------
-- Positions. A mod sees the positions LuaJIT's own functions give, never the prelude's:
-- a library function here may run through several frames of the prelude and C calls
-- where LuaJIT has one C frame, and the prelude's chunk name and lines are the host's.
-------------------------------------------------------------------------------------------
-- "chunk:line: " of the frame at stack level `level` when it runs a mod's code, else "":
-- where LuaJIT places an error a library function raises about its call (at its caller,
-- nowhere when a C function called it).
local function caller_where(level)
  local info = getinfo(level + 1, "Sl")
  if info and m_chunks[info.source] and info.currentline > 0 then
    return info.short_src .. ":" .. info.currentline .. ": "
  end
  return ""
end

-- The position `error(message, level)` gives in LuaJIT, counting from the frame at stack
-- level `first` (level 1): a mod's frame is one level, and so is a library function with
-- every frame of the prelude or of C it runs through, up to the frame of the function the
-- mod called (library_frames: the functions a mod can call, and the natives they hand
-- their frame to by a tail call).
local function where_at(level, first)
  local count, pending = 0, false
  local lvl = first + 1
  while true do
    local info = getinfo(lvl, "Slf")
    if info == nil then return "" end
    if m_chunks[info.source] then
      if pending then
        count = count + 1
        if count == level then return "" end
        pending = false
      end
      count = count + 1
      if count == level then
        if info.currentline > 0 then return info.short_src .. ":" .. info.currentline .. ": " end
        return ""
      end
    else
      local where = library_frames[info.func]
      if where ~= nil then
        count = count + 1
        if count == level then return where end
        pending = false
      else
        pending = true
      end
    end
    lvl = lvl + 1
  end
end

-- error(message, level), placed as LuaJIT places it (the level as LuaJIT reads it: a
-- number or a numeric string, truncated; anything else is its own argument error).
function wrapped.error(...)
  local message, level = ...
  if level == nil then
    level = 1
  elseif type(level) ~= "number" then
    level = tonumber(level)
    if level == nil then return error(...) end  -- the native's argument error
  end
  if level >= 1 and level < 2 ^ 31 then
    local tm = type(message)
    if tm == "string" or tm == "number" then
      if level < 2 then  -- the commonest: the caller's position, when it runs a mod's code
        local info = getinfo(2, "Sl")
        if info and m_chunks[info.source] and info.currentline > 0 then
          return error(info.short_src .. ":" .. info.currentline .. ": " .. message, 0)
        end
        -- A C caller (pcall(error, m)) is a level with no position of its own, and so is
        -- the library function it belongs to.
        if info and info.what == "C" then return error("" .. message, 0) end
      end
      message = where_at(floor(level), 2) .. message
    end
  end
  return error(message, 0)
end

-- Raises `message` about the call of the library function at stack level `level` (1:
-- the function calling this), placed at its caller as LuaJIT places its own such errors.
local function raise_at_caller(message, level)
  error(caller_where(level + 2) .. message, 0)
end

-- A "bad argument" error about argument `narg` of the library function at stack level
-- `level` (1: the function calling this), worded as LuaJIT words it: the function is
-- named after its call site, and a method call counts from the argument after self.
local function argument_error(level, narg, message)
  local info = getinfo(level + 1, "n")
  local name = info and info.name or "?"
  local where = caller_where(level + 2)
  if info and info.namewhat == "method" then
    narg = narg - 1
    if narg == 0 then error(where .. "calling '" .. name .. "' on bad self", 0) end
  end
  error(where .. "bad argument #" .. narg .. " to '" .. name .. "' (" .. message .. ")", 0)
end

-- Raises with the position of the innermost mod frame (tail calls hide the caller): for
-- errors that belong to no one call, such as a host function's failure.
local function raise_here(message)
  local src, line = mod_frame(2)
  if src then
    local first = s_sub(src, 1, 1)
    local short = (first == "@" or first == "=") and s_sub(src, 2) or src
    message = short .. ":" .. line .. ": " .. message
  end
  error(message, 0)
end

-- Errors as a protected call hands them to the mod.
--
-- A frame of the prelude stands for a C frame of LuaJIT, where an error has no position:
-- an error raised in one (only a stack overflow is: a recursion through library functions
-- that overflows in a frame of the prelude) loses the position the prelude gave it, which
-- is the host's chunk and line.
--
-- jit=False: a stack overflow that the count hook's own call runs into reaches LuaJIT's
-- handler with no position ("stack overflow", where a plain runtime says "x:3: stack
-- overflow"). The protected calls give it the position of the innermost mod frame, read
-- while that frame is still on the stack: in an xpcall handler (which runs before the
-- stack unwinds), or in the coroutine that died of it. (An overflow inside the hook's own
-- Lua frames reaches no handler, and keeps no position: docs/conformance.md.)
local STACK_OVERFLOW = "stack overflow"
local HOOKED = not config.jit
local PRELUDE_WHERE = s_sub(PRELUDE_SOURCE, 2) .. ":"
local PATTERNS_WHERE = "[moonbox patterns]:"  -- the metered matcher's chunk (_runtime.py)

-- "chunk:line: " of the innermost mod frame of `co` (nil: of the running coroutine).
local function overflow_where(co)
  for lvl = co and 0 or 2, 1000 do
    local info
    if co then info = getinfo(co, lvl, "Sl") else info = getinfo(lvl, "Sl") end
    if info == nil then return "" end
    if m_chunks[info.source] and info.currentline > 0 then
      return info.short_src .. ":" .. info.currentline .. ": "
    end
  end
  return ""
end

-- `err` as the mod may see it. `co`: the coroutine that died of it; `live`: the frames it
-- was raised in are still on the stack (an xpcall handler). Allocates nothing for any
-- other error (an out-of-memory error passes here).
local function scrub(err, co, live)
  if type(err) ~= "string" then return err end
  if err == STACK_OVERFLOW then
    if HOOKED and (co or live) then return overflow_where(co) .. err end
    return err
  end
  if s_byte(err, 1) == 91 then  -- "["
    local where = s_find(err, PRELUDE_WHERE, 1, true) == 1 and PRELUDE_WHERE
      or s_find(err, PATTERNS_WHERE, 1, true) == 1 and PATTERNS_WHERE
    local colon = where and s_find(err, ": ", #where + 1, true)
    if colon then return s_sub(err, colon + 2) end
  end
  return err
end

local function place_error(err)
  return scrub(err, nil, true)
end

-------------------------------------------------------------------------------------------
-- Protected calls.
-------------------------------------------------------------------------------------------
-- The re-raise behind every protected call a mod can make: once a budget tripped, no
-- pcall, xpcall or coroutine.resume returns to the mod.
local function rethrow(ok, ...)
  if not ok then
    local err = ...
    if not tripped and is_memory_error(err) then
      local limit, used = memory_trip_figures()
      set_trip("memory", limit, used)
    end
    if tripped then raise_trip() end
    return false, scrub(err)
  end
  if tripped then raise_trip() end
  return ok, ...
end

-- Nested calls through C. Library functions that call back into Lua from C (a native
-- gsub's replacement function, coroutine resumes) recurse on the C stack, where LuaJIT
-- does not always check depth: unchecked, a recursive gsub callback or nested coroutine
-- resumes crash the process. They share one bounded depth; passing it is one catchable
-- error. (Sorts, __tostring and the metered patterns call back from Lua: their depth is
-- the Lua stack's, which LuaJIT bounds itself.)
--
-- The depth is exact: every guarded call gives its level back on every way out (a normal
-- return, or an error it re-raises). It is never restored from a saved value: a coroutine
-- parked inside a pcall and resumed deeper would otherwise reset it and pass the bound.
local MAX_C_DEPTH = config.max_c_depth
local c_depth = 0

-- pcall(f, ...) as LuaJIT's: pcall() is its own argument error, placed at its caller.
if HOOKED then
  function wrapped.pcall(...)
    if select("#", ...) == 0 then return pcall() end
    return rethrow(xpcall((...), place_error, select(2, ...)))
  end
else
  function wrapped.pcall(...)
    if select("#", ...) == 0 then return pcall() end
    return rethrow(pcall(...))
  end
end

-- xpcall runs its handler after the error has unwound, through pcall: LuaJIT runs a real
-- xpcall handler with hooks off, so under jit=False a handler that loops would never be
-- metered. A handler that fails gives "error in error handling", as in Lua; a trip or an
-- out-of-memory error never reaches the handler. As in LuaJIT, the handler's first result
-- is the error value xpcall returns.
local function after_handler(ok, ...)
  if ok then return false, (...) end
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

if HOOKED then
  function wrapped.xpcall(...)
    local f, handler = ...
    if type(handler) ~= "function" then return xpcall(...) end  -- the native's own error
    return handle(handler, xpcall(f, place_error, select(3, ...)))
  end
else
  function wrapped.xpcall(...)
    local f, handler = ...
    if type(handler) ~= "function" then return xpcall(...) end  -- the native's own error
    return handle(handler, pcall(f, select(3, ...)))
  end
end

local RESUME_TOO_DEEP = "coroutine.resume: coroutines nested too deeply (more than "
  .. MAX_C_DEPTH .. " levels)"

-- coroutine.resume never raises for a coroutine (it returns false and the error), so the
-- level is given back on its return.
local function resumed(co, ok, ...)
  c_depth = c_depth - 1
  if ok and not tripped then return true, ... end  -- the common end, in one call
  if not ok then return rethrow(false, scrub((...), co)) end
  return rethrow(ok, ...)
end

local host_cos = setmetatable({}, { __mode = "k" })  -- the coroutines of host runs

-- The resume a host's own library chunk gets for coroutines of its own that run a mod's
-- functions (the engine library's workers; see host.start): the depth bound and the
-- re-raise of a trip or a memory error as coroutine.resume has them, without what only a
-- resume a mod makes must check (whose coroutine it is, whether its handover is counted).
-- A mod never gets it: it is an argument of that chunk alone. Four values back at most.
local function worker_resume(co, fn, a, b, c)
  if c_depth >= MAX_C_DEPTH then raise_here(RESUME_TOO_DEEP) end
  c_depth = c_depth + 1
  local ok, x, y, p, d = co_resume(co, fn, a, b, c)
  if ok and not tripped then
    c_depth = c_depth - 1
    return true, x, y, p, d
  end
  return resumed(co, ok, x, y, p, d)
end

-- worker_resume's with no values handed over (a task's resume: its yield returns none).
local function task_resume(co)
  if c_depth >= MAX_C_DEPTH then raise_here(RESUME_TOO_DEEP) end
  c_depth = c_depth + 1
  local ok, x, y, p, d = co_resume(co)
  if ok and not tripped then
    c_depth = c_depth - 1
    return true, x, y, p, d
  end
  return resumed(co, ok, x, y, p, d)
end

-- The call a host's own library chunk gets for running a mod's function on the chunk's own
-- run (the engine's dispatcher runs a handler itself, with no coroutine switch): a
-- protected call as pcall is for a mod, with a trip or a memory error re-raised, and the
-- function's first result. The error, as a coroutine that died of it would give it.
local function worker_call(fn, a, b, c)
  local ok, x
  if HOOKED then ok, x = xpcall(fn, place_error, a, b, c) else ok, x = pcall(fn, a, b, c) end
  if ok and not tripped then return true, x end
  return rethrow(ok, x)
end

-- A coroutine.wrap function raises what its coroutine raised; as LuaJIT's does, it puts
-- its caller's position before a message (tail-called: the caller is at level 2).
local function wrap_result(co, ok, ...)
  c_depth = c_depth - 1
  if ok and not tripped then return ... end  -- the common end
  if not ok and not tripped and is_memory_error((...)) then rethrow(false, (...)) end
  if tripped then raise_trip() end
  if ok then return ... end
  local err = ...
  if type(err) == "string" then err = caller_where(2) .. scrub(err, co) end
  error(err, 0)
end

-- The switch of a resume, compiled. LuaJIT compiles a loop through a coroutine switch by
-- stitching its trace around the native resume, which it can do only when what follows
-- the call takes a fixed number of values: `resumed(co, co_resume(...))` takes them all,
-- so a loop that resumes (a ring of coroutines, a generator) ran interpreted, its checks
-- through the FFI cell at interpreter speed, at ~1.6x raw LuaJIT. A coroutine whose body
-- is a mod's function is *counted*: its yields (coroutine.yield below) and its end (its
-- body returns through `ended`) tell how many values they hand back, just before the
-- switch back to its resumer, which then takes four values in fixed slots and returns as
-- many as were handed (the rest of a longer handover kept aside). A coroutine not counted
-- (a library function as body) takes the plain way.
do
  local t_unpack = unpack
  local WORK_PER_STEP = config.work_per_step
  -- The coroutines that are not counted: those whose body is a library function. Every
  -- other coroutine a mod can resume is counted, or a host run's (host_cos). The set is
  -- of the exceptions, so that a resume looks up a table that is almost always empty: a
  -- table keyed by many coroutines is slow to look up (LuaJIT hashes an object by its
  -- address, and blocks allocated together crowd a few chains; docs/metering.md).
  local uncounted = setmetatable({}, { __mode = "k" })
  local handed, handed_rest = -1, nil  -- the count of values of the last handover
  -- Whether the running coroutine was switched to by a counted resume, whose end then
  -- reads `handed`: set around that switch, and back to the resumer's own after it (a
  -- coroutine's yields to the host, the commonest there, count nothing and keep nothing).
  local counting = false

  local function ended(...)
    local n = select("#", ...)
    handed = n
    if n > 4 then handed_rest = { ... } end
    return ...
  end

  -- The body of a counted coroutine: f's own frame is the coroutine's first mod frame, as
  -- in LuaJIT (levels past it find no mod frame either way).
  local function counted_body(f)
    return function(...) return ended(f(...)) end
  end

  local function mod_function(f)
    if type(f) ~= "function" then return false end
    local info = getinfo(f, "S")
    return info ~= nil and m_chunks[info.source] == true
  end

  function wrapped_lib.coroutine.yield(...)
    if counting then
      local n = select("#", ...)
      handed = n
      if n > 4 then handed_rest = { ... } end
    end
    return co_yield(...)
  end

  function wrapped_lib.coroutine.create(...)
    local f = ...
    if type(f) ~= "function" then return co_create(...) end  -- the native's own error
    if not mod_function(f) then  -- a library body
      local co = co_create(f)
      uncounted[co] = true
      return co
    end
    return co_create(counted_body(f))
  end

  -- What a counted coroutine handed back but one value, a to d its first four values.
  local function handed_values(a, b, c, d)
    local n = handed
    if n == 0 then return end
    if n == 2 then return a, b end
    if n == 3 then return a, b, c end
    if n == 4 then return a, b, c, d end
    local rest = handed_rest
    handed_rest = nil
    if n > 4 and rest then
      if n >= WORK_PER_STEP then charge(floor(n / WORK_PER_STEP)) end  -- as unpack's
      return t_unpack(rest, 1, n)
    end
    return a, b, c, d  -- unreachable: every way back from a counted coroutine counts
  end

  -- The resume of a counted coroutine, with its one argument or none. Functions of fixed
  -- arity, and one value handed back returned with no call: LuaJIT cannot compile a
  -- return from a vararg frame, or the call, that a trace stitched after the switch meets.
  local function resume_counted(co, a)
    handed = -1
    local was = counting
    counting = true
    local ok, r1, r2, r3, r4 = co_resume(co, a)
    counting = was
    if ok and not tripped then
      c_depth = c_depth - 1
      if handed == 1 then return true, r1 end
      return true, handed_values(r1, r2, r3, r4)
    end
    return resumed(co, ok, r1)  -- an error (one value) or a trip
  end

  local function resume_counted_bare(co)
    handed = -1
    local was = counting
    counting = true
    local ok, r1, r2, r3, r4 = co_resume(co)
    counting = was
    if ok and not tripped then
      c_depth = c_depth - 1
      if handed == 1 then return true, r1 end
      return true, handed_values(r1, r2, r3, r4)
    end
    return resumed(co, ok, r1)
  end

  function wrapped_lib.coroutine.resume(...)
    local co, a = ...
    if type(co) ~= "thread" then return co_resume(...) end  -- the native's own error
    if host_cos[co] then return false, "cannot resume non-suspended coroutine" end
    if c_depth >= MAX_C_DEPTH then raise_here(RESUME_TOO_DEEP) end
    c_depth = c_depth + 1
    if not uncounted[co] then
      local nargs = select("#", ...)
      if nargs == 2 then return resume_counted(co, a) end
      if nargs == 1 then return resume_counted_bare(co) end
    end
    return resumed(co, co_resume(...))
  end

  -- A coroutine.wrap function's call of a counted coroutine, as resume_counted.
  local function call_counted(co, a)
    handed = -1
    local was = counting
    counting = true
    local ok, r1, r2, r3, r4 = co_resume(co, a)
    counting = was
    if ok and not tripped then
      c_depth = c_depth - 1
      if handed == 1 then return r1 end
      return handed_values(r1, r2, r3, r4)
    end
    return wrap_result(co, ok, r1)  -- an error (one value) or a trip
  end

  local function call_counted_bare(co)
    handed = -1
    local was = counting
    counting = true
    local ok, r1, r2, r3, r4 = co_resume(co)
    counting = was
    if ok and not tripped then
      c_depth = c_depth - 1
      if handed == 1 then return r1 end
      return handed_values(r1, r2, r3, r4)
    end
    return wrap_result(co, ok, r1)
  end

  local co_wrap = coroutine.wrap
  local WRAP_TEXT = tostring(co_wrap(function() end))

  function wrapped_lib.coroutine.wrap(...)
    local f = ...
    if type(f) ~= "function" then return co_wrap(...) end  -- the native's own error
    local fn
    if mod_function(f) then
      local co = co_create(counted_body(f))
      fn = function(...)
        if c_depth >= MAX_C_DEPTH then raise_here(RESUME_TOO_DEEP) end
        c_depth = c_depth + 1
        local nargs = select("#", ...)
        if nargs == 1 then return call_counted(co, (...)) end
        if nargs == 0 then return call_counted_bare(co) end
        return wrap_result(co, co_resume(co, ...))
      end
    else
      local co = co_create(f)
      uncounted[co] = true  -- coroutine.running() in its body hands it to the mod
      fn = function(...)
        if c_depth >= MAX_C_DEPTH then raise_here(RESUME_TOO_DEEP) end
        c_depth = c_depth + 1
        return wrap_result(co, co_resume(co, ...))
      end
    end
    builtin_text[fn] = WRAP_TEXT
    return fn
  end
end

-- The run's own coroutine is the host's: to the mod it is the main thread (nil, as in
-- Lua 5.1), so no other run can resume or inspect it.
function wrapped_lib.coroutine.running()
  local co = co_running()
  if co == nil or host_cos[co] then return nil end
  return co
end
