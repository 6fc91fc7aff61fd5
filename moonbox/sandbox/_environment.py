"""What a mod's environment holds: an allowlist kept as data, one reason per entry.

Everything not listed here is absent. :data:`DENIED` records why the dangerous parts of the
standard library are missing, so a reviewer can check both lists side by side; a test pins
that the environment a sandbox builds holds exactly :data:`ALLOWED_GLOBALS` and the library
fields of :data:`ALLOWED_LIBRARIES`, plus the host functions the sandbox was given.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["ALLOWED_GLOBALS", "ALLOWED_LIBRARIES", "DENIED"]

ALLOWED_GLOBALS: Mapping[str, str] = MappingProxyType({
    "assert": "raises on a false value; no side effects",
    "error": "wrapped: places the error as LuaJIT does; budget trips are sticky whatever it "
    "raises",
    "ipairs": "iterates a table's array part; each iteration passes a loop check",
    "next": "raw traversal of one table",
    "pairs": "traversal of one table; each iteration passes a loop check",
    "pcall": "wrapped: a budget trip is re-raised, never returned to the mod",
    "xpcall": "wrapped: a budget trip is re-raised, never returned to the mod",
    "print": "wrapped: writes one line to the run's reports (needs the report binding)",
    "rawequal": "raw comparison; no metamethods",
    "rawget": "raw read of one table",
    "rawset": "raw write of one table",
    "select": "picks varargs",
    "setmetatable": "metatables on the mod's own tables; there is no __gc for tables",
    "getmetatable": "reads a table's metatable; the string metatable is hidden",
    "tonumber": "parses a number; charged for the string",
    "tostring": "formats a value; a __tostring runs as the mod's own code, metered",
    "type": "names a value's type",
    "unpack": "spreads a table into values",
    "collectgarbage": "wrapped: only collectgarbage('count'), refused in deterministic mode "
    "(the heap's size does not replay); no GC tuning or stop",
    "_VERSION": "a constant string",
})

ALLOWED_LIBRARIES: Mapping[str, tuple[str, ...]] = MappingProxyType({
    # A fresh copy of each table per mod: a mod can change its own copy only.
    "string": (
        "byte", "char", "find", "format", "gmatch", "gsub", "len", "lower", "match", "rep",
        "reverse", "sub", "upper",
    ),
    # foreach, foreachi and getn: kept by LuaJIT from Lua 5.0, still used by old code.
    "table": (
        "concat", "foreach", "foreachi", "getn", "insert", "maxn", "move", "remove", "sort",
    ),
    "math": (
        "abs", "acos", "asin", "atan", "atan2", "ceil", "cos", "cosh", "deg", "exp", "floor",
        "fmod", "frexp", "huge", "ldexp", "log", "log10", "max", "min", "modf", "pi", "pow",
        "rad", "random", "randomseed", "sin", "sinh", "sqrt", "tan", "tanh",
    ),
    "bit": (
        "arshift", "band", "bnot", "bor", "bswap", "bxor", "lshift", "rol", "ror", "rshift",
        "tobit", "tohex",
    ),
    "coroutine": ("create", "isyieldable", "resume", "running", "status", "wrap", "yield"),
})  # fmt: skip

DENIED: Mapping[str, str] = MappingProxyType({
    "debug": "reads and writes any local, upvalue, metatable and hook: escapes every limit",
    "io": "files and processes of the host",
    "os": "clock, environment, files and exit of the host process",
    "package": "module loading from the host file system and C libraries",
    "require": "loads modules from the host file system and C libraries",
    "load": "compiles code that would not be instrumented; bytecode would run unchecked",
    "loadstring": "compiles code that would not be instrumented",
    "loadfile": "reads host files and compiles them uninstrumented",
    "dofile": "reads and runs host files",
    "string.dump": "produces bytecode; also reachable through the string metatable, which "
    "is pointed at the mod's own string table",
    "getfenv": "reaches the environment of any function, including the host's",
    "setfenv": "replaces the environment of any function, including the host's",
    "newproxy": "userdata with __gc: finalizers that run outside any budget",
    "gcinfo": "GC internals; collectgarbage('count') is offered instead",
    "jit": "controls the compiler and exposes jit.util (bytecode and machine code)",
    "ffi": "raw memory and C calls: complete escape",
    "python": "lupa's bridge to the Python process: complete escape",
    "module": "writes package tables and globals of the host",
})
