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
