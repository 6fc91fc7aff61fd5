-- moonbox prelude: host-side Lua that runs once in every sandbox runtime, before any mod.
--
-- It owns the meter (the step cell, the slow path, the count hook of jit=False mode), builds
-- each mod environment from the allowlist it is given, loads mod chunks in text mode, runs
-- them in coroutines under a budget, and checks values before they cross to Python.
--
-- Mod code can never reach anything defined here: every name is a local of the one chunk,
-- the environment a mod gets is a fresh table, and the library tables in it are copies.
--
-- This file is the prelude's head. Its parts follow it, one file per job, in the order of
-- PRELUDE_PARTS in _runtime.py, and the host joins them into this one chunk before it
-- compiles it: each part sees the locals of the parts before it, so the state they share
-- (the meter's above all) stays in locals and upvalues, as fast as the JIT makes them, and
-- never in a table. Line numbers in the prelude's messages count through the joined parts.

local config, dispatch, patterns_code = ...

-- Everything the prelude uses is captured now, before any mod runs.
local type, next, select, error, tostring, tonumber = type, next, select, error, tostring, tonumber
local setmetatable, getmetatable, pcall, xpcall, load = setmetatable, getmetatable, pcall, xpcall, load
local co_create, co_resume, co_status = coroutine.create, coroutine.resume, coroutine.status
local co_yield, co_running = coroutine.yield, coroutine.running
local getinfo, sethook = debug.getinfo, debug.sethook
local s_sub, s_format, s_byte, s_find = string.sub, string.format, string.byte, string.find
local floor, huge = math.floor, math.huge
local collectgarbage = collectgarbage
local concat = table.concat
local ffi = require("ffi")
local jit = require("jit")

local PRELUDE_SOURCE = getinfo(1, "S").source

-- The host's handle on this runtime: the parts add its entry points; the last returns it.
local host = {}
