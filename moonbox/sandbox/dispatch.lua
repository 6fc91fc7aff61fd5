-- Part of the moonbox prelude (prelude.lua): the dispatcher's Lua side, the closures of
-- the host functions and the checks of their arguments.

-------------------------------------------------------------------------------------------
-- Host functions: closures over the one dispatcher.
-------------------------------------------------------------------------------------------
-- The dispatcher answers with the results themselves (one value as it is, several as a
-- tuple lupa unpacks), or with this marker first and the message second on a failure: the
-- common call then crosses no extra value. Only the host holds the marker.
local HOST_FAILED = setmetatable({}, { __metatable = false })

-- The registry, where the host's compiled crossing is put (see make_host_function), and
-- the host's function that hands over results only lupa converts (set with it).
local registry = debug.getregistry()
local c_take = nil

function host.set_c_take(fn)
  c_take = fn
  local mt = getmetatable(fn)
  if type(mt) == "table" then mt.__metatable = false end
end

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

-- A flat table argument (the common case: `{x = 1, name = "a"}`) in one call: its pairs
-- as multiple values after their count, when it has at most FLAT_MAX entries, string or
-- number keys and boolean, number or string values, within the byte limit; else nil (and
-- the host takes check_argument's way). Charged as check_argument charges.
local FLAT_MAX = 16
local flat = {}
local function flat_pairs(t)
  local n, bytes = 0, 0
  for k, v in next, t do  -- by slot index: linear whatever the keys (values.lua)
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
  end
  if bytes > VALUE_MAX_BYTES then return nil end
  return n
end

-- A call whose last of two arguments is a flat table (`coreai_world_change(name, {x = 1})`)
-- hands the table over as its pairs in the same crossing: the dispatcher gets index
-- `-1 - id`, the first argument, the count and the pairs (what host.flat_argument would
-- answer the host, without the host asking). Checked and charged as flat_argument is.
local make_host_function  -- (in a block: the prelude's chunk has no room for more locals)
do
  local c_host, c_after  -- the compiled crossing (below), when the host bound one

  local function flat_call(id, a, t)
    local was_active = M.active
    M.active = false
    local ok, n = pcall(flat_pairs, t)
    M.active = was_active
    if not ok then return fail(n) end
    if n == nil or n == 0 then return finish(dispatch(id, a, t)) end
    if M.active then charge(n) end
    if c_host ~= nil and c_take ~= nil then  -- the pairs cross as plain arguments
      return c_after(-1 - id, 0, c_host(-1 - id, 0, a, n, unpack_(flat, 1, 2 * n)))
    end
    return finish(dispatch(-1 - id, a, n, unpack_(flat, 1, 2 * n)))
  end

  -- A host call the prelude's way: charged, the heap checked, then the crossing (a flat
  -- table argument in the same crossing).
  local function prelude_call(id, cost, ...)
    local c = cell[0] - cost
    if c < cell[1] then  -- as charge (meter.lua) does
      overdrawn(c)
    else
      cell[0] = c
    end
    local kb = collectgarbage("count")
    if kb > M.host_call_max_kb then
      if M.growth_limited then
        set_trip("memory", M.alloc_bytes, floor((kb - M.start_kb) * 1024))
      else
        set_trip("memory", M.max_memory, floor(kb * 1024))
      end
      raise_trip()
    end
    if select("#", ...) == 2 then
      local a, t = ...
      if type(t) == "table" then return flat_call(id, a, t) end
    end
    return finish(dispatch(id, ...))
  end

  -- The host's compiled crossing (_resume.c), when the host bound one: a C function that
  -- does what prelude_call does for the commonest call (arguments that are numbers,
  -- strings, booleans or nil, the window not overdrawn, the heap below the margin) and
  -- calls the host's dispatcher itself, without lupa's conversions (a flat table argument
  -- crosses as its pairs, walked here: see flat_call). It answers with a
  -- marker first: C_OK and the results; C_PRELUDE and the arguments, having done
  -- nothing (the prelude's way then does it all); C_FLAT and (a, t), a call whose last
  -- of two arguments is a table, charged and checked as prelude_call would (flat_call
  -- walks it); C_TAKE, the results waiting with the host (values only lupa converts); or
  -- C_FAILED and the message. The host binds it
  -- after the prelude has run, before it makes the host functions: read from the registry
  -- by the first of them.
  local C_OK, C_PRELUDE, C_TAKE, C_FAILED, C_FLAT  -- C_FLAT: (a, t), charged and checked

  function c_after(id, cost, first, ...)
    if first == C_OK then return ... end
    if first == C_FLAT then return flat_call(id, ...) end
    if first == C_PRELUDE then return prelude_call(id, cost, ...) end
    if first == C_TAKE then return finish(c_take()) end
    return fail((...))  -- C_FAILED
  end

  local c_bind  -- the crossing bound to one host function (_resume.c), when there is one

  -- bound: the host function may be the compiled crossing itself, with no Lua closure of
  -- the prelude's around it (not for a preemptible sandbox: the prelude's way of a call
  -- then runs under a C function, where a slice's end cannot yield, and would trip).
  function make_host_function(id, cost, bound)
    if not (cost < MAX_CHARGE) then
      cost = MAX_CHARGE
    elseif not (cost > 0) then
      cost = 0
    end
    if c_host == nil then  -- (nil again where the host bound none)
      c_host = registry["moonbox.c_host"]
      C_OK, C_PRELUDE = registry["moonbox.c_ok"], registry["moonbox.c_prelude"]
      C_TAKE, C_FAILED = registry["moonbox.c_take"], registry["moonbox.c_failed"]
      c_bind, C_FLAT = registry["moonbox.c_bind"], registry["moonbox.c_flat"]
    end
    if c_host ~= nil and c_take ~= nil then
      if bound and c_bind ~= nil then return c_bind(id, cost, c_after) end
      local crossing = c_host
      return function(...)
        return c_after(id, cost, crossing(id, cost, ...))
      end
    end
    return function(...)
      return prelude_call(id, cost, ...)
    end
  end
end
function host.make_host_function(id, cost, bound)
  return make_host_function(id, cost, bound)
end

host.host_failed = HOST_FAILED

-- Checking is host work, bounded by the value limits: the count hook does not meter it.
local function unmetered(was_active, ok, ...)
  M.active = was_active
  if not ok then error((...), 0) end
  return ...
end

-- Checks a table argument of a host call (strictly: no functions, coroutines or userdata);
-- nil, or a message. The mod pays one step per table entry checked, in both metering modes:
-- a huge argument costs what it weighs, not one step.
function host.check_argument(value)
  local was_active = M.active
  M.active = false
  local problem, items = unmetered(was_active, pcall(check_export, value, true,
    VALUE_MAX_DEPTH, VALUE_MAX_ITEMS, VALUE_MAX_BYTES, 1))
  if M.active then charge(items) end
  return problem
end

function host.flat_argument(t)
  local was_active = M.active
  M.active = false
  local n = unmetered(was_active, pcall(flat_pairs, t))
  if n == nil then return nil end
  if M.active then charge(n) end
  return n, unpack_(flat, 1, 2 * n)
end
