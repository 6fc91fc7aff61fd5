"""The game: one world, many mods, one clock, advanced one tick at a time."""

from __future__ import annotations

import hashlib
import heapq
import math
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

import msgpack

from .._errors import BindingError, ConfigError, MoonboxError, ScriptError
from ..bindings import Permissions, Registry, default_bindings
from ..isolation import (
    DEFAULT_MEMORY_LIMIT_BYTES,
    DEFAULT_WALL_MARGIN_S,
    IsolatedSandbox,
    WorkerCrashed,
    WorkerPool,
    WorkerStats,
)
from ..sandbox import Budget, FunctionHandle, HostCall, Outcome, Sandbox, Watchdog
from ..world import CommandResult, World, world_bindings
from ._bindings import EngineServices, engine_bindings
from ._errors import EngineError
from ._limits import ModLimits
from ._mod import Callback, CallbackKind, Event, Failure, Mod, Quarantine, Task

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
WORKER_STATS_INTERVAL_S = 1.0
"""How often, at most, a ticking isolated game reads its workers' memory and CPU."""
# The most wall time a caller's resume may have excluded for building a mod again in a
# fresh worker before calling it (starting a worker takes ~0.4 s).
REBUILD_EXCLUDE_S = 30.0
# A failed callback's message, at most (the engine's Lua side cuts it at the same length).
MAX_MESSAGE_CHARS = 4096

RUNTIME_CHUNK = "@moonbox/engine/mod_runtime.lua"
_RUNTIME = resources.files("moonbox.engine").joinpath("mod_runtime.lua").read_text("utf-8")

# The dispatcher's protocol (see mod_runtime.lua): resumed with (what, a, b, c), where
# what > 0 calls callback `what`, what < 0 resumes task -what, a string calls that export
# and 0 forgets task a; it yields (code, x, y).
_DONE, _WAIT, _FAILED, _MISSING = 0, 1, 2, 3
_DONE_ONLY = ()  # what the dispatcher yields when a handler returned normally
_DONE_PLAIN = (_DONE, None, None)  # the same, as the codes read it
MAX_WAIT_TICKS = 1_000_000  # wait(ticks): 1..MAX_WAIT_TICKS
# Results whose entities become world:spawned / world:destroyed events.
_ANNOUNCED = frozenset({"spawn", "spawn_batch", "grid", "destroy", "transaction"})

_MOD_ID = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
_POSITION = re.compile(r"^(.*?):(\d+): (.*)$", re.DOTALL)
RESERVED_EVENTS = ("tick",)
RESERVED_PREFIXES = ("world:", "game:")


@dataclass
class TickReport:
    """What happened during one tick.

    Attributes:
        tick: the tick's number (the first tick is 1).
        calls: budgeted calls made (handlers, timers, task resumes, export calls).
        failures: calls that failed, attributed (mod, handler, chunk:line).
        results: the world commands applied or refused at the tick boundary.
        events: events the mods emitted this tick (delivered to mods on the next).
        quarantined: mods quarantined during the tick.
        reports: ``(mod, line)`` for each ``report()``/``print()`` line, those reported
            since the previous tick first (a main chunk's, as its mod loaded).
        restored: mods built again in a fresh worker during the tick, after their worker
            was lost (isolated games only).
        reports_dropped: mod id -> lines dropped past the report caps of one call (at
            most 1,000 lines and 256 KiB per call; the call's last line then says so).
    """

    tick: int
    calls: int = 0
    failures: list[Failure] = field(default_factory=list)
    results: list[CommandResult] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    reports: list[tuple[str, str]] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    reports_dropped: dict[str, int] = field(default_factory=dict)


def _error_from_message(message: Any, chunk: str) -> ScriptError:
    # The engine's Lua side sends a bounded string; anything else is shown, never copied.
    if isinstance(message, str):
        text = message if len(message) <= MAX_MESSAGE_CHARS else message[:MAX_MESSAGE_CHARS] + "..."
    else:
        text = f"(error object is a {type(message).__name__} value)"
    m = _POSITION.match(text)
    if m and not m.group(1).startswith("["):
        where = m.group(1)
        return ScriptError(m.group(3), chunk=where if where[:1] in "@=" else "@" + where,
                           line=int(m.group(2)))
    return ScriptError(text, chunk=chunk)


def _task_id(value: Any) -> int | None:
    if type(value) is float and value.is_integer():
        value = int(value)
    return value if type(value) is int and value >= 1 else None


def _checked_yield(values: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """What the dispatcher yielded, if it fits its protocol (a wait's ticks clamped to
    1..MAX_WAIT_TICKS, as ints); ``None`` if it does not."""
    if not values:
        return _DONE_PLAIN
    code = values[0]
    if type(code) is not int:
        return None
    if code == _DONE or code == _MISSING:
        return values
    if code != _WAIT or len(values) < 3:
        return None
    task_id, ticks = _task_id(values[1]), values[2]
    if task_id is None or type(ticks) not in (int, float) or not math.isfinite(ticks):
        return None
    return (_WAIT, task_id, int(min(max(ticks, 1), MAX_WAIT_TICKS)))


def _shown(values: tuple[Any, ...]) -> str:
    text = ", ".join(repr(v) if isinstance(v, (int, float, str)) or v is None
                     else type(v).__name__ for v in values[:3])
    return f"({text[:120]})"


def _depth(value: Any, limit: int, depth: int = 0) -> bool:
    """Whether ``value`` nests at most ``limit`` tables deep."""
    if isinstance(value, (list, dict)):
        if depth >= limit:
            return False
        items = value.values() if isinstance(value, dict) else value
        return all(_depth(v, limit, depth + 1) for v in items)
    return True


class Game:
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
        self._closed = False

    # -- the host's side -----------------------------------------------------------------

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

    def load_mod(
        self,
        mod_id: str,
        source: str | bytes,
        *,
        chunk: str | None = None,
        permissions: Permissions | None = None,
        budget: Budget | None = None,
        access: Any = None,
        prepare: Callable[[Any], None] | None = None,
        replacing: bool = False,
    ) -> Mod:
        """Load a mod: a sandbox of its own, the engine library, then its main chunk.

        The main chunk runs once, under the budget, and registers handlers and timers. If
        it fails (or trips, or waits), the mod stays loaded but quarantined (``load``) and
        the failure is in ``mod.quarantine``; the game goes on. What it reports goes in
        the next tick's report.

        Args:
            mod_id: lower-case id (``waves``, ``arena-enemies``): a-z, 0-9, ``_``, ``-``.
            source: the main chunk's Lua source text.
            chunk: its chunk name (default ``@mods/<id>/main.lua``).
            permissions: default: the game's.
            budget: default: the game's.
            access: what the host captured about the mod (see :meth:`Registry.mod`).
            prepare: called with the mod's sandbox after the engine library and before the
                main chunk, to run more of the mod's own chunks in its environment (mod
                packages define their ``require`` this way). A :class:`ScriptError` it
                raises is a load failure, like the main chunk's. In an isolated game it
                gets the :class:`~moonbox.isolation.IsolatedSandbox` (``run``, ``load``,
                ``start``), and is called again whenever the mod is built again in a fresh
                worker.
            replacing: unload the loaded mod of that id first, and keep its place in the
                dispatch order (a new version of the same mod).

        Raises:
            EngineError: ``invalid_mod_id``, ``duplicate_mod``, ``closed``.
            ConfigError: (isolated) the mod id is taken in a pool the game was given.
            HostError: (isolated) no worker could be started for the mod.
        """
        self._check_open()
        if not isinstance(mod_id, str) or not _MOD_ID.match(mod_id):
            raise EngineError(f"mod id {mod_id!r}: use 1-64 of a-z 0-9 _ - starting with a "
                              "letter", code="invalid_mod_id")
        place = None
        if replacing and mod_id in self._mods:
            place = list(self._mods).index(mod_id)
            self.unload_mod(mod_id)
        if mod_id in self._mods:
            raise EngineError(f"a mod {mod_id!r} is loaded already", code="duplicate_mod")
        budget = budget or self.budget
        api = self.registry.mod(mod_id, permissions or self.permissions, access=access)
        sandbox: Sandbox | IsolatedSandbox
        try:
            if self.pool is not None:
                # The mod's data state is its key/value store, kept here in the host: the
                # worker keeps no state global.
                sandbox = IsolatedSandbox(budget, jit=self.jit, host_functions=api.host_functions,
                                          pool=self.pool, mod_id=mod_id, state_global=None,
                                          wall_margin_s=self.wall_margin_s,
                                          respawn="next_call",
                                          deterministic=self.seed is not None)
            else:
                sandbox = api.sandbox(budget, jit=self.jit, deterministic=self.seed is not None,
                                      watchdog=self._watchdog or False)
        except BaseException:
            api.close()
            raise
        mod = Mod(mod_id, api, sandbox, budget, chunk or f"@mods/{mod_id}/main.lua")
        mod._generation = sandbox.replacements
        if isinstance(sandbox, IsolatedSandbox):
            mod._isolated = True
            mod._source, mod._prepare = source, prepare
            mod.stats.worker = sandbox.worker_stats()
        self._mods[mod_id] = mod
        if place is not None:  # back at its place in the dispatch order
            ids = list(self._mods)
            ids.insert(place, ids.pop())
            self._mods = {i: self._mods[i] for i in ids}
        else:
            self._order[mod_id] = len(self._order)
        self._build(mod, source, prepare)
        return mod

    def _build(self, mod: Mod, source: str | bytes, prepare: Callable[[Any], None] | None,
               *, again: bool = False) -> bool:
        """Run the engine library, ``prepare`` and the main chunk in the mod's sandbox;
        whether all of it succeeded. A failure quarantines the mod: ``load``, or
        ``runtime`` when building it ``again`` in a fresh worker."""
        sandbox = mod.sandbox
        self._chain.append(mod.id)
        try:
            if isinstance(sandbox, IsolatedSandbox):
                # Compiled once into the mod's snapshot: a fresh worker compiles it again.
                if mod._runtime_chunk is None:
                    mod._runtime_chunk = sandbox.load(_RUNTIME, RUNTIME_CHUNK)
                keeper: Any = sandbox.start(mod._runtime_chunk)
            else:
                keeper = sandbox.start(_RUNTIME, RUNTIME_CHUNK)
            outcome = keeper.resume(self._seed_for(mod.id, mod.stats.restores))
            self._account(mod, outcome)
            if outcome.status != "yielded" or mod._dispatch is None:
                self._load_failed(mod, outcome, RUNTIME_CHUNK[1:], again)
                return False
            mod._keeper = keeper
            if prepare is not None:
                prepare(sandbox)
            # The engine library takes back what it lent the preparation (a step or two,
            # not counted as a call of the mod).
            outcome = keeper.resume()
            if outcome.status != "yielded":
                self._load_failed(mod, outcome, RUNTIME_CHUNK[1:], again)
                return False
            outcome = sandbox.run(source, mod.chunk, max_resumes=1)
            self._account(mod, outcome)
            if not outcome.ok or outcome.status != "done":
                self._load_failed(mod, outcome, mod.chunk.lstrip("@="), again)
                return False
        except MoonboxError as exc:
            error = exc if isinstance(exc, ScriptError) else ScriptError(str(exc), chunk=mod.chunk)
            failure = Failure(mod.id, "load", mod.chunk.lstrip("@="), error, self._tick)
            if again:
                self._quarantine(mod, "runtime", f"lost its worker and could not be built "
                                 f"again: {error}; unload it and load it again", failure)
            else:
                self._quarantine(mod, "load", f"failed to load: {error}", failure)
            return False
        finally:
            self._chain.pop()
        return True

    def _load_failed(self, mod: Mod, outcome: Outcome, where: str, again: bool = False) -> None:
        error = outcome.error or ScriptError(
            "the main chunk waited or yielded; register handlers and use wait() inside them",
            chunk=mod.chunk)
        failure = Failure(mod.id, "load", where, error, self._tick)
        self._report.failures.append(failure)
        if error.kind == "budget":
            mod.stats.trips += 1
        else:
            mod.stats.errors += 1
        if again:
            self._quarantine(mod, "runtime", f"lost its worker and could not be built again: "
                             f"{error}; unload it and load it again", failure)
        else:
            self._quarantine(mod, "load", f"failed to load: {error}", failure)

    def unload_mod(self, mod_id: str) -> None:
        """Unload a mod: its handlers, timers, tasks and exports go; its entities stay.

        Raises:
            EngineError: ``unknown_mod``.
        """
        mod = self.mod(mod_id)
        self._release(mod)
        del self._mods[mod_id]
        for subs in self._subscribers.values():
            if mod in subs:
                subs.remove(mod)
        self.world.rollback(mod_id)

    def _release(self, mod: Mod) -> None:
        # The dispatcher handle first, while the run it came from is alive.
        if mod._dispatch is not None:
            mod._dispatch.release()
            mod._dispatch = None
        mod._run = None
        mod._keeper = None
        mod.sandbox.close()
        mod.api.close()

    def emit(self, event: str, data: Any = None) -> None:
        """Send a game event to every mod with a handler for it, on the next tick.

        Raises:
            EngineError: ``reserved_event`` for ``tick``; ``invalid_event`` for data that is
                not plain data.
        """
        if event in RESERVED_EVENTS:
            raise EngineError(f"{event!r} is sent by the engine itself", code="reserved_event")
        try:
            data = self._copy(data, self.limits.max_value_bytes * 64)
        except ValueError as exc:
            raise EngineError(str(exc), code="invalid_event") from None
        self._outbox.append(Event(event, data, None, self._tick))

    def quarantine(self, mod_id: str, reason: str) -> None:
        """Suspend a mod's dispatch (kind ``host``) until :meth:`lift_quarantine`."""
        self._quarantine(self.mod(mod_id), "host", reason, None)

    def lift_quarantine(self, mod_id: str) -> None:
        """Resume a quarantined mod's dispatch; its failure counts start again from 0.

        Its timers and waiting tasks that fell due meanwhile run on the next tick.

        Raises:
            EngineError: ``unknown_mod``; ``not_liftable`` for a mod that never loaded or
                lost its runtime (unload and load it again).
        """
        mod = self.mod(mod_id)
        q = mod.quarantine
        if q is None:
            return
        if q.kind in ("load", "runtime"):
            raise EngineError(f"mod {mod_id!r} {q.reason}; unload it and load it again",
                              code="not_liftable")
        mod.quarantine = None
        mod.failures_in_a_row = mod.trips_in_a_row = 0

    def tick(self) -> TickReport:
        """Advance the game one tick.

        1. Events sent during the previous tick (by mods, the host or the world) reach the
           queues of the mods with handlers for them.
        2. Each active mod, in load order: its ``tick`` handlers, then its queued events,
           then its timers that are due, then its tasks whose ``wait`` is over. Each is one
           budgeted call; a mod quarantined midway stops there.
        3. The world applies the commands queued during the tick, in order; refusals
           become ``world:refused`` events for the mods that issued them, spawns and
           destructions ``world:spawned`` / ``world:destroyed`` events.

        Nothing a mod does makes it raise: a mod's failures are in the report, and should
        the engine itself fail while dispatching a mod, that mod is quarantined
        (``runtime``, the reason names the exception) and the tick goes on.

        Raises:
            EngineError: ``closed``.
        """
        self._check_open()
        self._tick += 1
        t = self._tick
        between = self._report
        report = self._report = TickReport(t)
        # What mods reported between ticks (a main chunk as its mod loads) is in this
        # tick's report: between ticks there is no report of a tick to hold it.
        report.reports.extend(between.reports)
        report.reports_dropped.update(between.reports_dropped)
        self._deliver()
        for mod in list(self._mods.values()):
            if mod.quarantine is None:
                try:
                    self._dispatch_mod(mod, t)
                except Exception as exc:  # noqa: BLE001 - one mod, never the whole tick
                    self._broken(mod, exc)
        results = self.world.apply()
        report.results = results
        self._route(results)
        if self.pool is not None and time.monotonic() - self._stats_read >= \
                WORKER_STATS_INTERVAL_S:
            self.worker_stats()
        self._report = TickReport(t)  # collects what happens until the next tick
        return report

    def run(self, ticks: int) -> list[TickReport]:
        """Run ``ticks`` ticks; their reports."""
        return [self.tick() for _ in range(ticks)]

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

    def _seed_for(self, mod_id: str, restores: int = 0) -> int:
        if self.seed is None:
            return secrets.randbelow(1 << 31)
        # A mod built again in a fresh worker draws on from another seed, not the first
        # numbers over again.
        text = f"{self.seed}:{mod_id}" + (f":{restores}" if restores else "")
        digest = hashlib.sha256(text.encode()).digest()
        return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF

    # -- isolated mods -------------------------------------------------------------------

    def worker_stats(self) -> list[WorkerStats]:
        """Memory and CPU of each worker process of an isolated game, read now (each mod's
        ``stats.worker`` is brought up to date too); ``[]`` in process."""
        if self.pool is None:
            return []
        self._stats_read = time.monotonic()
        stats = self.pool.stats()
        by_key = {key: s for s in stats for key in s.mods}
        for mod in self._mods.values():
            worker = by_key.get(mod.id)
            if worker is not None:
                mod.stats.worker = worker
        return stats

    def _ready_isolated(self, mod: Mod) -> bool:
        """Make sure an isolated mod's runtime is alive before it is called: a fresh worker
        if its worker was lost, and the mod built again there. Whether it can be called."""
        sandbox: IsolatedSandbox = mod.sandbox  # type: ignore[assignment]
        if not sandbox.lost and sandbox.restores == mod._built:
            return True
        try:
            sandbox.revive()
        except MoonboxError as exc:
            self._lost(mod, f"lost its worker and no fresh one could start ({exc}); unload "
                            "it and load it again")
            return False
        if sandbox.restores == mod._built:
            return True
        return self._rebuild(mod)

    def _rebuild(self, mod: Mod) -> bool:
        """Build a mod again in the fresh worker that took over from its lost one.

        What lived in the lost runtime is gone: its callbacks, waiting tasks, exported
        functions and every Lua value. The engine library, ``prepare`` and the main chunk
        run again, so the mod registers its handlers, timers and exports anew; what that
        main chunk asks of the world and sends to other mods is taken back (they saw it at
        the first load), and the mod's key/value state, kept here in the host, is put back
        as it was: the mod's last data snapshot. Its calls of other mods' exports are
        refused (``rebuilding``): what those would do could not be taken back. Its queued
        events stay queued."""
        sandbox = mod.sandbox
        assert isinstance(sandbox, IsolatedSandbox)
        mod.stats.restores += 1
        self._report.restored.append(mod.id)
        state, state_bytes = dict(mod.state), dict(mod.state_bytes)
        self._forget_runtime(mod)
        world = self.world
        world.rollback(mod.id)  # a transaction the lost runtime left open
        first_command = world.next_command_id
        outbox, events, emits = len(self._outbox), len(self._report.events), mod.emits_this_tick
        # What the main chunk would do through another mod's export is not the mod's to
        # take back (the other mod's Lua state, its events, its commands): such calls are
        # refused while it is built again (_call_export, "rebuilding").
        self._rebuilding.add(mod.id)
        try:
            ok = self._build(mod, mod._source, mod._prepare, again=True)
        finally:
            self._rebuilding.discard(mod.id)
        world.discard(mod.id, first_command)
        self._outbox[outbox:] = [e for e in self._outbox[outbox:] if e.source != mod.id]
        self._report.events[events:] = [e for e in self._report.events[events:]
                                        if e.source != mod.id]
        mod.emits_this_tick = emits
        mod.state.clear()
        mod.state.update(state)
        mod.state_bytes.clear()
        mod.state_bytes.update(state_bytes)
        mod._built = sandbox.restores
        return ok

    def _forget_runtime(self, mod: Mod) -> None:
        """Drop what the engine holds of a lost runtime: the callbacks, tasks, exports and
        dispatcher that lived in it."""
        for event in mod.by_event:
            subs = self._subscribers.get(event, [])
            if mod in subs:
                subs.remove(mod)
        mod.by_event.clear()
        mod.callbacks.clear()
        mod.timers.clear()
        mod._stale_timers = 0
        mod.tasks.clear()
        mod.exports.clear()
        if mod._dispatch is not None:
            mod._dispatch.release()
            mod._dispatch = None
        mod._run = None
        mod._keeper = None
        mod._epoch += 1

    # -- dispatch ------------------------------------------------------------------------

    def _dispatch_mod(self, mod: Mod, t: int) -> None:
        mod.emits_this_tick = 0
        if mod._isolated and not self._ready_isolated(mod):
            return
        # A mod whose worker is lost midway stops there: it is built again before its next
        # call, and what it registered before is gone with the lost runtime.
        epoch = mod._epoch
        handlers = mod.by_event.get("tick")
        if handlers:
            for cb in tuple(handlers):
                if mod.quarantine is not None or mod._epoch != epoch:
                    return
                self._invoke(mod, cb, (t,))
        queue = mod.queue
        while queue and mod.quarantine is None and mod._epoch == epoch:
            event = queue.popleft()
            for cb in tuple(mod.by_event.get(event.name, ())):
                if mod.quarantine is not None or mod._epoch != epoch:
                    return
                self._invoke(mod, cb, (event.data, event.name, event.source))
        timers = mod.timers
        while timers and timers[0][0] <= t and mod.quarantine is None and mod._epoch == epoch:
            due, cid = heapq.heappop(timers)
            cb = mod.callbacks.get(cid)
            if cb is None or cb.due != due:
                mod._stale_timers = max(0, mod._stale_timers - 1)
                continue  # cancelled
            if cb.kind == "every":
                cb.due = max(due + cb.interval, t + 1)
                heapq.heappush(timers, (cb.due, cid))
            else:
                del mod.callbacks[cid]
            self._invoke(mod, cb, (t,))
        if mod.tasks:
            for task in sorted((k for k in mod.tasks.values() if k.due <= t),
                               key=lambda k: k.id):
                if mod.quarantine is not None or mod._epoch != epoch:
                    return
                del mod.tasks[task.id]
                values = self._resume(mod, task.label, task.where, None, -task.id)
                if values is not None and values[0] == _WAIT:
                    self._park(mod, values, task.label, task.where)

    def _invoke(self, mod: Mod, cb: Callback, args: tuple[Any, ...]) -> None:
        # The hot path of every handler call: a success is settled here, kept flat.
        run = mod._run
        if run is not None and run._open:
            self._chain.append(mod.id)
            try:
                outcome = run.resume(cb.id, *args)
            except MoonboxError as exc:
                self._lost(mod, f"lost its runtime: {exc}")
                return
            finally:
                self._chain.pop()
            if run.reports_dropped_now:
                self._count_dropped(mod, run.reports_dropped_now)
            if outcome[0] == "yielded" and outcome[1] == _DONE_ONLY:
                self._report.calls += 1
                stats = mod.stats
                s = outcome[4]
                stats.calls += 1
                stats.steps += s[0]
                stats.wall_s += s[2]
                if s[1] > stats.memory_peak_bytes:
                    stats.memory_peak_bytes = s[1]
                if outcome[3]:
                    self._report.reports.extend((mod.id, line) for line in outcome[3])
                mod.failures_in_a_row = mod.trips_in_a_row = 0
                return
            values = self._settle(mod, cb.label, cb.where, outcome)
        else:
            values = self._resume(mod, cb.label, cb.where, None, cb.id, *args)
        if values is None:
            return
        code = values[0]
        if code == _WAIT:
            self._park(mod, values, cb.label, cb.where)
        elif code == _MISSING:
            self._drop_callback(mod, cb.id)

    def _park(self, mod: Mod, values: tuple[Any, ...], label: str, where: str) -> None:
        task_id, ticks = values[1], values[2]  # checked by _settle
        if len(mod.tasks) >= self.limits.max_tasks:
            self._forget(mod, label, where, task_id)
            error = ScriptError(
                f"too many handlers are waiting at once (at most {self.limits.max_tasks}); "
                "this one was stopped: wait in fewer places, or for fewer ticks",
                chunk=mod.chunk)
            self._fail(mod, label, where, error)
            return
        mod.tasks[task_id] = Task(task_id, self._tick + max(1, ticks), label, where)

    def _forget(self, mod: Mod, label: str, where: str, task_id: Any) -> None:
        """Have the dispatcher drop a waiting task; the mod's failure counts stay as they
        were (the failure that made it drop the task is counted next)."""
        failures, trips = mod.failures_in_a_row, mod.trips_in_a_row
        self._resume(mod, label, where, None, 0, task_id)
        mod.failures_in_a_row, mod.trips_in_a_row = failures, trips

    def _resume(self, mod: Mod, label: str, where: str, budget: Budget | None,
                what: Any, *args: Any) -> tuple[Any, ...] | None:
        """One budgeted call into the mod's dispatcher; the values it yielded, or ``None``
        when the call failed (recorded) or could not be made."""
        run = mod._run
        if run is None or not run._open:
            run = self._start_dispatcher(mod, label, where)
            if run is None:
                return None
        self._chain.append(mod.id)
        try:
            outcome = run.resume(what, *args, budget=budget)
        except MoonboxError as exc:
            self._lost(mod, f"lost its runtime: {exc}")
            return None
        finally:
            self._chain.pop()
        if run.reports_dropped_now:
            self._count_dropped(mod, run.reports_dropped_now)
        return self._settle(mod, label, where, outcome)

    def _count_dropped(self, mod: Mod, lines: int) -> None:
        """Lines past the report caps of one call: counted in the tick report."""
        dropped = self._report.reports_dropped
        dropped[mod.id] = dropped.get(mod.id, 0) + lines

    def _settle(self, mod: Mod, label: str, where: str,
                outcome: Outcome) -> tuple[Any, ...] | None:
        self._report.calls += 1
        self._account(mod, outcome)
        if outcome.status == "yielded":
            values = outcome.values
            code = values[0] if values else None
            if code == _FAILED and type(code) is int:
                message = values[1] if len(values) > 1 else "failed"
                self._fail(mod, label, where, _error_from_message(message, mod.chunk))
                return None
            checked = _checked_yield(values)
            if checked is None:
                # The engine library never yields this: the mod's code yielded past it.
                if code == _WAIT and len(values) > 1 and _task_id(values[1]) is not None:
                    self._forget(mod, label, where, values[1])
                self._fail(mod, label, where, ScriptError(
                    f"yielded {_shown(values)} to the engine; use wait(ticks) to pause, "
                    "with ticks from 1 to 1000000", chunk=mod.chunk))
                return None
            mod.failures_in_a_row = 0
            mod.trips_in_a_row = 0
            return checked
        # A trip (or the dispatcher's end): the dispatcher is gone; the next call starts it
        # again. Callbacks and waiting tasks live on the Lua side and survive.
        mod._run = None
        error = outcome.error or ScriptError("the engine's dispatcher ended", chunk=mod.chunk)
        self._fail(mod, label, where, error)
        if mod.sandbox.replacements != mod._generation and mod.quarantine is None:
            self._lost(mod, "lost its runtime, replaced after an out-of-memory trip")
        elif mod._isolated and mod.sandbox.lost:  # type: ignore[union-attr]
            # Its worker was lost (killed, crashed): so is everything in its runtime. The
            # mod is built again in a fresh worker before its next call.
            mod._epoch += 1
        return None

    def _start_dispatcher(self, mod: Mod, label: str, where: str) -> Any:
        if mod._isolated and mod.sandbox.lost:  # type: ignore[union-attr]
            return None  # built again before its next dispatch, not in the middle of this one
        handle = mod._dispatch
        if getattr(mod.sandbox, "abandoned", False):
            self._lost(mod, "its runtime was stuck in one operation past its wall budget and "
                       "margin, and was abandoned (the watchdog stopped waiting for it)")
            return None
        if handle is None or not handle.valid:
            self._lost(mod, "lost its runtime")
            return None
        try:
            mod._run = mod.sandbox.start(handle)
        except MoonboxError as exc:
            if mod._isolated and mod.sandbox.lost:  # type: ignore[union-attr]
                # Its worker died with no request in flight (after a trip ended the
                # dispatcher, nothing asked it anything): found only now. This call fails
                # as a crash, as one in flight would; the mod is built again in a fresh
                # worker before its next call.
                self._report.calls += 1
                mod.stats.calls += 1
                self._fail(mod, label, where, WorkerCrashed(
                    f"its worker was lost while idle ({exc}); the mod is restored from its "
                    "last snapshot in a fresh worker", chunk=mod.chunk))
                mod._epoch += 1
                return None
            self._lost(mod, f"lost its runtime: {exc}")
            return None
        return mod._run

    def _account(self, mod: Mod, outcome: Outcome) -> None:
        stats = mod.stats
        s = outcome.stats
        stats.calls += 1
        stats.steps += s.steps
        stats.wall_s += s.wall_s
        if s.memory_peak_bytes > stats.memory_peak_bytes:
            stats.memory_peak_bytes = s.memory_peak_bytes
        if outcome.reports:
            self._report.reports.extend((mod.id, line) for line in outcome.reports)

    def _fail(self, mod: Mod, label: str, where: str, error: ScriptError) -> None:
        # A failure in an export call happened in the exporter's runtime (its stats say so)
        # but counts toward the caller's quarantine: the caller chose the arguments and the
        # call, and must not be able to shut another mod down (docs/engine.md).
        blamed = mod
        caller = None
        if self._exporting and self._exporting[-1][0] is mod:
            blamed = self._exporting[-1][1]
            caller = blamed.id
        failure = Failure(mod.id, label, where, error, self._tick, caller)
        self._report.failures.append(failure)
        limits = self.limits
        if error.kind == "budget":
            mod.stats.trips += 1
            blamed.trips_in_a_row += 1
            if blamed.trips_in_a_row >= limits.max_trips and blamed.quarantine is None:
                self._quarantine(blamed, "trips", f"tripped its budget "
                                 f"{blamed.trips_in_a_row} times in a row; last: {failure}",
                                 failure)
        else:
            mod.stats.errors += 1
            blamed.failures_in_a_row += 1
            if blamed.failures_in_a_row >= limits.max_failures and blamed.quarantine is None:
                self._quarantine(blamed, "failures", f"failed {blamed.failures_in_a_row} "
                                 f"times in a row; last: {failure}", failure)

    def _quarantine(self, mod: Mod, kind: Any, reason: str, failure: Failure | None) -> None:
        if mod.quarantine is not None and kind != "runtime":
            return
        mod.quarantine = Quarantine(kind, reason, self._tick, failure)
        self._report.quarantined.append(mod.id)

    def _lost(self, mod: Mod, reason: str) -> None:
        mod._run = None
        self._quarantine(mod, "runtime", reason, None)

    def _broken(self, mod: Mod, exc: Exception) -> None:
        # A fault of the engine itself while dispatching this mod: whatever the mod did to
        # cause it, it stops this mod only; the other mods and the world go on.
        self._chain.clear()
        self._lost(mod, f"lost its runtime: the engine failed while dispatching it "
                        f"({type(exc).__name__}: {exc}); unload it and load it again")

    # -- events and world results --------------------------------------------------------

    def _deliver(self) -> None:
        outbox, self._outbox = self._outbox, []
        for event in outbox:
            for mod in self._subscribers.get(event.name, ()):
                if mod.id != event.source and mod.quarantine is None:
                    self._enqueue(mod, event)

    def _enqueue(self, mod: Mod, event: Event) -> None:
        queue = mod.queue
        if len(queue) >= self.limits.max_queued_events:
            queue.popleft()
            mod.stats.events_dropped += 1
        queue.append(event)

    def _route(self, results: list[CommandResult]) -> None:
        t = self._tick
        mods = self._mods
        for result in results:
            # One result per command of the tick: the status read as it is (the `applied`
            # property would cost a call each).
            applied = result.status == "applied"
            mod = mods.get(result.mod) if result.mod is not None else None
            if mod is not None:
                if applied:
                    mod.stats.commands_applied += 1
                else:
                    mod.stats.commands_refused += 1
                    if "world:refused" in mod.by_event:
                        self._enqueue(mod, Event("world:refused", result.to_dict(), None, t))
            if applied and result.kind in _ANNOUNCED:
                name = "world:destroyed" if result.kind == "destroy" else "world:spawned"
                for entity in result.names:
                    self._outbox.append(Event(name, {"name": entity, "mod": result.mod}, None, t))

    # -- what the bindings call ------------------------------------------------------------

    def _mod_for(self, call: HostCall) -> Mod:
        mod_id = getattr(call.mod, "mod_id", None)
        mod = self._mods.get(mod_id) if isinstance(mod_id, str) else None
        if mod is None:
            raise BindingError("is only available to mods loaded in a game [failed]",
                               reason="failed")
        return mod

    def _add_callback(self, mod: Mod, kind: CallbackKind, event: str | None, ticks: int,
                      where: str) -> int:
        limits = self.limits
        if kind == "on":
            assert event is not None
            if event.startswith("game:") or (event.startswith("world:") and event not in (
                    "world:refused", "world:spawned", "world:destroyed")):
                raise BindingError(f"no event {event!r} is sent by the engine [unknown_event]",
                                   reason="unknown_event")
            if mod.handler_count >= limits.max_handlers:
                raise BindingError(f"a mod may register at most {limits.max_handlers} "
                                   "handlers [too_many]", reason="too_many")
        elif len(mod.timers) >= limits.max_timers:
            # The heap holds the pending timers and the cancelled ones not yet dropped:
            # both count, so the heap never grows past the limit.
            self._compact_timers(mod)
            if len(mod.timers) >= limits.max_timers:
                raise BindingError(f"a mod may have at most {limits.max_timers} timers "
                                   "[too_many]", reason="too_many")
        cid = mod.next_id
        mod.next_id += 1
        cb = Callback(cid, kind, event, ticks, self._tick + ticks, where)
        mod.callbacks[cid] = cb
        if kind == "on":
            assert event is not None
            mod.by_event.setdefault(event, []).append(cb)
            subs = self._subscribers.setdefault(event, [])
            if mod not in subs:
                subs.append(mod)
                subs.sort(key=lambda m: self._order[m.id])
        else:
            heapq.heappush(mod.timers, (cb.due, cid))
        return cid

    def _drop_callback(self, mod: Mod, cid: int) -> bool:
        cb = mod.callbacks.pop(cid, None)
        if cb is None:
            return False
        if cb.kind == "on" and cb.event is not None:
            handlers = mod.by_event.get(cb.event, [])
            if cb in handlers:
                handlers.remove(cb)
            if not handlers:
                mod.by_event.pop(cb.event, None)
                subs = self._subscribers.get(cb.event, [])
                if mod in subs:
                    subs.remove(mod)
        else:
            # Its heap entry stays until popped; once they are most of the heap, rebuild it.
            mod._stale_timers += 1
            if 2 * mod._stale_timers > len(mod.timers):
                self._compact_timers(mod)
        return True

    @staticmethod
    def _compact_timers(mod: Mod) -> None:
        """Drop the heap entries of cancelled timers, in place (dispatch may be walking it)."""
        callbacks = mod.callbacks
        timers = mod.timers
        timers[:] = [(due, cid) for due, cid in timers
                     if (cb := callbacks.get(cid)) is not None and cb.due == due]
        heapq.heapify(timers)
        mod._stale_timers = 0

    def _cancel(self, mod: Mod, cid: int) -> bool:
        return self._drop_callback(mod, cid)

    def _ready(self, mod: Mod, handle: FunctionHandle) -> None:
        if mod._dispatch is not None:
            handle.release()
            raise BindingError("is called once, by the engine library [failed]",
                               reason="failed")
        mod._dispatch = handle

    def _copy(self, value: Any, max_bytes: int) -> Any:
        """A deep copy of plain data, within the value limits.

        Raises:
            ValueError: nested deeper than the export depth, or larger than ``max_bytes``.
        """
        if value is None or isinstance(value, (bool, int, float, str)):
            if isinstance(value, str) and len(value) > max_bytes:
                raise ValueError(f"the value is larger than {max_bytes} bytes")
            return value
        if not _depth(value, self.limits.max_export_depth):
            raise ValueError(f"the value nests deeper than {self.limits.max_export_depth} "
                             "levels")
        try:
            packed = msgpack.packb(value, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"the value is not plain data ({exc})") from None
        if len(packed) > max_bytes:
            raise ValueError(f"the value is larger than {max_bytes} bytes packed")
        return msgpack.unpackb(packed, raw=False, strict_map_key=False)

    def _checked_copy(self, value: Any, what: str, max_bytes: int | None = None) -> Any:
        try:
            return self._copy(value, max_bytes or self.limits.max_value_bytes)
        except ValueError as exc:
            raise BindingError(f"{what}: {exc} [too_large]", reason="too_large") from None

    def _emit_from(self, mod: Mod, event: str, data: Any) -> None:
        if event in RESERVED_EVENTS or event.startswith(RESERVED_PREFIXES):
            raise BindingError(f"{event!r} is sent by the engine only [reserved_event]",
                               reason="reserved_event")
        if mod.emits_this_tick >= self.limits.max_emits_per_tick:
            raise BindingError(f"at most {self.limits.max_emits_per_tick} emits per tick "
                               "[too_many]", reason="too_many")
        data = self._checked_copy(data, "data")
        mod.emits_this_tick += 1
        event_ = Event(event, data, mod.id, self._tick)
        self._outbox.append(event_)
        self._report.events.append(event_)

    def set_state(self, mod_id: str, state: dict[str, Any]) -> None:
        """Replace a mod's key/value state (hot reload carries it to a new version).

        Checked like the mod's own writes: plain data, at most ``max_state_keys`` keys and
        ``max_state_bytes`` bytes in all; on a refusal nothing changes.

        Raises:
            EngineError: ``unknown_mod``; ``bad_state`` (not plain data, or over a limit).
        """
        mod = self.mod(mod_id)
        old_state, old_bytes = dict(mod.state), dict(mod.state_bytes)
        mod.state.clear()
        mod.state_bytes.clear()
        try:
            for key, value in state.items():
                if not isinstance(key, str):
                    raise BindingError(f"state key {key!r} is not a string")
                self._state_set(mod, key, value)
        except BindingError as exc:
            mod.state.clear()
            mod.state.update(old_state)
            mod.state_bytes.clear()
            mod.state_bytes.update(old_bytes)
            raise EngineError(f"mod {mod_id!r}: state refused: {exc}", code="bad_state") from None

    def _state_get(self, mod: Mod, key: str) -> Any:
        value = mod.state.get(key)
        return self._copy(value, 1 << 62) if isinstance(value, (list, dict)) else value

    def _state_set(self, mod: Mod, key: str, value: Any) -> None:
        if value is None:
            mod.state.pop(key, None)
            mod.state_bytes.pop(key, None)
            return
        limits = self.limits
        value = self._checked_copy(value, "value")
        size = len(msgpack.packb(value, use_bin_type=True)) + len(key)
        if key not in mod.state and len(mod.state) >= limits.max_state_keys:
            raise BindingError(f"a mod's state holds at most {limits.max_state_keys} keys "
                               "[too_many]", reason="too_many")
        total = sum(mod.state_bytes.values()) - mod.state_bytes.get(key, 0) + size
        if total > limits.max_state_bytes:
            raise BindingError(f"a mod's state holds at most {limits.max_state_bytes} bytes "
                               "[too_large]", reason="too_large")
        mod.state[key] = value
        mod.state_bytes[key] = size

    def _export(self, mod: Mod, name: str, kind: str, value: Any) -> None:
        if name not in mod.exports and len(mod.exports) >= self.limits.max_exports:
            raise BindingError(f"a mod may export at most {self.limits.max_exports} names "
                               "[too_many]", reason="too_many")
        if kind == "data":
            value = self._checked_copy(value, "value")
        mod.exports[name] = (kind, value)

    def _exported(self, caller: Mod, mod_id: str, name: str) -> tuple[Mod, str, Any]:
        target = self._mods.get(mod_id)
        if target is None:
            raise BindingError(f"no mod {mod_id!r} is loaded [unknown_mod]",
                               reason="unknown_mod")
        if target.quarantine is not None:
            raise BindingError(f"mod {mod_id!r} is quarantined [quarantined]",
                               reason="quarantined")
        entry = target.exports.get(name)
        if entry is None:
            raise BindingError(f"mod {mod_id!r} exports nothing named {name!r} "
                               "[unknown_export]", reason="unknown_export")
        return target, entry[0], entry[1]

    def _import(self, caller: Mod, mod_id: str, name: str) -> tuple[Any, ...]:
        _, kind, value = self._exported(caller, mod_id, name)
        if kind == "function":
            return ("function", None)
        return ("data", self._copy(value, 1 << 62))

    def _call_export(self, caller: Mod, mod_id: str, name: str, arg: Any,
                     call: HostCall) -> Any:
        if caller.id in self._rebuilding:
            # The call ran at the first load already; run again, its effects in the other
            # mod would happen twice, and nothing here can take them back.
            raise BindingError(f"{mod_id}.{name} cannot be called while mod {caller.id!r} "
                               "is built again after losing its worker; call other mods "
                               "from handlers, not the main chunk, or pcall the call "
                               "[rebuilding]", reason="rebuilding")
        target, kind, where = self._exported(caller, mod_id, name)
        if kind != "function":
            raise BindingError(f"{mod_id}.{name} is data, not a function [not_a_function]",
                               reason="not_a_function")
        limit = self.limits.max_call_depth
        if len(self._chain) >= limit:
            raise BindingError(f"cross-mod calls nest at most {limit} mods deep [call_depth]",
                               reason="call_depth")
        if mod_id in self._chain:
            raise BindingError(f"mod {mod_id!r} is already in this call chain ("
                               f"{' -> '.join(self._chain)}) [reentrant]", reason="reentrant")
        arg = self._checked_copy(arg, "argument")
        if target._isolated and (target.sandbox.lost  # type: ignore[union-attr]
                                 or target.sandbox.restores != target._built):  # type: ignore[union-attr]
            # Its worker was lost: a fresh one and the mod built again there first, on the
            # host's time, not the caller's.
            with call.excluded_time(REBUILD_EXCLUDE_S):
                ready = self._ready_isolated(target)
            if not ready:
                raise BindingError(f"{mod_id}.{name} failed: it lost its worker and could not "
                                   "be built again [export_failed]", reason="export_failed")
            target, kind, where = self._exported(caller, mod_id, name)
            if kind != "function":
                raise BindingError(f"{mod_id}.{name} is data, not a function "
                                   "[not_a_function]", reason="not_a_function")
        # Nested work borrows from the caller: no more wall time than it has left.
        left = call.time_left_s()
        if left <= 0:
            raise BindingError("no time left in this call [timed_out]", reason="timed_out")
        budget = target.budget
        if left < budget.wall_s:
            budget = budget.model_copy(update={"wall_s": left})
        self._exporting.append((target, caller))
        try:
            values = self._resume(target, f"export {name!r}", where, budget, name, arg)
        finally:
            self._exporting.pop()
        if values is None or values[0] != _DONE:
            failure = self._report.failures[-1] if self._report.failures else None
            why = f": {failure.error.message}" if failure and failure.mod == mod_id else ""
            raise BindingError(f"{mod_id}.{name} failed{why} [export_failed]",
                               reason="export_failed")
        result = values[1] if len(values) > 1 else None
        return self._checked_copy(result, "result")
