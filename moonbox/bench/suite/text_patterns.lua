-- Strings: Lua patterns over lines of generated log text: gmatch over lines and fields,
-- find with captures, gsub with a replacement table and with a function, format.
local seed = 21
local function rand(n)
  seed = (seed * 16807) % 2147483647
  return seed % n
end

local LEVELS = { "INFO", "WARN", "ERROR", "DEBUG" }
local USERS = { "ada", "bob", "cy", "dee", "eve" }

local function log(lines)
  local out = {}
  for i = 1, lines do
    out[i] = string.format("%02d:%02d:%02d [%s] user=%s took=%dms path=/api/v%d/items/%d",
      rand(24), rand(60), rand(60), LEVELS[rand(4) + 1], USERS[rand(5) + 1], rand(900),
      rand(3) + 1, rand(10000))
  end
  return table.concat(out, "\n")
end

local total = 0
for _ = 1, 8 do
  local text = log(4000)
  local errors, took, users = 0, 0, {}
  for line in text:gmatch("[^\n]+") do
    local level, user, ms = line:match("%[(%u+)%] user=(%a+) took=(%d+)ms")
    if level == "ERROR" then errors = errors + 1 end
    took = took + tonumber(ms)
    users[user] = (users[user] or 0) + 1
    local h = line:find(":", 1, true)
    total = total + h
  end
  local masked = text:gsub("user=(%a+)", { ada = "user=A", bob = "user=B" })
  local versions = 0
  local renamed = masked:gsub("/v(%d)/", function(v) versions = versions + v return "/" end)
  total = total + errors + took + #renamed + versions + users.ada
end
assert(total == 16298960, total)
return total
