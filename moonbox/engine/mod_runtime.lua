-- moonbox engine: the mod's side of the game engine.
--
-- Runs in every mod's own environment, as the mod's own (metered) code, before the mod's
-- main chunk. It grants nothing the mod could not do itself: it keeps the mod's callbacks
-- in a table out of the mod's reach, hides the raw engine bindings behind the public
-- functions (on, after, every, cancel, spawn, wait, export, import, resume_point), gives
-- the mod a math.random whose state a snapshot of the game can hold, and hands the host a
-- dispatcher: a loop the host resumes once per handler call, each resume under its own
-- budget.
--
-- The host resumes the dispatcher with (what, a, b, c) and gets back (code, x, y, ...);
-- `what` says what to do, in as few arguments as possible (each costs the host a
-- conversion):
--   what > 0: call callback `what` with a, b, c   what < 0: resume waiting task -what
--   what a string: call that export with a        what == 0: an engine operation, a:
--     a number: forget waiting task a
--     "snapshot": x is {the generator's eight half-words, the next task id}
--     "restore": put back what b holds (see restore below); x lists the resume points
--       it names that the mod did not declare
--   code 0: done (x: an export's result; nothing at all when there is none)
--   code 1: waiting: task x for y ticks (then, for a wait with a resume point: its name
--           and data)
--   code 2: failed with message x                 code 3: no such callback, task or export
--   code 4: as code 1, and the task is the dispatcher's own coroutine (see dispatcher):
--           the host starts the dispatcher again for its next call

local seed, worker_resume, worker_call, raw_running, task_resume = ...

-- Captured before the mod's code can replace any global.
local env = _G
local type, error, pcall, floor = type, error, pcall, math.floor
local min, max, huge = math.min, math.max, math.huge
local s_match, s_sub, tostring, tonumber = string.match, string.sub, tostring, tonumber
local select, next, ipairs = select, next, ipairs
local co_create, co_resume, co_yield = coroutine.create, coroutine.resume, coroutine.yield
-- The workers are resumed with the host's resume for them where it gives one (an isolated
-- game's worker processes do not): what a mod's coroutine.resume checks besides the
-- depth and the trip is of no use for coroutines no mod can reach.
local resume_worker = worker_resume or co_resume
local resume_task = task_resume or co_resume

-------------------------------------------------------------------------------------------
-- math.random: the runtime's own generator written out here, so that a snapshot of the
-- game can hold its state and a restore put it back (the runtime keeps its state where no
-- Lua code reads it). It is LuaJIT's: Tausworthe 223 over four 64-bit words, each word
-- here two 32-bit halves, seeded from a number as LuaJIT seeds it. It draws exactly what
-- the runtime's math.random draws (a test holds them equal).
-------------------------------------------------------------------------------------------
local bit = env.bit
local band, bor, bxor, lshift, rshift, tobit = bit.band, bit.bor, bit.bxor, bit.lshift,
  bit.rshift, bit.tobit
local frexp, unpack = math.frexp, unpack
local lib_math = env.math

local u0h, u0l, u1h, u1l, u2h, u2l, u3h, u3l = 0, 0, 0, 0, 0, 0, 0, 0

-- One step: the four words move on; their xor is the draw (high, low).
local function step()
  local zh, zl, ah, al, bh, bl, rh, rl
  -- z = ((z << 31 ^ z) >> 45) ^ ((z & top 63 bits) << 18)
  zh, zl = u0h, u0l
  ah = bxor(bor(lshift(zh, 31), rshift(zl, 1)), zh)
  bh, bl = 0, rshift(ah, 13)
  al = band(zl, -2)
  zh = bxor(bh, bor(lshift(zh, 18), rshift(al, 14)))
  zl = bxor(bl, lshift(al, 18))
  u0h, u0l = zh, zl
  rh, rl = zh, zl
  -- z = ((z << 19 ^ z) >> 30) ^ ((z & top 58 bits) << 28)
  zh, zl = u1h, u1l
  ah = bxor(bor(lshift(zh, 19), rshift(zl, 13)), zh)
  al = bxor(lshift(zl, 19), zl)
  bh, bl = rshift(ah, 30), bor(rshift(al, 30), lshift(ah, 2))
  al = band(zl, lshift(-1, 6))
  zh = bxor(bh, bor(lshift(zh, 28), rshift(al, 4)))
  zl = bxor(bl, lshift(al, 28))
  u1h, u1l = zh, zl
  rh, rl = bxor(rh, zh), bxor(rl, zl)
  -- z = ((z << 24 ^ z) >> 48) ^ ((z & top 55 bits) << 7)
  zh, zl = u2h, u2l
  ah = bxor(bor(lshift(zh, 24), rshift(zl, 8)), zh)
  bh, bl = 0, rshift(ah, 16)
  al = band(zl, lshift(-1, 9))
  zh = bxor(bh, bor(lshift(zh, 7), rshift(al, 25)))
  zl = bxor(bl, lshift(al, 7))
  u2h, u2l = zh, zl
  rh, rl = bxor(rh, zh), bxor(rl, zl)
  -- z = ((z << 21 ^ z) >> 39) ^ ((z & top 47 bits) << 8)
  zh, zl = u3h, u3l
  ah = bxor(bor(lshift(zh, 21), rshift(zl, 11)), zh)
  bh, bl = 0, rshift(ah, 7)
  al = band(zl, lshift(-1, 17))
  zh = bxor(bh, bor(lshift(zh, 8), rshift(al, 24)))
  zl = bxor(bl, lshift(al, 8))
  u3h, u3l = zh, zl
  return bxor(rh, zh), bxor(rl, zl)
end

-- The bits of a double as two 32-bit words (high, low), as the runtime's seeding reads them.
local function bits(d)
  if d ~= d then return tobit(0xfff80000), 0 end
  local sign = (d < 0 or (d == 0 and 1 / d < 0)) and 0x80000000 or 0
  local a = d < 0 and -d or d
  local hi, frac
  if a == huge then
    hi, frac = 0x7ff00000, 0
  elseif a == 0 then
    hi, frac = 0, 0
  else
    local m, e = frexp(a)
    local biased = e + 1022
    if biased >= 1 then
      frac = (m * 2 - 1) * 4503599627370496
    else  -- subnormal
      biased, frac = 0, a * 2 ^ 1074
    end
    hi = biased * 1048576
  end
  return tobit(sign + hi + floor(frac / 4294967296)), tobit(frac % 4294967296)
end

local PI, E = 3.14159265358979323846, 2.7182818284590452354

local function seed_generator(d)
  local r = 0x11090601  -- 64 - k of each word, one byte each
  local words = {}
  for i = 0, 3 do
    local m = 2 ^ (r % 256)
    r = floor(r / 256)
    d = d * PI + E
    local hi, lo = bits(d)
    if hi == 0 and lo % 4294967296 < m then lo = tobit(lo + m) end
    words[2 * i + 1], words[2 * i + 2] = hi, lo
  end
  u0h, u0l, u1h, u1l, u2h, u2l, u3h, u3l = unpack(words)
  for _ = 1, 10 do step() end
end

local function number_arg(v, i, fname)
  if type(v) == "number" then return v end
  local n = type(v) == "string" and tonumber(v) or nil
  if n == nil then
    error("bad argument #" .. i .. " to '" .. fname .. "' (number expected, got "
      .. (v == nil and "no value" or type(v)) .. ")", 3)
  end
  return n
end

function lib_math.random(...)
  local rh, rl = step()
  local d = (band(rh, 0xfffff) * 4294967296 + rl % 4294967296) * (1 / 4503599627370496)
  local n = select("#", ...)
  if n == 0 then return d end
  local m, top = ...
  m = number_arg(m, 1, "random")
  if n == 1 then return floor(d * m) + 1 end
  top = number_arg(top, 2, "random")
  return floor(d * (top - m + 1)) + m
end

function lib_math.randomseed(...)
  seed_generator(number_arg((...), 1, "randomseed"))
end

seed_generator(type(seed) == "number" and seed or 0)

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
local points = {}      -- resume point name -> function (see resume_point)
local point_of = {}    -- function -> its resume point's name
local revived = {}     -- task id -> {point, data}: restored from a snapshot, not due yet
local next_task = 0
-- What a worker yields to the dispatcher. Only the workers hold them: no mod code can
-- resume a worker or get hold of one (see below), and a coroutine the mod made cannot
-- wait (see wait), so the mod can neither read nor forge them.
local WAIT, DONE = {}, {}
local MAX_WAIT = 1000000
local workers = setmetatable({}, { __mode = "k" })  -- every worker coroutine: true
-- The dispatcher's coroutine while it runs a callback on it (see dispatcher), and that
-- callback.
local direct, direct_fn = nil, nil
-- The callbacks that once paused on the dispatcher's coroutine: run in workers from then on.
local waits = setmetatable({}, { __mode = "k" })
-- The dispatcher starts again because its coroutine became a task, not after a trip.
local restarted = false

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
    local id = call_raw("on", event, fn, point_of[fn])
    callbacks[id] = fn
    return id
  end
end

if raw.after then
  -- after(ticks, fn): call fn(tick) once, that many ticks from now.
  function env.after(ticks, fn)
    local id = call_raw("after", ticks, fn, point_of[fn])
    callbacks[id] = fn
    once[id] = true
    return id
  end

  -- spawn(fn): run fn as a task from the next tick; it may wait().
  function env.spawn(fn)
    local id = call_raw("after", 1, fn, point_of[fn], true)
    callbacks[id] = fn
    once[id] = true
    return id
  end
end

if raw.every then
  -- every(ticks, fn): call fn(tick) every that many ticks.
  function env.every(ticks, fn)
    local id = call_raw("every", ticks, fn, point_of[fn])
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

-- resume_point(name, fn): declare fn as the way back into work a snapshot of the game
-- cannot hold as it is: a task waiting with wait(ticks, name, data) is re-entered after a
-- restore as fn(data); a handler or timer registered after loading with fn is registered
-- again with it. Declare them in the main chunk: a restore runs it again.
function env.resume_point(name, fn)
  if type(name) ~= "string" or #name < 1 or #name > 64 then
    error("resume_point: the name must be a string of 1 to 64 characters", 2)
  end
  if type(fn) ~= "function" then error("resume_point: fn must be a function", 2) end
  local old = points[name]
  if old ~= nil then point_of[old] = nil end
  points[name] = fn
  point_of[fn] = name
end

-- Whether v is plain data: nil, booleans, numbers, strings, and tables of them with
-- string or number keys, no cycles, at most 32 deep. Raw access only.
local function plain(v, depth, seen)
  local tv = type(v)
  if tv ~= "table" then
    return tv == "nil" or tv == "boolean" or tv == "number" or tv == "string"
  end
  if depth > 32 or seen[v] then return false end
  seen[v] = true
  local k, x = next(v)
  while k ~= nil do
    local tk = type(k)
    if (tk ~= "string" and tk ~= "number") or not plain(x, depth + 1, seen) then
      return false
    end
    k, x = next(v, k)
  end
  seen[v] = nil
  return true
end

-- A callback the dispatcher runs on its own coroutine pauses: that coroutine becomes the
-- waiting task (a worker from now on: see dispatcher), and the host, told so by code 4,
-- starts the dispatcher again for the calls after this one. A pause that cannot yield
-- (inside a call from C) fails as the yield does, with nothing changed.
local function wait_direct(ticks, point, data)
  local co, fn = direct, direct_fn
  direct, direct_fn = nil, nil
  next_task = next_task + 1
  local id = next_task
  tasks[id], workers[co] = co, true
  restarted = true
  waits[fn] = true
  local ok, err = pcall(co_yield, 4, id, ticks, point, data)
  if ok then return end  -- resumed as the task, with no values
  tasks[id], workers[co] = nil, nil
  next_task = id - 1
  restarted = false
  direct, direct_fn = co, fn
  waits[fn] = nil
  -- At the caller of wait (or of coroutine.yield): where LuaJIT places the yield's error,
  -- as in a worker, whose wait tail-calls the yield. (A trip or a memory error never comes
  -- back here: pcall raises it again.)
  if type(err) == "string" then error(err, 2) end
  error(err, 0)
end

-- Whether the running coroutine is one the mod made. The sandbox's coroutine.running
-- (before the engine's below) gives nil for a run's own coroutine and the coroutine
-- itself for a worker's or the mod's.
local sb_running = env.coroutine and env.coroutine.running
local function own_coroutine()
  if sb_running == nil then return false end
  local co = sb_running()
  return co ~= nil and not workers[co]
end

-- wait(ticks, point, data): pause this handler, timer or task; it resumes that many ticks
-- later. With a resume point (a name given to resume_point), a restore from a snapshot
-- taken meanwhile calls that point's function with a copy of data (taken now) instead.
-- Only the callback itself pauses: in a coroutine the mod made, the yield would hand what
-- only the dispatcher may read to that coroutine's resumer, the mod.
function env.wait(ticks, point, data)
  if ticks == nil then ticks = 1 end
  if type(ticks) ~= "number" or ticks ~= ticks or ticks < 1 or ticks > MAX_WAIT then
    error("wait: ticks must be a number from 1 to 1000000", 2)
  end
  local on_direct = direct ~= nil and raw_running() == direct
  if not on_direct and own_coroutine() then
    error("wait: a coroutine the mod made cannot wait; call wait in the handler, timer "
      .. "or task itself, and from the coroutine yield (coroutine.yield) to its caller", 2)
  end
  if point == nil then
    if on_direct then return wait_direct(floor(ticks)) end
    return co_yield(WAIT, floor(ticks))
  end
  if type(point) ~= "string" or points[point] == nil then
    error("wait: no resume point is named " .. (type(point) == "string" and point or type(point))
      .. "; declare it with resume_point(name, fn)", 2)
  end
  if not plain(data, 0, {}) then
    error("wait: data must be plain data (nil, booleans, numbers, strings and tables of "
      .. "them, no cycles)", 2)
  end
  if on_direct then return wait_direct(floor(ticks), point, data) end
  return co_yield(WAIT, floor(ticks), point, data)
end

if raw.export then
  -- export(name, value): offer a copy of data, or a function, to other mods.
  function env.export(name, value)
    call_raw("export", name, value, type(value) == "function" and point_of[value] or nil)
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
  -- A bare yield waits one tick, on the dispatcher's coroutine too.
  local yield = lib_co.yield
  if yield ~= nil and worker_call ~= nil then
    lib_co.yield = function(...)
      if direct ~= nil and raw_running() == direct then return wait_direct(1) end
      return yield(...)
    end
  end
end

local function worker(fn, a, b, c)
  while true do
    fn, a, b, c = co_yield(DONE, fn(a, b, c))
  end
end

local function settle(co, ok, x, y, point, data)
  if not ok then return 2, message_of(x) end
  if x == DONE then
    idle = co
    return 0, y
  end
  if x ~= WAIT then
    y, point, data = 1, nil, nil  -- a bare coroutine.yield() waits one tick
  elseif type(y) ~= "number" or y ~= y or y == huge or y == -huge then
    return 2, "wait: ticks must be a number from 1 to " .. MAX_WAIT   -- never from wait()
  else
    y = floor(min(max(y, 1), MAX_WAIT))
  end
  next_task = next_task + 1
  tasks[next_task] = co
  return 1, next_task, y, point, data
end

local function start(fn, a, b, c)
  local co = idle
  idle = nil
  if co == nil then
    co = co_create(worker)
    workers[co] = true
  end
  return settle(co, resume_worker(co, fn, a, b, c))
end

-- What a snapshot holds of the mod's Lua side besides what the host keeps: the
-- generator's state and the next task id.
local function snapshot()
  return { u0h, u0l, u1h, u1l, u2h, u2l, u3h, u3l, next_task }
end

-- Puts back what a snapshot held, into the state the main chunk (run again) left:
--   random: the generator's eight half-words; next_task: the next task id
--   drop: callback ids registered by the main chunk and gone since (fired or cancelled)
--   bind: {id, point, once}: callbacks registered after loading, through a resume point
--   exports: {name, point}: exported functions through a resume point ({name}: none)
--   tasks: {id, point, data}: waiting tasks, re-entered through their resume point
-- Returns the resume points named that the mod did not declare (nil: none).
local function restore(b)
  local missing = nil
  local function point(name)
    local fn = points[name]
    if fn == nil then
      missing = missing or {}
      missing[#missing + 1] = name
    end
    return fn
  end
  local r = b.random
  if r ~= nil then
    u0h, u0l, u1h, u1l = tobit(r[1]), tobit(r[2]), tobit(r[3]), tobit(r[4])
    u2h, u2l, u3h, u3l = tobit(r[5]), tobit(r[6]), tobit(r[7]), tobit(r[8])
  end
  next_task = b.next_task
  for _, id in ipairs(b.drop or {}) do
    callbacks[id], once[id] = nil, nil
  end
  for _, e in ipairs(b.bind or {}) do
    local fn = point(e[2])
    if fn ~= nil then
      callbacks[e[1]] = fn
      once[e[1]] = e[3] or nil
    end
  end
  for _, e in ipairs(b.exports or {}) do
    if e[2] == nil then exported[e[1]] = nil else exported[e[1]] = point(e[2]) end
  end
  for _, e in ipairs(b.tasks or {}) do
    if point(e[2]) ~= nil then revived[e[1]] = { e[2], e[3] } end
  end
  return missing
end

-- Everything but the commonest call (below): (code, x, y, ...) for the host.
local function answer(what, a, b, c)
  local code, x, y, point, data = 3, nil, nil, nil, nil
  if type(what) == "number" then
    if what > 0 then
      local fn = callbacks[what]
      if fn ~= nil then
        if once[what] then
          callbacks[what], once[what] = nil, nil
        end
        code, x, y, point, data = start(fn, a, b, c)
      end
    elseif what < 0 then
      local co = tasks[-what]
      if co ~= nil then
        tasks[-what] = nil
        code, x, y, point, data = settle(co, resume_task(co))
      else
        local r = revived[-what]
        if r ~= nil then
          revived[-what] = nil
          code, x, y, point, data = start(points[r[1]], r[2])
        end
      end
    elseif type(a) == "number" then
      tasks[a], revived[a] = nil, nil
      code = 0
    elseif a == "snapshot" then
      code, x = 0, snapshot()
    elseif a == "restore" then
      code, x = 0, restore(b)
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
  return code, x, y, point, data
end

-- Each start of the dispatcher (the first call, and the next after a budget trip ended the
-- last one). A trip unwinds past whatever cleanup the mod's code had pending; code that
-- keeps marks across a call (require's "loading") asks this to know which are stale.
local starts = 0

-- The commonest call, a callback, runs on the dispatcher's own coroutine where the host
-- gives the call for it (worker_call): no switch to a worker and back. The callback can
-- still pause: then this coroutine becomes its task (wait_direct), and, resumed as that
-- task, goes on as a worker once the callback ends. A callback that paused so once runs
-- in a worker from then on. Without worker_call (an isolated game's worker processes),
-- the commonest call is a callback with an idle worker to run it: what start and settle
-- do, written out here. Each function entered is a metering check, and this runs on
-- every handler call.
local function dispatcher(what, a, b, c)
  if restarted then restarted = false else starts = starts + 1 end
  local me = worker_call and raw_running()
  direct, direct_fn = nil, nil
  while true do
    local fn, co = nil, idle
    if type(what) == "number" and what > 0 then fn = callbacks[what] end
    local code, x, y, point, data
    if fn ~= nil and me and not waits[fn] then
      if once[what] then
        callbacks[what], once[what] = nil, nil
      end
      direct, direct_fn = me, fn
      local ok
      ok, x = worker_call(fn, a, b, c)
      if direct ~= me then
        -- It paused, and was resumed as its task: this coroutine is a worker now.
        if not ok then error(x, 0) end
        return worker(co_yield(DONE, x))
      end
      direct, direct_fn = nil, nil
      if ok then code = 0 else code, x = 2, message_of(x) end
    elseif fn ~= nil and co ~= nil then
      if once[what] then
        callbacks[what], once[what] = nil, nil
      end
      idle = nil
      local ok
      ok, x, y, point, data = resume_worker(co, fn, a, b, c)
      if ok and x == DONE then
        idle = co
        code, x, y = 0, y, nil
      else
        code, x, y, point, data = settle(co, ok, x, y, point, data)
      end
    else
      code, x, y, point, data = answer(what, a, b, c)
    end
    if code == 0 and x == nil then
      what, a, b, c = co_yield()  -- the commonest answer, and the cheapest to hand over
    elseif point == nil then
      what, a, b, c = co_yield(code, x, y)
    else
      what, a, b, c = co_yield(code, x, y, point, data)
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
