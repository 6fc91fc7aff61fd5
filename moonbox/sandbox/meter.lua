-- Part of the moonbox prelude (prelude.lua): the clock and the meter, the budget every
-- resume runs under, and the host's entry points that move its deadline.

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
-- drops below `cell[1]`, the poll flag: 0, or POLL_NOW (far above any window) when the
-- host's alarm asks the resume to poll at once. `slow` accounts the window, polls the clock and the heap, adapts the
-- poll interval K, and either refills the window, preempts (yields) or trips.
--
-- The cell is a 32-bit integer: in compiled code a check is then an integer subtract, and
-- the chain of checks through the cell (every function entry of a recursion) is shorter
-- than with a double (fib, the worst case, runs ~5% faster). Everything stored in it stays
-- in range: a window holds at most K_MAX steps, a check subtracts its weight (far below
-- 2^24) and calls `slow` as soon as the cell is negative, and charges that go past the
-- window are accounted exactly by `overdrawn`, never stored.
-------------------------------------------------------------------------------------------
-- The poll flag is the one way the alarm (moonbox/sandbox/_alarm.py, a host thread) reaches
-- a resume past its deadline: it writes POLL_NOW into cell[1], then arms the count hook for
-- the next instruction. A check compares the window with the flag through a pointer (see
-- host.compile) the JIT cannot prove distinct from cell[0], so even a loop compiled whole,
-- which runs no hook, reloads the flag after each store to the window and enters `slow` at
-- its next check; `slow` puts the flag back to 0 and computes the window from cell[0] alone,
-- so a stale alarm costs one poll and no step. jit=False runs no checks: its hook reads the
-- flag to tell the alarm from its own count.
-- The meter's state is one struct (moonbox_meter), the cell its first two fields: the host's
-- compiled resume (_resume.c, which declares the same struct) sets it up before a resume
-- and accounts it after, without running any of the prelude's Lua; the prelude's own
-- resume (begin and settle in runs.lua) does the same work on the same fields (a test holds
-- the two declarations to one layout: test_compiled_resume.py). One block
-- per runtime, where separate upvalues were dozens of objects: at a thousand runtimes a
-- resume's cost is mostly the memory it touches that the other runtimes pushed out of the
-- caches. Booleans are C bools, which the FFI reads as Lua booleans. The fields the
-- interpreted prelude reads on every host call (active, host_call_max_kb) come first: in
-- the interpreter the FFI finds a field by walking the struct's fields in order.
ffi.cdef [[
  typedef struct {
    int32_t window, poll;
    bool active, tripped, growth_limited, preempt, hook_pending;
    double host_call_max_kb, granted, used, total_base, start, deadline, alloc_kb, start_kb,
      peak_kb, k, last_poll, run_co, heap_block, margin_kb;
    double steps, wall_s, total_limit, alloc_bytes, max_memory;
  } moonbox_meter;
  typedef struct { double total, peak; bool dead; } moonbox_run;
]]
local M = ffi.new("moonbox_meter")
local cell = ffi.cast("int32_t*", M)  -- cell[0]: M.window, cell[1]: M.poll
local STICKY = -1073741824                -- -2^30: stays negative whatever a check subtracts
-- K_MAX bounds the time between polls: a step is at most a bounded amount of straight-line
-- work (the instrumenter weighs big bodies), so 2^17 steps stay within milliseconds.
local K_MIN, K_MAX = 1, 131072
local POLL_LOW_S, POLL_HIGH_S = 0.0002, 0.001  -- aim: one poll every 0.2-1 ms

-- The fields (M.x), and what they held before any resume:
--   active: a resume is running; granted: steps granted to the cell at the last refill
--   used: steps accounted in this resume; total_base: steps used by earlier resumes of the
--   run (for total_steps); start: clock at resume start; deadline: clock value at which the
--   resume runs out of time; alloc_kb: heap (KiB) at which it runs out of allocation;
--   start_kb: heap when it began; growth_limited: the allocator's limit this resume is the
--   growth allowance; peak_kb; k: steps between polls, adapted to the workload; last_poll;
--   run_co: the address of the running run's coroutine (0: none); tripped: mirrors the trip
--   flag below for the compiled resume; heap_block: see ends.call (runs.lua).
M.deadline, M.alloc_kb, M.k, M.heap_block = huge, huge, 256, -1
local m_chunks = {}         -- source name -> true, for every mod chunk loaded here

-- The budget of every resume, until the host sends another (set_budget in runs.lua).
-- The allocator enforces max_memory and alloc_bytes; the meter checks alloc_bytes too.
-- In M: steps, wall_s, total_limit (-1: no cap), preempt, alloc_bytes, max_memory; and
-- host_call_max_kb: a host call is refused above this heap (see make_host_function).
M.total_limit = -1

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
    M.used = M.used + (M.granted - c)
  end
  M.granted = c
end

local function set_trip(kind, limit, used)
  if tripped then return end
  tripped = true
  M.tripped = true
  t_kind, t_limit, t_used = kind, limit, used
  t_chunk, t_line = mod_frame(2)
end

local function raise_trip()
  cell[0] = STICKY
  M.granted = STICKY
  error(TRIP_MESSAGE, 0)
end

local function refill()
  local w = M.k
  local left = M.steps - M.used
  if left < w then w = left end
  if M.total_limit >= 0 then
    local total_left = M.total_limit - M.total_base - M.used
    if total_left < w then w = total_left end
  end
  if w < 0 then w = 0 end
  M.granted = w
  cell[0] = w
end

-- jit=False: set when the count hook was armed for single instructions (see hook below).
-- (M.hook_pending)
local restore_hook  -- set with the hook

local function slow()
  -- The alarm's poll is this one. Whether it asked for it decides a trip below: read here,
  -- before the flag goes down, and again there, for an alarm that lands meanwhile.
  local alarmed = cell[1] ~= 0
  cell[1] = 0
  if tripped then raise_trip() end
  if M.hook_pending then restore_hook() end
  account()
  local t = now()
  local dt = t - M.last_poll
  M.last_poll = t
  if dt < POLL_LOW_S then
    if M.k < K_MAX then M.k = M.k * 2 end
  elseif dt > POLL_HIGH_S and M.k > K_MIN then
    M.k = floor(M.k / 2)
  end
  local kb = collectgarbage("count")
  if kb > M.peak_kb then M.peak_kb = kb end
  if kb > M.alloc_kb then
    set_trip("memory", M.alloc_bytes, floor((kb - M.start_kb) * 1024))
    raise_trip()
  end
  if M.total_limit >= 0 and M.total_base + M.used > M.total_limit then
    set_trip("steps", M.total_limit, M.total_base + M.used)
    raise_trip()
  end
  local over_steps = M.used > M.steps
  local over_time = t > M.deadline
  if over_steps or over_time then
    if M.preempt and tonumber(s_format("%p", co_running())) == M.run_co then
      -- Yield to the host; the next resume refills the window with a fresh slice.
      if pcall(co_yield, PREEMPT) then return end
    end
    -- Both at once: the steps ran out at this very check (a window holds no more than are
    -- left), the deadline somewhere in the window. The alarm sounds a grace period past
    -- the deadline, so when it asked for this poll the time ran out first.
    if over_steps and not (over_time and (alarmed or cell[1] ~= 0)) then
      set_trip("steps", M.steps, M.used)
    else
      set_trip("time", M.wall_s, t - M.start)
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
  M.hook_pending = false
  sethook(hook, "", HOOK_INSTRUCTIONS)
end

local function pending_hook()
  local info = getinfo(2, "S")
  if info and info.source == PRELUDE_SOURCE then return end
  restore_hook()
  if M.active then slow() end
end

-- Whether the hook landed in the prelude's own code (the host's work between the mod's
-- steps), where it never polls or trips: then it waits, armed for one instruction at a
-- time, and the first instruction back in mod code polls.
local function deferred()
  local info = getinfo(3, "S")  -- 1: this function, 2: the hook, 3: the code it landed in
  if not (info and info.source == PRELUDE_SOURCE) then return false end
  M.hook_pending = true
  sethook(pending_hook, "", 1)
  return true
end

hook = function()
  if cell[1] ~= 0 then
    -- The host's alarm: a resume ran past its deadline without polling (one instruction
    -- that costs a lot, many times over: see host.alarm below). Poll now, not at the
    -- end of the period; a stale alarm (the resume ended, or polled in time) only puts
    -- the flag down and the count back. Past the deadline the flag stays up for the
    -- poll to lower: it tells the slow path the alarm asked for it.
    restore_hook()
    if not (M.active and now() > M.deadline) then cell[1] = 0 return end
    -- In the prelude's own code its next charge polls too (a charge compares the window
    -- with the flag, as a check does). The window is left as it is: emptying it here, in
    -- the middle of the meter's own accounting, counted a window of steps twice.
    if deferred() then return end
    return slow()
  end
  if not M.active then return end
  local c = cell[0] - HOOK_STEPS
  cell[0] = c
  if c < 0 and not deferred() then slow() end
end

if config.jit then
  jit.on()
  -- With the JIT the alarm has a hook of its own, set only while the alarm stands.
  do
    local watch_left = 0  -- prelude instructions the armed hook still waits through
    local function alarm_hook()
      if not (M.active and not tripped and now() > M.deadline) then
        sethook(alarm_hook, "", 0)  -- stale: the resume ended, or it polled in time
        watch_left = 0
        return
      end
      -- Never poll inside the prelude's own code: the count stays at one instruction, and
      -- the first one back in mod code polls; after 1,000 in the prelude, the hook waits
      -- for the host's next alarm (5 ms later), so long host-side work is not slowed.
      local info = getinfo(2, "S")
      if info and info.source == PRELUDE_SOURCE then
        -- Its next charge polls: a charge compares the window with the flag, which the
        -- alarm raised (raised again here, POLL_NOW, should a poll have lowered it). The
        -- window is left as it is: emptying it here, in the middle of the meter's own
        -- accounting, counted a window of steps twice.
        cell[1] = 0x7FFFFFFF
        if watch_left == 0 then watch_left = 1000 end
        watch_left = watch_left - 1
        if watch_left == 0 then sethook(alarm_hook, "", 0) end
        return
      end
      sethook(alarm_hook, "", 0)
      watch_left = 0
      slow()  -- past the deadline: a time trip (a hook cannot yield, even with preempt)
    end
    sethook(alarm_hook, "", 0)  -- registered, not armed: the host arms it
  end
else
  jit.off()
  jit.flush()
  sethook(hook, "", HOOK_INSTRUCTIONS)
end

-- The window is overdrawn to `c` (below zero, possibly far below what the cell can hold)
-- by a charge, or the poll flag is up: accounted here exactly, then the slow path polls,
-- and refills or trips.
local function overdrawn(c)
  if cell[0] > STICKY / 2 then  -- once tripped, slow raises again
    M.used = M.used + (M.granted - c)
    M.granted = 0
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
  if c < cell[1] then  -- as a check compares: below zero, or the alarm asks for a poll
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
  if M.growth_limited then return M.alloc_bytes, floor((kb - M.start_kb) * 1024) end
  return M.max_memory, floor(kb * 1024)
end

-------------------------------------------------------------------------------------------
-- The host's hold on the meter's deadline.
-------------------------------------------------------------------------------------------
-- Called by the host when a host function returns past the resume's deadline: the next
-- check polls the clock and trips.
function host.expire()
  if M.active and not tripped and cell[0] > 0 then
    account()
    M.granted = 0
    cell[0] = 0
  end
end

-- Called by the host after host work that does not count against the resume's time (an
-- approval a person answers): the deadline moves by the time that work took.
function host.extend(seconds)
  if M.active then M.deadline = M.deadline + seconds end
end

host.clock = CLOCK

-- The alarm (moonbox/sandbox/_alarm.py): a host thread that, when a resume is past its
-- deadline and has not polled, arms the count hook for the next instruction through the
-- C API (lua_sethook, which LuaJIT lets another thread call): any state of this runtime
-- names it, so a coroutine kept here gives its address. It also gets the poll flag's
-- address, and writes POLL_NOW there first (see the cell above).
host.alarm_state = co_create(function() end)
host.alarm_address = s_format("%p", host.alarm_state)
host.alarm_flag = tonumber(ffi.cast("intptr_t", cell + 1))
