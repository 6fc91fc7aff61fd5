-- moonbox mods: require() for a mod package, confined to the mod's own folder.
--
-- Runs in the mod's own environment, as the mod's own (metered) code, before its modules
-- are defined. The host then runs each Lua file of the package as its own chunk, named
-- `@mods/<id>/<path>`, wrapped so that running it only hands this file the file's body as
-- a function: `<define>("<path>", function(...) <the file> end)`. Nothing else is ever
-- read: a name that is not one of those files is an error, whatever it points at.
--
-- require(name) runs the body at most once per load, on first use, inside the caller's
-- call (so under the caller's budget), and caches what it returns. A module that requires
-- itself, directly or through others, is a cycle and an error naming the chain.

local define_name, refused = ...

local env = _G
-- How many times the engine started its dispatcher: a budget trip ends one and unwinds
-- past the cleanup below, so marks made under an earlier start are stale. (Outside a game
-- there is no dispatcher: always 0.)
local dispatcher_starts = env.engine_dispatcher_starts or function() return 0 end
env.engine_dispatcher_starts = nil  -- before the files below are defined: none sees it
local type, error, tostring, pcall = type, error, tostring, pcall
local s_find, s_gsub, s_sub = string.find, string.gsub, string.sub
local concat = table.concat

local bodies = {}    -- path -> the file's body, a function
local loaded = {}    -- path -> what the body returned (true for nothing)
local loading = {}   -- path -> true while its body runs
local chain = {}     -- the paths being loaded, outermost first
local marked = 0     -- the dispatcher start the marks above belong to

-- The host's definer: removed from the environment once every file is defined.
env[define_name] = function(path, body)
  bodies[path] = body
end

-- "lib.util" and "lib/util.lua" both name lib/util.lua.
local function to_path(name)
  if type(name) ~= "string" or name == "" or #name > 256 then
    error("require: the name must be a non-empty string, such as \"lib.util\"", 3)
  end
  if s_find(name, "..", 1, true) then
    error("require: '" .. name .. "' leaves the mod's folder; require the mod's own files only", 3)
  end
  if s_find(name, "^[/\\]") or s_find(name, "^%a:") then
    error("require: '" .. name .. "' is an absolute path; require the mod's own files only", 3)
  end
  local path
  if s_sub(name, -4) == ".lua" then
    path = name
  elseif s_find(name, "/", 1, true) then
    path = name .. ".lua"
  else
    path = (s_gsub(name, "%.", "/")) .. ".lua"
  end
  if s_find("/" .. path, "/%./") or s_find(path, "//", 1, true) or s_find(path, "\\", 1, true) then
    error("require: '" .. name .. "' is not a file name of this mod", 3)
  end
  return path
end

function env.require(name)
  local path = to_path(name)
  local value = loaded[path]
  if value ~= nil then return value end
  local start = dispatcher_starts()
  if start ~= marked then
    -- A trip ended the calls that made these marks: none of them is loading any more.
    loading, chain, marked = {}, {}, start
  end
  if loading[path] then
    error("require: a cycle: " .. concat(chain, " -> ") .. " -> " .. path, 2)
  end
  local body = bodies[path]
  if body == nil then
    local why = refused[path]
    if why ~= nil then
      error("require: '" .. name .. "' (" .. path .. ") is " .. why, 2)
    end
    error("require: no file '" .. path .. "' in this mod's folder", 2)
  end
  loading[path] = true
  chain[#chain + 1] = path
  -- The marks are cleared on every way out, so a module that failed once is not a cycle
  -- the next time. The error goes on unchanged: it already names the module's own file
  -- and line. (A budget trip never comes back from this pcall: the sandbox re-raises it.)
  local ok, result = pcall(body, name)
  chain[#chain] = nil
  loading[path] = nil
  if not ok then error(result, 0) end
  if result == nil then result = true end
  loaded[path] = result
  return result
end
