"""moonbox: run untrusted Lua mods inside a game server, under budgets that hold with the JIT on."""

from ._errors import (
    BindingError,
    BudgetExceeded,
    ConfigError,
    Frame,
    HostError,
    MoonboxError,
    SandboxClosed,
    ScriptError,
    SourceTooLarge,
)
from .bindings import Binding, ModApi, Permissions, Registry, default_bindings
from .sandbox import Budget, Chunk, HostCall, Outcome, Run, Sandbox, Stats, ValueLimits

__version__ = "0.1.0"

__all__ = [
    "Binding",
    "BindingError",
    "Budget",
    "BudgetExceeded",
    "Chunk",
    "ConfigError",
    "Frame",
    "HostCall",
    "HostError",
    "ModApi",
    "MoonboxError",
    "Outcome",
    "Permissions",
    "Registry",
    "Run",
    "Sandbox",
    "SandboxClosed",
    "ScriptError",
    "SourceTooLarge",
    "Stats",
    "ValueLimits",
    "default_bindings",
]
