-- Part of the moonbox prelude (prelude.lua): what makes a mod's run replay, the seeded
-- math.random and, in deterministic mode, the ordered pairs.

-------------------------------------------------------------------------------------------
-- Replay: math.random starts from the sandbox's seed; in deterministic mode pairs visits
-- keys in a fixed order (the order of next follows the runtime's string hash seed).
-------------------------------------------------------------------------------------------
math.randomseed(config.seed)

local KEY_RANK = { number = 1, string = 2, boolean = 3 }

local function key_less(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return (KEY_RANK[ta] or 4) < (KEY_RANK[tb] or 4) or
    (KEY_RANK[ta] == nil and KEY_RANK[tb] == nil and ta < tb) end
  if ta == "number" or ta == "string" then return a < b end
  if ta == "boolean" then return b and not a end
  return object_id(a) < object_id(b)
end

-- Keys are sorted as table.sort sorts (charged_sort): a mod can choose number keys whose
-- order makes a quicksort quadratic, and one native call of any length would then run
-- unmetered for seconds. The keys are distinct and totally ordered: every correct sort
-- gives the same order.
-- Numbers and strings are sorted apart, each by the runtime's own comparison (no Lua
-- comparator to call per comparison: several times faster), then put in KEY_RANK order:
-- the same order key_less gives.
local function ordered_pairs(...)
  local t = ...
  if type(t) ~= "table" then return pairs(...) end  -- the native's own error
  local nums, strs, n_nums, n_strs = {}, {}, 0, 0
  local others, has_false, has_true = nil, false, false
  for k in next, t do
    local tk = type(k)
    if tk == "number" then
      n_nums = n_nums + 1
      nums[n_nums] = k
    elseif tk == "string" then
      n_strs = n_strs + 1
      strs[n_strs] = k
    elseif k == true then
      has_true = true
    elseif k == false then
      has_false = true
    else
      others = others or {}
      others[#others + 1] = k
    end
  end
  local n = n_nums + n_strs + (has_false and 1 or 0) + (has_true and 1 or 0)
    + (others and #others or 0)
  charge_work(n)
  charged_sort(nums, n_nums, nil, "number")
  charged_sort(strs, n_strs, nil, "string")
  local keys = nums
  for i = 1, n_strs do keys[n_nums + i] = strs[i] end
  n = n_nums + n_strs
  if has_false then n = n + 1 keys[n] = false end
  if has_true then n = n + 1 keys[n] = true end
  if others then
    charged_sort(others, #others, key_less)
    for i = 1, #others do keys[n + i] = others[i] end
    n = n + #others
  end
  local i = 0
  return function()
    while i < n do
      i = i + 1
      local k = keys[i]
      local v = rawget_(t, k)
      if v ~= nil then return k, v end  -- a key removed during the traversal is skipped
    end
    return nil
  end, t, nil
end

if config.deterministic then wrapped.pairs = ordered_pairs end

-------------------------------------------------------------------------------------------
-- table.foreach and table.foreachi, which LuaJIT keeps from Lua 5.0: f(k, v) for each
-- entry until f returns a value. foreach visits the entries in the order pairs does (in
-- deterministic mode, the fixed one). Charged one step per 64 entries as they go, on top
-- of what f costs, since f may be a library function that no check meters. Like LuaJIT's own
-- (functions written in Lua, with no line information), they place an error raised at
-- their level as "[builtin:foreach]:0:".
-------------------------------------------------------------------------------------------
do
  local t_foreach, t_foreachi = table.foreach, table.foreachi
  local traverse = config.deterministic and ordered_pairs or function(t) return next, t, nil end

  local function foreach(...)
    local t, f = ...
    if type(t) ~= "table" or type(f) ~= "function" then return t_foreach(...) end
    local count = 0
    for k, v in traverse(t) do
      count = count + 1
      if count == WORK_PER_STEP then
        count = 0
        charge(1)
      end
      local r = f(k, v)
      if r ~= nil then return r end
    end
  end

  local function foreachi(...)
    local t, f = ...
    if type(t) ~= "table" or type(f) ~= "function" then return t_foreachi(...) end
    local count = 0
    for i = 1, #t do
      count = count + 1
      if count == WORK_PER_STEP then
        count = 0
        charge(1)
      end
      local r = f(i, t[i])
      if r ~= nil then return r end
    end
  end

  wrapped_lib.table.foreach, wrapped_lib.table.foreachi = foreach, foreachi
  library_frames[foreach] = "[builtin:foreach]:0: "
  library_frames[foreachi] = "[builtin:foreachi]:0: "
end

-------------------------------------------------------------------------------------------
-- Last of the library functions: which builtin each stands for (tostring shows its text),
-- and those that call back into Lua from their own frame (levels count them as one).
-------------------------------------------------------------------------------------------
for name, fn in next, wrapped do real_of[fn] = real._G[name] end
for lib, fns in next, wrapped_lib do
  for name, fn in next, fns do real_of[fn] = real[lib][name] end
end
library_frames[wrapped.pcall] = ""
library_frames[wrapped.xpcall] = ""
library_frames[wrapped_lib.string.gsub] = ""
