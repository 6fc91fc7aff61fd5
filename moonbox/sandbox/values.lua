-- Part of the moonbox prelude (prelude.lua): the check of values before they cross to
-- Python, for host-call arguments and for what a run returns or yields.

-------------------------------------------------------------------------------------------
-- Values that cross to Python: plain data only, checked with raw access.
-------------------------------------------------------------------------------------------
local DATA_TYPES = { ["nil"] = true, boolean = true, number = true, string = true }

-- The sandbox's value limits (ValueLimits), for everything that crosses.
local VALUE_MAX_DEPTH = config.value_max_depth
local VALUE_MAX_ITEMS = config.value_max_items
local VALUE_MAX_BYTES = config.value_max_bytes

-- Every walk of a mod's table here is `for k, v in next, t`, which LuaJIT runs by slot
-- index: linear in the table's size. A walk by `next(t, k)` re-finds each key along its hash
-- chain, and a mod can make every number key share one chain (LuaJIT's number hash is not
-- seeded): quadratic, inside one library call. (DESIGN.md §2, fact 12.)

-- Checks a value tree before Python copies it: nil or an error message, and the number of
-- entries walked. strict: functions, coroutines and userdata are errors; otherwise Python
-- shows them as placeholders. depth0 is the depth of `value` itself (0 for the wrapper
-- table of returned values). Never calls a metamethod.
local function check_export(value, strict, max_depth, max_items, max_bytes, depth0)
  local seen = {}
  local items, bytes = 0, 0
  local function too_large(path)
    return s_format("%s: strings too large (more than %d bytes in all)", path, max_bytes)
  end
  local function walk(v, depth, path)
    local tv = type(v)
    if tv == "string" then
      bytes = bytes + #v
      if bytes > max_bytes then return too_large(path) end
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
    for k, x in next, v do
      items = items + 1
      if items > max_items then
        return s_format("%s: too large (more than %d items in all)", path, max_items)
      end
      local tk = type(k)
      if tk == "string" then
        bytes = bytes + #k  -- keys count as values do, whatever comes after them
        if bytes > max_bytes then return too_large(path) end
      elseif tk ~= "number" then
        return s_format("%s: a %s key cannot cross to the host (keys are strings or numbers)",
          path, tk)
      elseif k ~= k then
        return s_format("%s: a NaN key cannot cross to the host", path)
      end
      local err = walk(x, depth + 1, path)
      if err then return err end
    end
    seen[v] = nil
    return nil
  end
  return walk(value, depth0, "value"), items
end

-- The pairs of a checked table for the host to copy, never by its own traversal (lua_next
-- re-finds each key along its hash chain, see above): their count times two, then k1, v1,
-- k2, v2, ... as return values when there are at most PAIRS_SLICE of them; else the host
-- takes them in slices of a fresh array with pairs_slice, the last of which lets it go.
local t_new = require("table.new")
local PAIRS_SLICE = config.pairs_slice
local pending = nil
local function pairs_array(t)
  local n = 0
  for _ in next, t do n = n + 2 end
  local out = t_new(n, 0)
  local i = 0
  for k, x in next, t do
    out[i + 1], out[i + 2] = k, x
    i = i + 2
  end
  return out, i
end

-- Host work, bounded by the value limits (the value was checked): the meter stands aside,
-- as for the check itself, and a hook armed for every instruction (meter.lua) is put back
-- to its count while this runs.
function host.pairs_of(t)
  local was_active, was_pending = M.active, M.hook_pending
  M.active = false
  if was_pending then sethook(hook, "", HOOK_INSTRUCTIONS) end
  local ok, out, i = pcall(pairs_array, t)
  M.active = was_active
  if was_pending then sethook(pending_hook, "", 1) end
  if not ok then error(out, 0) end
  if i <= PAIRS_SLICE then return i, unpack_(out, 1, i) end
  pending = out
  return i
end

function host.pairs_slice(i, j, last)
  local out = pending
  if last then pending = nil end
  return unpack_(out, i, j)
end
