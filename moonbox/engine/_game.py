"""The game: one world, many mods, one clock, advanced one tick at a time.

:class:`Game` is put together from parts, one module each: loading (``_loading``), the
tick and dispatch (``_dispatch``), handlers and timers (``_timers``), events
(``_events``), values and state (``_state``), exports (``_exports``), failures and
quarantine (``_quarantine``), isolated games (``_isolation``) and snapshots
(``_snapshot``); the dispatcher's
protocol with ``mod_runtime.lua`` is ``_protocol``. This module holds what they share: the
game's configuration and tables.
"""

from __future__ import annotations

import math
from typing import Literal

from .._errors import BindingError, ConfigError
from ..bindings import Permissions, Registry, default_bindings
from ..isolation import DEFAULT_MEMORY_LIMIT_BYTES, DEFAULT_WALL_MARGIN_S, WorkerPool
from ..sandbox import Budget, HostCall, Watchdog
from ..world import World, world_bindings
from ._bindings import EngineServices, engine_bindings
from ._dispatch import Dispatch, TickReport
from ._errors import EngineError
from ._events import Events
from ._exports import Exports
from ._isolation import IsolationGlue
from ._limits import ModLimits
from ._loading import Loading
from ._mod import Event, Mod
from ._quarantine import Quarantines
from ._snapshot import Snapshots
from ._state import State
from ._timers import Timers

__all__ = ["DEFAULT_BUDGET", "DEFAULT_WORKERS", "Game", "Isolation", "TickReport"]

DEFAULT_BUDGET = Budget(steps=200_000, wall_s=0.25, alloc_bytes=4 << 20, max_memory=32 << 20)
"""The budget of each call of a mod unless the host gives another. Steps are the
deterministic bound; the wall budget is generous because a host pause (a garbage
collection of a thousand runtimes) lands inside whichever call is running."""

Isolation = Literal["none", "process"]
"""Where a game runs its mods: ``none``, each in a runtime of the host process; ``process``,
each in a runtime inside a worker process (see ``docs/isolation.md``)."""
DEFAULT_WORKERS = 4
"""Worker processes of an isolated game unless the host says otherwise. Mods beyond this
many share workers; a mod that loses its worker costs the mods pinned to it a rebuild."""


class Game(Loading, Dispatch, Timers, Events, State, Exports, Quarantines,
           IsolationGlue, Snapshots):
    """A world, the mods that script it, and the clock. :meth:`tick` advances it.

    Each mod runs in its own sandbox, built from the game's registry under the mod's
    permissions, with the world bindings (``coreai_world_*``), the engine bindings (``on``,
    ``after``, ``every``, ``cancel``, ``spawn``, ``wait``, ``emit``, ``now``, ``state_get``,
    ``state_set``, ``export``, ``import``) and the registry's others. Every handler call,
    timer, task resume and cross-mod call is one resume under the mod's budget.

    Args:
        world: the world (default: an empty :class:`World` with the default prefabs).
        registry: where the bindings come from; the game registers its own in a scope of
            it, released by :meth:`close` (default: a registry of its own).
        budget: the budget of each call of a mod (:data:`DEFAULT_BUDGET`).
        limits: per-mod limits and quarantine thresholds (:class:`ModLimits`).
        seed: deterministic mode: each mod's ``math.random`` is seeded from this seed and
            the mod's id, and ``pairs`` visits keys in a fixed order (see the sandbox's
            ``deterministic``), so the same seed, mods and inputs replay to the same world.
            ``None``: seeded from the OS, and ``pairs`` in the runtime's own order.
        permissions: the default permissions of a mod (mode ``auto``).
        jit: as :class:`~moonbox.sandbox.Sandbox`.
        isolation: ``none`` (default): each mod in a runtime of this process. ``process``:
            each mod in a runtime inside a worker process, so that what no check inside
            the VM can stop (a crash of the VM, a hang in C, memory the allocator never
            sees) costs a worker, never the host; the mod API and the game's behaviour stay
            the same (see ``docs/engine.md``, "Isolated games").
        workers: an isolated game's worker processes, at most (:data:`DEFAULT_WORKERS`);
            the first mods get one each, later ones share.
        worker_memory_bytes: each worker's OS address-space limit (0: none; default
            1 GiB). Passing it kills the worker; the call that did gets a ``memory`` trip.
        wall_margin_s: how far past a call's wall budget a worker may run before it is
            killed (the call gets a ``time`` trip); default 1 s.
        pool: run the mods in this pool's workers instead of the game's own (the game
            does not close it; its mod ids must be free in it). ``workers`` and
            ``worker_memory_bytes`` are the pool's own then.
        spare_workers: worker processes the game's own pool keeps booted beside its
            workers (default 1), so that a lost worker is replaced without a tick waiting
            ~0.4 s for a process to start; each holds a process's memory (~35 MiB). 0:
            none.
        watchdog: in-process games: each mod's resumes run on a runner thread, so that a
            mod stuck in one VM operation past its wall budget and margin is abandoned
            (quarantined, ``runtime``) instead of waited for (see ``docs/threat-model.md``).

    Raises:
        ConfigError: an unknown ``isolation``, isolation options without
            ``isolation="process"``, ``workers`` below 1, ``spare_workers`` below 0, or
            both a ``pool`` and the settings it already has. (Workers start with the
            first mods: :meth:`load_mod` raises ``HostError`` if one cannot.)
    """

    def __init__(
        self,
        world: World | None = None,
        *,
        registry: Registry | None = None,
        budget: Budget | None = None,
        limits: ModLimits | None = None,
        seed: int | None = None,
        permissions: Permissions | None = None,
        jit: bool = True,
        isolation: Isolation = "none",
        workers: int | None = None,
        worker_memory_bytes: int | None = None,
        wall_margin_s: float | None = None,
        pool: WorkerPool | None = None,
        spare_workers: int | None = None,
        watchdog: bool = False,
    ) -> None:
        if isolation not in ("none", "process"):
            raise ConfigError(f"isolation must be 'none' or 'process', not {isolation!r}")
        if isolation == "none" and (workers is not None or worker_memory_bytes is not None
                                    or wall_margin_s is not None or pool is not None
                                    or spare_workers is not None):
            raise ConfigError("workers, worker_memory_bytes, spare_workers, wall_margin_s and "
                              "pool are options of isolation='process'")
        if pool is not None and (workers is not None or worker_memory_bytes is not None
                                 or spare_workers is not None):
            raise ConfigError("a pool has its own workers, memory limit and spares: give "
                              "either the pool or workers/worker_memory_bytes/spare_workers")
        if workers is not None and (not isinstance(workers, int) or workers < 1):
            raise ConfigError("workers must be an int, 1 or more")
        if spare_workers is not None and (type(spare_workers) is not int or spare_workers < 0):
            raise ConfigError("spare_workers must be an int, 0 or more")
        self.isolation: Isolation = isolation
        self.wall_margin_s = DEFAULT_WALL_MARGIN_S if wall_margin_s is None else wall_margin_s
        if not (isinstance(self.wall_margin_s, (int, float))
                and math.isfinite(self.wall_margin_s) and self.wall_margin_s >= 0):
            raise ConfigError("wall_margin_s must be a finite number of seconds, 0 or more")
        self._own_pool = isolation == "process" and pool is None
        self.pool: WorkerPool | None = pool
        if self._own_pool:
            self.pool = WorkerPool(
                DEFAULT_WORKERS if workers is None else workers,
                memory_limit_bytes=(DEFAULT_MEMORY_LIMIT_BYTES if worker_memory_bytes is None
                                    else worker_memory_bytes),
                spare_workers=1 if spare_workers is None else spare_workers)
        self._stats_read = 0.0
        self.world = world if world is not None else World()
        self._own_registry = registry is None
        self.registry = registry if registry is not None else Registry(default_bindings())
        self.budget = budget or DEFAULT_BUDGET
        self.limits = limits or ModLimits()
        self.seed = seed
        self.permissions = permissions or Permissions()
        self.jit = jit
        if watchdog and isolation != "none":
            raise ConfigError("watchdog is an option of in-process games: an isolated game's "
                              "workers are killed on a wall overrun already")
        # One runner thread for every mod's resumes: a mod stuck in one VM operation past
        # its wall budget and margin is abandoned, not waited for (docs/threat-model.md).
        self._watchdog = Watchdog() if watchdog else None
        self._scope = self.registry.scope("game")
        services = EngineServices(
            mod_for=self._mod_for, add_callback=self._add_callback, cancel=self._cancel,
            ready=self._ready, emit=self._emit_from, tick_count=lambda: self.tick_count,
            state_get=self._state_get, state_set=self._state_set, export=self._export,
            import_=self._import, call_export=self._call_export)
        for binding in (*world_bindings(lambda: self.world), *engine_bindings(services)):
            self._scope.register(binding)
        self._mods: dict[str, Mod] = {}
        self._order: dict[str, int] = {}
        self._subscribers: dict[str, list[Mod]] = {}
        self._outbox: list[Event] = []
        self._chain: list[str] = []
        # (exporter, caller) of each export call in progress, innermost last: what fails in
        # the exporter's run counts toward the caller's quarantine.
        self._exporting: list[tuple[Mod, Mod]] = []
        self._rebuilding: set[str] = set()  # mods being built again in a fresh worker
        self._tick = 0
        self._report = TickReport(0)
        self._ticking = False  # a tick is in progress
        self._closed = False

    @property
    def tick_count(self) -> int:
        """Ticks run so far (the tick in progress, during a tick)."""
        return self._tick

    @property
    def mods(self) -> tuple[Mod, ...]:
        """The loaded mods, in load order (the order they are dispatched in)."""
        return tuple(self._mods.values())

    def mod(self, mod_id: str) -> Mod:
        """The loaded mod ``mod_id``.

        Raises:
            EngineError: ``unknown_mod``.
        """
        mod = self._mods.get(mod_id)
        if mod is None:
            raise EngineError(f"no mod {mod_id!r} is loaded", code="unknown_mod")
        return mod

    def close(self) -> None:
        """Close every mod's sandbox and release the game's bindings; an isolated game
        stops and reaps its worker processes (not those of a pool it was given).
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            for mod in self._mods.values():
                self._release(mod)
            self._scope.close()
            if self._own_registry:
                self.registry.close()
        finally:
            if self._own_pool and self.pool is not None:
                self.pool.close()

    def __enter__(self) -> Game:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise EngineError("the game is closed", code="closed")

    def _mod_for(self, call: HostCall) -> Mod:
        mod_id = getattr(call.mod, "mod_id", None)
        mod = self._mods.get(mod_id) if isinstance(mod_id, str) else None
        if mod is None:
            raise BindingError("is only available to mods loaded in a game [failed]",
                               reason="failed")
        return mod
