"""The hardened LuaJIT runtime: the only part of moonbox that imports lupa."""

from ._budget import Budget, parse_size
from ._dispatch import FunctionHandle, HostCall, HostFunction
from ._environment import ALLOWED_GLOBALS, ALLOWED_LIBRARIES, DENIED
from ._marshal import ValueLimits
from ._outcome import Outcome, Stats, Status
from ._run import Chunk, Run
from ._sandbox import Sandbox
from ._tokenizer import KEYWORDS as LUA_KEYWORDS
from ._watchdog import STALL_MARGIN_S, Stall, Watchdog

__all__ = [
    "ALLOWED_GLOBALS",
    "ALLOWED_LIBRARIES",
    "Budget",
    "Chunk",
    "DENIED",
    "FunctionHandle",
    "HostCall",
    "HostFunction",
    "LUA_KEYWORDS",
    "Outcome",
    "Run",
    "STALL_MARGIN_S",
    "Sandbox",
    "Stall",
    "Stats",
    "Status",
    "ValueLimits",
    "Watchdog",
    "parse_size",
]
