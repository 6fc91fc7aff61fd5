-- moonbox fuzz: what a mod can reach, walked from the host's side of its runtime.
--
-- Runs with the runtime's real globals (never a mod's environment), after a mod's program,
-- so nothing the mod did to its own globals can fool it. Starting from the mod's environment,
-- it follows every key and value of every table (raw, with `next`), the metatable of every
-- table (`debug.getmetatable`, which ignores `__metatable`) and the metatables of the other
-- types. It does not follow function upvalues: closures the host made hold host values by
-- design, and a mod has no way to read upvalues.
--
-- It reports every host capability it meets (the real `_G`, the real library tables,
-- `debug`, `load`, `string.dump`, the unwrapped versions of wrapped functions, ...), every
-- userdata (a Python object or a host handle) and every cdata other than the numbers a mod can
-- write as literals (`1LL`, `1ULL`, `1i`).
--
-- Arguments: the mod's environment, the names of wrapped functions ("pcall",
-- "coroutine.resume", ...) whose real versions must stay out of reach, and the most entries to
-- visit. Returns a list of findings (strings) and the number of entries visited.

local env, wrapped_names, max_entries = ...
local next, type, tostring, rawget = next, type, tostring, rawget
local d_getmetatable = package.loaded.debug.getmetatable  -- the prelude takes `debug` off _G
local ffi = package.loaded.ffi

local forbidden = {}
local function forbid(value, name)
  if value ~= nil and forbidden[value] == nil then forbidden[value] = name end
end

forbid(_G, "the host's _G")
forbid(package.loaded, "package.loaded")
for _, name in next, {"debug", "io", "os", "package", "jit", "ffi", "string", "table", "math",
                      "bit", "coroutine"} do
  local lib = rawget(_G, name) or package.loaded[name]
  forbid(lib, "the host's " .. name)
end
for _, name in next, {"debug", "io", "os", "package", "jit", "ffi"} do
  local lib = rawget(_G, name) or package.loaded[name]
  if type(lib) == "table" then
    for k, v in next, lib do
      if type(v) == "function" or type(v) == "table" then forbid(v, name .. "." .. tostring(k)) end
    end
  end
end
for _, name in next, {"load", "loadstring", "loadfile", "dofile", "require", "module",
                      "getfenv", "setfenv", "newproxy", "gcinfo", "collectgarbage", "print"} do
  forbid(rawget(_G, name), name)
end
forbid(string.dump, "string.dump")
for name in string.gmatch(wrapped_names, "%S+") do
  local lib, field = string.match(name, "^(%w+)%.(%w+)$")
  if lib then forbid(rawget(_G, lib)[field], "the unwrapped " .. name)
  else forbid(rawget(_G, name), "the unwrapped " .. name) end
end

local LITERAL_CDATA = {["ctype<int64_t>"] = true, ["ctype<uint64_t>"] = true,
                       ["ctype<complex>"] = true}

local found, seen, queue, paths = {}, {}, {}, {}
local head, tail, visited = 1, 0, 0

local function label(k)
  if type(k) == "string" then return #k <= 40 and k or k:sub(1, 37) .. "..." end
  return "[" .. type(k) .. "]"
end

-- A path one step longer, up to ~200 characters: past that it ends in "..." and stays as it
-- is (a chain of a hundred thousand metatables made paths whose building was quadratic).
local function extend(path, step)
  if #path < 200 then return path .. step end
  if path:sub(-3) == "..." then return path end
  return path .. "..."
end

local function visit(value, path)
  if value == nil then return end
  local name = forbidden[value]
  if name then found[#found + 1] = path .. " is " .. name end
  local kind = type(value)
  if kind == "table" then
    if not seen[value] then
      seen[value] = true
      tail = tail + 1
      queue[tail] = value
      paths[value] = path
    end
  elseif kind == "userdata" then
    found[#found + 1] = path .. " is a userdata (a host object)"
  elseif kind == "cdata" then
    local ct = ffi and tostring(ffi.typeof(value)) or "cdata"
    if not LITERAL_CDATA[ct] then found[#found + 1] = path .. " is a cdata " .. ct end
  end
end

visit(env, "_G")
for _, probe in next, {"", 0, true, print, coroutine.create(print)} do
  visit(d_getmetatable(probe), "<metatable of a " .. type(probe) .. ">")
end

while head <= tail and visited < max_entries and #found < 20 do
  local t = queue[head]
  local path = paths[t]
  queue[head], paths[t] = nil, nil
  head = head + 1
  local mt = d_getmetatable(t)
  if mt ~= nil then visit(mt, extend(path, "<metatable>")) end
  -- A for loop over `next` walks the table by slot; `next(t, k)` called by hand re-finds each
  -- key, along its whole chain when a table's number keys share one (quadratic).
  for k, v in next, t do
    if visited >= max_entries then break end
    visited = visited + 1
    visit(k, extend(path, "<key>"))
    visit(v, extend(path, "." .. label(k)))
  end
end

return found, visited
