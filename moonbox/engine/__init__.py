"""The game-scripting engine: mods, handlers, timers, events, ticks and quarantine.

A :class:`Game` owns a :class:`~moonbox.world.World`, the mods and the clock;
:meth:`Game.tick` advances it. Each mod runs in its own sandbox; every handler call, timer,
task resume and cross-mod call is one resume under the mod's budget, and failures are
attributed to (mod, handler, chunk:line). :meth:`Game.snapshot` and :meth:`Game.restore`
take and put back a whole game at a tick boundary. See ``docs/engine.md``.
"""

from ._bindings import ENGINE_BINDINGS, engine_bindings
from ._errors import EngineError
from ._game import DEFAULT_BUDGET, DEFAULT_WORKERS, Game, Isolation, TickReport
from ._limits import ModLimits
from ._mod import Callback, Event, Failure, Mod, ModStats, Quarantine, Task
from ._protocol import RUNTIME_CHUNK
from ._snapshot import GameSnapshot, Lost, ModSnapshot, RestoreReport

__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_WORKERS",
    "ENGINE_BINDINGS",
    "RUNTIME_CHUNK",
    "Callback",
    "EngineError",
    "Event",
    "Failure",
    "Game",
    "GameSnapshot",
    "Isolation",
    "Lost",
    "Mod",
    "ModLimits",
    "ModSnapshot",
    "ModStats",
    "Quarantine",
    "RestoreReport",
    "Task",
    "TickReport",
    "engine_bindings",
]
