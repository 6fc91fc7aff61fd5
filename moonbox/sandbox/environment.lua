-- Part of the moonbox prelude (prelude.lua): the environment of a mod, built from the
-- allowlist. The parts after this one fill `wrapped` and `wrapped_lib` with the protected
-- calls and guarded library functions a mod gets in place of the real ones.

-------------------------------------------------------------------------------------------
-- Environments.
-------------------------------------------------------------------------------------------
local real = {
  _G = _G, string = string, table = table, math = math, bit = bit, coroutine = coroutine,
}

local wrapped = {}
local wrapped_lib = { coroutine = {}, string = {}, table = {} }

local string_mt = getmetatable("")

-- Functions that are one stack level each where a mod sees them, however many frames of
-- the prelude and C calls they run through (protected.lua counts levels with it): the
-- library functions that call back into Lua, each by the frame that stands for it while
-- it does (the one it tail-calls, when it hands its frame on). The value is the position
-- LuaJIT gives that level: "" for a C function (LuaJIT's own Lua-written builtins show
-- "[builtin:name]:0: ").
local library_frames = {}

-- The LuaJIT builtin each function of the prelude given to a mod stands for: tostring
-- shows the builtin's own text for it ("function: builtin#29"), which holds no address;
-- and that text for the functions made per call (a coroutine.wrap function, a gmatch
-- iterator).
local real_of = {}
local builtin_text = setmetatable({}, { __mode = "k" })
local BUILTIN_PREFIX = "function: builtin#"

-- print's text for one value (guards.lua).
local print_text

-- Parses the allowlist the host sends as text: "name name lib:field,field ...".
local function parse_spec(spec)
  local globals = {}
  for word in string.gmatch(spec, "%S+") do
    local lib, fields = string.match(word, "^([%w_]+):(.*)$")
    if lib then
      local list = {}
      for f in string.gmatch(fields, "[^,]+") do list[#list + 1] = f end
      globals[lib] = list
    else
      globals[word] = true
    end
  end
  return globals
end

-- Builds a fresh environment: `globals` maps global names to true (take the real or
-- wrapped function) or to a list of field names (a fresh copy of that library table).
local function make_env(globals, host_functions)
  local env = {}
  for name, fields in next, globals do
    if fields == true then
      local v = wrapped[name]
      if v == nil then v = real._G[name] end
      env[name] = v
    else
      local lib, src, wl = {}, real[name] or real._G[name], wrapped_lib[name] or {}
      for i = 1, #fields do
        local f = fields[i]
        local v = wl[f]
        if v == nil then v = src[f] end
        lib[f] = v
      end
      env[name] = lib
    end
  end
  for name, fn in next, host_functions do env[name] = fn end
  if globals.print and host_functions.report then
    -- print() writes to the run's reports, one line per call, like report().
    local report, tostring_ = host_functions.report, env.tostring or tostring
    env.print = function(...)
      local n = select("#", ...)
      local parts = {}
      for i = 1, n do parts[i] = print_text(tostring_, (select(i, ...))) end
      return report(concat(parts, "\t"))
    end
    library_frames[env.print] = ""
    real_of[env.print] = real._G.print
  else
    env.print = nil
  end
  env._G = env
  if env.string then
    -- Method calls on strings ("x"):rep(3) use the mod's own string table, never the real one
    -- (which still holds string.dump); the metatable itself is hidden.
    string_mt.__index = env.string
    string_mt.__metatable = false
  end
  return env
end

function host.make_env(spec, host_functions)
  return make_env(parse_spec(spec), host_functions)
end

-- Both run once per runtime: compiling their loops would cost more than it saves.
jit.off(parse_spec)
jit.off(make_env)
