-- moonbox engine: the mod's side of the game engine.
--
-- Runs in every mod's own environment, as the mod's own (metered) code, before the mod's
-- main chunk. It grants nothing the mod could not do itself: it keeps the mod's callbacks
-- in a table out of the mod's reach, hides the raw engine bindings behind the public
-- functions (on, after, every, cancel, spawn, wait, export, import), and hands the host a
-- dispatcher: a loop the host resumes once per handler call, each resume under its own
-- budget.
--
-- The host resumes the dispatcher with (what, a, b, c) and gets back (code, x, y); `what`
-- says what to do, in as few arguments as possible (each costs the host a conversion):
--   what > 0: call callback `what` with a, b, c   what < 0: resume waiting task -what
--   what a string: call that export with a        what == 0: forget waiting task a
--   code 0: done (x: an export's result; nothing at all when there is none)
--   code 1: waiting: task x for y ticks
--   code 2: failed with message x                 code 3: no such callback, task or export

local seed = ...

-- Captured before the mod's code can replace any global.
local env = _G
local type, error, pcall, floor = type, error, pcall, math.floor
local min, max, huge = math.min, math.max, math.huge
local s_match, s_sub, tostring = string.match, string.sub, tostring
local co_create, co_resume, co_yield = coroutine.create, coroutine.resume, coroutine.yield

if type(seed) == "number" then math.randomseed(seed) end

-- The raw bindings, taken out of the mod's sight.
local raw = {}
local RAW = { "on", "after", "every", "cancel", "export", "import", "engine_ready", "engine_call" }
for i = 1, #RAW do
  local name = RAW[i]
  raw[name] = env[name]
  env[name] = nil
end

local callbacks = {}   -- callback id -> function (handlers and timers)
local once = {}        -- callback id -> true for one-shot timers
local exported = {}    -- export name -> function
local tasks = {}       -- task id -> a waiting coroutine
local next_task = 0
-- What a worker yields to the dispatcher. Only the workers hold them, and no mod code can
-- resume a worker or get hold of one (see below), so the mod can neither read nor forge them.
local WAIT, DONE = {}, {}
local MAX_WAIT = 1000000
local workers = setmetatable({}, { __mode = "k" })  -- every worker coroutine: true

-- A binding error carries the position of the line in this file: give the mod's own.
local function strip(message)
  if type(message) == "string" then
    return s_match(message, "^[^\n]-:%d+: (.*)$") or message
  end
  return message
end

-- What a failed callback hands the host: a bounded string, never the error value itself
-- (a mod can raise a table of any size; the host must not copy or print it).
local MAX_MESSAGE = 4096
local function message_of(err)
  local te = type(err)
  if te == "string" then
    if #err > MAX_MESSAGE then return s_sub(err, 1, MAX_MESSAGE) .. "..." end
    return err
  elseif te == "number" or te == "boolean" or te == "nil" then
    return tostring(err)
  end
  return "(error object is a " .. te .. " value)"
end

local function call_raw(name, ...)
  local ok, a, b = pcall(raw[name], ...)
  if not ok then error(strip(a), 3) end
  return a, b
end

if raw.on then
  -- on(event, fn): call fn(data, event, from) for each event of that name; fn(tick) for "tick".
  function env.on(event, fn)
    local id = call_raw("on", event, fn)
    callbacks[id] = fn
    return id
  end
end

if raw.after then
  -- after(ticks, fn): call fn(tick) once, that many ticks from now.
  function env.after(ticks, fn)
    local id = call_raw("after", ticks, fn)
    callbacks[id] = fn
    once[id] = true
    return id
  end

  -- spawn(fn): run fn as a task from the next tick; it may wait().
  function env.spawn(fn)
    local id = call_raw("after", 1, fn, true)
    callbacks[id] = fn
    once[id] = true
    return id
  end
end

if raw.every then
  -- every(ticks, fn): call fn(tick) every that many ticks.
  function env.every(ticks, fn)
    local id = call_raw("every", ticks, fn)
    callbacks[id] = fn
    return id
  end
end

if raw.cancel then
  -- cancel(id): stop a handler or timer; true if it was registered.
  function env.cancel(id)
    local found = call_raw("cancel", id)
    if found then
      callbacks[id] = nil
      once[id] = nil
    end
    return found
  end
end

-- wait(ticks): pause this handler, timer or task; it resumes that many ticks later.
function env.wait(ticks)
  if ticks == nil then ticks = 1 end
  if type(ticks) ~= "number" or ticks ~= ticks or ticks < 1 or ticks > MAX_WAIT then
    error("wait: ticks must be a number from 1 to 1000000", 2)
  end
  return co_yield(WAIT, floor(ticks))
end

if raw.export then
  -- export(name, value): offer a copy of data, or a function, to other mods.
  function env.export(name, value)
    call_raw("export", name, value)
    if type(value) == "function" then exported[name] = value else exported[name] = nil end
  end
end

if raw.import then
  -- import(mod, name): a copy of another mod's exported data, or a function that calls
  -- its exported function (arguments and result cross by copy).
  local engine_call = raw.engine_call
  function env.import(mod, name)
    local kind, value = call_raw("import", mod, name)
    if kind ~= "function" then return value end
    return function(arg)
      local ok, result = pcall(engine_call, mod, name, arg)
      if not ok then error(strip(result), 2) end
      return result
    end
  end
end

-- Callbacks run in worker coroutines, so that any of them may wait(). An idle worker is
-- reused; one that waits becomes a task; one that fails is dropped.
local idle = nil

-- Workers are the dispatcher's alone. Resumed by the mod, an idle worker would run the
-- mod's function and hand it DONE, a waiting one would hand it WAIT: with those the mod
-- could yield a wait the host never checked. So, to the mod, code in a worker runs on the
-- main thread (coroutine.running() is nil, as for the run's own coroutine), and resuming a
-- worker fails as resuming a running coroutine does.
local lib_co = env.coroutine
if type(lib_co) == "table" then
  local resume, running = lib_co.resume, lib_co.running
  if resume ~= nil then
    lib_co.resume = function(co, ...)
      if workers[co] then return false, "cannot resume non-suspended coroutine" end
      return resume(co, ...)
    end
  end
  if running ~= nil then
    lib_co.running = function()
      local co = running()
      if co ~= nil and workers[co] then return nil end
      return co
    end
  end
end

local function worker(fn, a, b, c)
  while true do
    fn, a, b, c = co_yield(DONE, fn(a, b, c))
  end
end

local function settle(co, ok, x, y)
  if not ok then return 2, message_of(x) end
  if x == DONE then
    idle = co
    return 0, y
  end
  if x ~= WAIT then
    y = 1                         -- a bare coroutine.yield() waits one tick
  elseif type(y) ~= "number" or y ~= y or y == huge or y == -huge then
    return 2, "wait: ticks must be a number from 1 to " .. MAX_WAIT   -- never from wait()
  else
    y = floor(min(max(y, 1), MAX_WAIT))
  end
  next_task = next_task + 1
  tasks[next_task] = co
  return 1, next_task, y
end

local function start(fn, a, b, c)
  local co = idle
  idle = nil
  if co == nil then
    co = co_create(worker)
    workers[co] = true
  end
  return settle(co, co_resume(co, fn, a, b, c))
end

-- Everything but the commonest call (below): (code, x, y) for the host.
local function answer(what, a, b, c)
  local code, x, y = 3, nil, nil
  if type(what) == "number" then
    if what > 0 then
      local fn = callbacks[what]
      if fn ~= nil then
        if once[what] then
          callbacks[what], once[what] = nil, nil
        end
        code, x, y = start(fn, a, b, c)
      end
    elseif what < 0 then
      local co = tasks[-what]
      if co ~= nil then
        tasks[-what] = nil
        code, x, y = settle(co, co_resume(co))
      end
    else
      tasks[a] = nil
      code = 0
    end
  else
    local fn = exported[what]
    if fn ~= nil then
      code, x, y = start(fn, a)
      if code == 1 then
        tasks[x] = nil
        code, x, y = 2, "an exported function cannot wait", nil
      end
    end
  end
  return code, x, y
end

-- Each start of the dispatcher (the first call, and the next after a budget trip ended the
-- last one). A trip unwinds past whatever cleanup the mod's code had pending; code that
-- keeps marks across a call (require's "loading") asks this to know which are stale.
local starts = 0

-- The commonest call, a callback with an idle worker to run it, is what start and settle
-- do written out here: each function entered is a metering check, and this runs on every
-- handler call.
local function dispatcher(what, a, b, c)
  starts = starts + 1
  while true do
    local fn, co = nil, idle
    if co ~= nil and type(what) == "number" and what > 0 then fn = callbacks[what] end
    local code, x, y
    if fn ~= nil then
      if once[what] then
        callbacks[what], once[what] = nil, nil
      end
      idle = nil
      local ok
      ok, x, y = co_resume(co, fn, a, b, c)
      if ok and x == DONE then
        idle = co
        code, x, y = 0, y, nil
      else
        code, x, y = settle(co, ok, x, y)
      end
    else
      code, x, y = answer(what, a, b, c)
    end
    if code == 0 and x == nil then
      what, a, b, c = co_yield()  -- the commonest answer, and the cheapest to hand over
    else
      what, a, b, c = co_yield(code, x, y)
    end
  end
end

-- The starts, to the host's preparation of the mod (its require) only: the host resumes
-- this run once more when that is done, and the name is gone before the mod's own code.
env.engine_dispatcher_starts = function() return starts end

-- Hand the dispatcher to the host, then stay suspended for good: the host keeps this run
-- alive and starts the dispatcher (again after a budget trip) from the handle.
call_raw("engine_ready", dispatcher)
co_yield()
env.engine_dispatcher_starts = nil
while true do co_yield() end
