---@meta
-- moonbox mods: the functions a mod package gets from the engine library and the mod host,
-- as editor annotations (LuaLS). `moonbox stubs` and `moonbox dev --init` put them after
-- the bindings the host renders from its registry; nothing here runs.
--
-- The engine library (moonbox/engine/mod_runtime.lua) wraps some raw engine bindings in
-- these Lua functions and offers them only when the mod's permissions grant the binding:
-- a block that starts with "-- needs: NAME" is left out of the stubs when NAME is denied
-- (engine_ready: the engine library itself, in every game).
-- Unlike a binding, none of these takes its arguments as one table.

-- needs: on
---Call fn for each event of that name, from the next tick on: fn(data, event, from), where
---from is the id of the mod that emitted it (nil: the game). For "tick", fn(tick). The
---engine sends "tick", "world:refused", "world:spawned" and "world:destroyed".
---@param event string # the event's name (1-64 characters)
---@param fn fun(data: any, event: string, from: string?) # the handler
---@return integer # an id for cancel
function on(event, fn) end

-- needs: after
---Call fn(tick) once, that many ticks from now.
---@param ticks integer # 1 to 1000000
---@param fn fun(tick: integer)
---@return integer # an id for cancel
function after(ticks, fn) end

-- needs: after
---Run fn as a task from the next tick on; it may wait(). Its failures name it `spawn`.
---@param fn fun()
---@return integer # an id for cancel
function spawn(fn) end

-- needs: every
---Call fn(tick) every that many ticks, the first time that many ticks from now.
---@param ticks integer # 1 to 1000000
---@param fn fun(tick: integer)
---@return integer # an id for cancel
function every(ticks, fn) end

-- needs: cancel
---Stop a handler, timer or task by the id on, after, every or spawn returned.
---@param id integer
---@return boolean # whether it was registered
function cancel(id) end

-- needs: engine_ready
---Pause the handler, timer or task that calls it; it goes on that many ticks later. Not in
---the main chunk, not in an exported function, and not in a coroutine the mod made (yield
---from that one instead).
---@param ticks? integer # 1 to 1000000 (default 1)
function wait(ticks) end

-- needs: export
---Offer data (each importer gets a copy) or a function to other mods under a name.
---@param name string # 1-64 characters
---@param value any # plain data, or a function(arg) returning plain data
function export(name, value) end

-- needs: import
---Another mod's export: a copy of its data, or a function that calls its exported
---function (the argument and the result cross by copy, on the caller's time).
---@param mod string # the other mod's id
---@param name string # what it exported
---@return any
function import(mod, name) end

---Run a Lua file of this mod's own folder the first time, and return what it returned:
---require("lib.util") and require("lib/util.lua") both name lib/util.lua.
---@param name string
---@return any
function require(name) end
