-- Part of the moonbox prelude (prelude.lua), and its last: loading mod chunks and running
-- them, each resume under the meter, then the runtime's own globals sealed.

-------------------------------------------------------------------------------------------
-- Loading and running.
-------------------------------------------------------------------------------------------
local runs = {}
local next_run = 0
local main_of = setmetatable({}, { __mode = "k" })  -- entry function -> the mod's main

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
    -- The checks compare the window with cell[1], the poll flag, through a pointer the
    -- JIT cannot prove distinct from the cell: a compiled loop reloads it (meter.lua).
    local poll = ffi.cast("int32_t*", cell) + 1
    fn = function(...) return body(cell, poll, slow, ...) end
    main_of[fn] = body
  end
  m_chunks[chunkname] = true
  return fn
end

-- with_worker_resume: the chunk's first resume hands it its first argument, then the
-- resume of its own worker coroutines (worker_resume, protected.lua); with_worker_call
-- too: then the call for running a mod's function on its own run (worker_call), the
-- runtime's coroutine.running (which tells the chunk's own runs, hidden from a mod) and a
-- resume handing over no values (task_resume), which resumes such a run's coroutine too.
function host.start(fn, with_worker_resume, with_worker_call)
  next_run = next_run + 1
  local body = fn
  if with_worker_call then
    body = function(a) return fn(a, worker_resume, worker_call, co_running, task_resume) end
  elseif with_worker_resume then
    body = function(a) return fn(a, worker_resume) end
  end
  local co = co_create(body)
  host_cos[co] = true
  -- The run's figures live in a struct, which the host's compiled resume reads and sets
  -- too (see host.run_addresses).
  runs[next_run] = {
    co = co, main = main_of[fn] or fn, s = ffi.new("moonbox_run"),
    addr = tonumber(s_format("%p", co)),
  }
  return next_run
end

function host.close(id)
  runs[id] = nil
end

-- For the host's compiled resume of run `id` (_resume.c): the address of its coroutine
-- and of its figures. Both live as long as the run is open: the host drops them before
-- host.close.
function host.run_addresses(id)
  local run = runs[id]
  if not run or run.s.dead then return nil end
  return run.addr, tonumber(ffi.cast("intptr_t", ffi.cast("void *", run.s)))
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
-- Resumes.
-------------------------------------------------------------------------------------------
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
-- cross to Python without an allocation (the host's _outcome.py has the same table).
local YIELDED, DONE, PREEMPTED, BUDGET, FAILED, BAD_VALUE, CLOSED = 1, 2, 3, 4, 5, 6, 7

-- The bookkeeping around a resume lives in begin and settle, small functions that take no
-- varargs and call no coroutine function: the JIT compiles each of them, where host.resume
-- and the ends below stay interpreted (coroutine.resume cannot be compiled). The heap is
-- read by their callers: a library call inside them would split their traces.

-- Accounts a resume that just ended, with the heap (KiB) at its end; returns whether it
-- ended plainly (no error, no trip, within its allowance). The host measures the wall time:
-- a clock read through the FFI costs ~0.8 us in the interpreter, where a runtime resumed
-- once per tick (an engine mod's) runs this code.
local function settle(run, ok, kb)
  M.active = false
  if not ok then run.s.dead = true end  -- a coroutine that raised is dead
  account()
  M.run_co = 0
  if kb > M.peak_kb then M.peak_kb = kb end
  if M.used < 0 then M.used = 0 end
  run.s.total = run.s.total + M.used
  return ok and not tripped and kb <= M.alloc_kb
end

function host.set_budget(steps, wall_s, total_limit, preempt, alloc_bytes, max_memory)
  M.steps, M.wall_s, M.total_limit, M.preempt = steps, wall_s, total_limit, preempt
  M.alloc_bytes, M.max_memory = alloc_bytes, max_memory
  M.host_call_max_kb = max_memory / 1024 - HOST_CALL_MARGIN_KB
end

-- Ends what a trip left (the flag is sticky until then) and the C depth of what unwound.
local function clear_trip()
  if tripped then
    tripped = false
    M.tripped = false
    t_kind, t_chunk, t_line = nil, nil, nil
  end
  c_depth = 0
end

-- Sets the meter up for a resume of `run` that starts at `start`, with the heap at `kb`.
local function begin(run, start, growth_limited, kb)
  clear_trip()
  M.used = 0
  M.total_base = run.s.total
  M.run_co = run.addr
  M.peak_kb = kb
  M.start_kb = kb
  M.alloc_kb = kb + M.alloc_bytes / 1024
  M.growth_limited = growth_limited
  -- A host call is refused within the margin of the limit the allocator holds this resume
  -- to: the growth allowance when it is the tighter one, else the heap cap.
  if growth_limited then
    M.host_call_max_kb = M.alloc_kb - HOST_CALL_MARGIN_KB
  else
    M.host_call_max_kb = M.max_memory / 1024 - HOST_CALL_MARGIN_KB
  end
  M.start = start
  M.last_poll = start
  M.deadline = start + M.wall_s
  if M.k > 4096 then M.k = 4096 end
  refill()
  cell[1] = 0  -- a poll the alarm asked of the resume before
  if M.hook_pending then restore_hook() end  -- a resume that ended inside the prelude
  M.active = true
end

-- The ends of a resume, fields of one table: the prelude's one chunk is at Lua's limit
-- of 200 locals.
local ends = {}
do
  -- Every end of a resume but a yield of nothing: done, values, an error or a trip, as the
  -- status first, the two figures, then the values or the error info. `plain` is what
  -- settle answered.
  local function other(run, ok, kb, plain, ...)
    local stats_steps, stats_peak = M.used, M.peak_kb * 1024
    if plain and select("#", ...) == 0 then
      run.s.dead = true  -- it returned: a yield of nothing is answered before this
      return DONE, stats_steps, stats_peak
    end
    if not ok and not tripped and is_memory_error((...)) then
      tripped = true
      M.tripped = true
      t_kind, t_limit, t_used = "memory", memory_trip_figures()
      t_chunk, t_line = nil, nil
    elseif not tripped and kb > M.alloc_kb then
      -- Grew past the allowance between polls and finished before the next one.
      tripped = true
      M.tripped = true
      t_kind, t_limit, t_used = "memory", M.alloc_bytes, floor((kb - M.start_kb) * 1024)
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
      run.s.dead = true
    end
    local problem = check_values(...)
    if problem then return BAD_VALUE, stats_steps, stats_peak, problem, status end
    return status, stats_steps, stats_peak, ...
  end

  -- Every end but a plain yield, answered: the trip that ended it (if any) is over once
  -- its figures are taken, and so is the C depth of what unwound. Reset here, not only
  -- when the next resume begins: a resume the host's compiled path begins (_resume.c)
  -- cannot reach these upvalues, and starts from what this left.
  local function clean(...)
    clear_trip()
    return ...
  end

  function ends.other(run, ok, kb, plain, ...)
    return clean(other(run, ok, kb, plain, ...))
  end

  function ends.resume(run, ok, ...)
    local kb = collectgarbage("count")
    local plain = settle(run, ok, kb)
    -- Most resumes: nothing yielded or returned. A yield of nothing answers with the two
    -- figures alone (no status first).
    if plain and select("#", ...) == 0 and co_status(run.co) == "suspended" then
      return M.used, M.peak_kb * 1024
    end
    return ends.other(run, ok, kb, plain, ...)
  end

  -- The end of a call (host.call): a yield of nothing answers the steps alone, unless the
  -- run's peak heap passed the highest it answered before, or the heap moved to another
  -- 64 KiB than at the runtime's last call: then FIGURES, the steps, the peak and the heap
  -- (bytes). The host sets the allocator's limit for the next call from the heap.
  ends.FIGURES = 0  -- (a field: the prelude's chunk has no room for another local)
  function ends.call(run, ok, ...)
    local kb = collectgarbage("count")
    local plain = settle(run, ok, kb)
    if plain and select("#", ...) == 0 and co_status(run.co) == "suspended" then
      local peak, block = M.peak_kb * 1024, floor(kb / 64)
      local rs = run.s
      if peak > rs.peak or block ~= M.heap_block then
        if peak > rs.peak then rs.peak = peak end
        M.heap_block = block
        return ends.FIGURES, M.used, rs.peak, kb * 1024
      end
      return M.used
    end
    return ends.other(run, ok, kb, plain, ...)
  end

  -- Resumes run `id` with a fresh budget; `start` is the host's clock reading as it began.
  -- Returns the status, steps used, peak heap bytes, then for done/yielded the values, for
  -- the other statuses the error info (a table, or a message for bad_value). A yield of no
  -- values, the commonest end, returns the two figures alone, without the status.
  function host.resume(id, start, growth_limited, ...)
    local run = runs[id]
    if not run or run.s.dead then return CLOSED end
    begin(run, start, growth_limited, collectgarbage("count"))
    return ends.resume(run, co_resume(run.co, ...))
  end

  -- host.resume for a host that resumes a run over and over (Run.call), with the shortest
  -- answers for the commonest end (see ends.call); false for a run that is gone. `fresh`:
  -- the host read the heap itself since the last answer with FIGURES (something else ran
  -- or allocated in the runtime meanwhile), so this call's end answers the heap whatever
  -- block it is in.
  function host.call(id, start, growth_limited, fresh, ...)
    local run = runs[id]
    if not run or run.s.dead then return false end
    if fresh then M.heap_block = -1 end
    begin(run, start, growth_limited, collectgarbage("count"))
    return ends.call(run, co_resume(run.co, ...))
  end

  -- The host's compiled resume (_resume.c) does what host.call does, begin and settle on
  -- the meter's struct, and answers a plain yield itself; every other end it hands here,
  -- settled, with what the coroutine answered (`ok`: it did not raise), and the host takes
  -- the answer host.call would have given with host.take_end, converted as any answer.
  local taken_n, taken = 0, {}
  function host.call_end(id, ok, kb, plain, ...)
    local function keep(...)
      taken_n = select("#", ...)
      taken = { ... }
    end
    keep(ends.other(runs[id], ok, kb, plain, ...))
  end

  function host.take_end()
    local t, n = taken, taken_n
    taken, taken_n = {}, 0
    return unpack_(t, 1, n)
  end

  -- What the compiled resume binds to: the meter's struct, and a coroutine never resumed,
  -- the thread it calls host.call_end on (its address, as %p shows it), which it finds in
  -- the registry (no mod reaches the registry: environments have no debug library).
  host.meter_address = tonumber(ffi.cast("intptr_t", cell))  -- cell points at M
  host.call_end_holder = co_create(function() end)
  host.call_end_address = s_format("%p", host.call_end_holder)
  debug.getregistry()["moonbox.call_end"] = host.call_end
  M.margin_kb = HOST_CALL_MARGIN_KB
end

-------------------------------------------------------------------------------------------
-- The runtime's own globals, sealed last: every part above captured what it uses.
-------------------------------------------------------------------------------------------
-- The `python` module lupa installs is removed from the runtime entirely.
_G.python = nil
package.loaded.python = nil

-- The runtime's own globals keep no `debug` either (the prelude captured what it uses).
-- No mod could reach it there anyway; it goes because lupa looks up `debug.traceback` as
-- the error handler of every call the host makes into Lua: without it, each resume skips
-- two table lookups and a stack shuffle, and a host-side Lua error arrives as its message.
_G.debug = nil

return host
