-- moonbox mods: what a mod calls that its permissions withhold, explained.
--
-- A binding the mod's permissions deny is not in its environment at all: there is no host
-- function under its name. Called anyway, it would fail with "attempt to call global
-- 'state_set' (a nil value)", which says nothing of why. So the host puts, under each
-- withheld name the mod has not defined itself, a plain Lua function that raises the
-- host's explanation: which permission the binding needs and what to write in mod.toml.
-- These functions call nothing of the host: a withheld binding still never runs. They are
-- the mod's own globals, like any other; a mod may replace them.
--
-- Runs in the mod's environment, as the mod's own (metered) code, before its main chunk.

local messages = ...

local env = _G
local error = error
for name, message in pairs(messages) do
  if env[name] == nil then
    env[name] = function()
      error(message, 2)
    end
  end
end
