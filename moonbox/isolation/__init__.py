"""Process isolation: mods run in worker processes with OS limits, the backstop for what no
in-VM check can stop (a VM bug, a C call that escapes every guard, memory the allocator cannot
see).

An :class:`IsolatedSandbox` answers the calls of :class:`moonbox.sandbox.Sandbox`; host
functions still run in the host, which validates every call; a mod's functions stay in its
worker and reach the host as :class:`RemoteFunction` handles. A :class:`WorkerPool` shares a
bounded number of workers between many mods.
"""

from ._pool import WorkerPool
from ._process import WorkerCrashed, WorkerStats
from ._sandbox import (
    DEFAULT_MEMORY_LIMIT_BYTES,
    DEFAULT_WALL_MARGIN_S,
    IsolatedChunk,
    IsolatedRun,
    IsolatedSandbox,
    RemoteFunction,
    Respawn,
)

__all__ = [
    "DEFAULT_MEMORY_LIMIT_BYTES",
    "DEFAULT_WALL_MARGIN_S",
    "IsolatedChunk",
    "IsolatedRun",
    "IsolatedSandbox",
    "RemoteFunction",
    "Respawn",
    "WorkerCrashed",
    "WorkerPool",
    "WorkerStats",
]
