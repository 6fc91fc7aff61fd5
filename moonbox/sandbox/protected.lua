-- Part of the moonbox prelude (prelude.lua): the protected calls a mod can make (pcall,
-- xpcall, the coroutine functions), which re-raise a budget trip, and the bounded depth of
-- calls nested through library functions.

-------------------------------------------------------------------------------------------
-- Protected calls.
-------------------------------------------------------------------------------------------
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
