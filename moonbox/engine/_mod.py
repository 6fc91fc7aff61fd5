"""One loaded mod as the engine sees it: its sandbox, callbacks, queue, state and stats."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from .._errors import MoonboxError, ScriptError
from ..bindings import ModApi, Permissions
from ..isolation import IsolatedChunk, IsolatedRun, IsolatedSandbox, WorkerStats
from ..sandbox import Budget, FunctionHandle, Run, Sandbox

__all__ = ["Callback", "Event", "Failure", "Mod", "ModStats", "Quarantine", "Task"]

CallbackKind = Literal["on", "after", "every", "spawn"]

try:  # where the compiled tick was built: what it accounts, until the stats take it
    from ._tick import Tally as _Tally
except ImportError:
    _Tally = None


def _new_tally() -> Any:
    return None if _Tally is None else _Tally()


@dataclass(slots=True)
class Callback:
    """A handler (``on``), timer (``after``, ``every``) or task (``spawn``) a mod
    registered.

    Attributes:
        id: the id the mod got back (per mod).
        kind: ``on``, ``after``, ``every`` or ``spawn`` (a one-shot timer of 1 tick).
        event: the event of a handler.
        interval: ticks between calls of a timer.
        due: the tick a timer fires next.
        where: ``chunk:line`` where the function was defined.
        point: the resume point its function was declared as (``resume_point``), which a
            restore registers it with again; ``None`` for any other function.
        label: how failures name it: ``on('tick')``, ``every(5)``, ``after(3)``, ``spawn``.
    """

    id: int
    kind: CallbackKind
    event: str | None = None
    interval: int = 0
    due: int = 0
    where: str = "?"
    point: str | None = None
    label: str = field(init=False)

    def __post_init__(self) -> None:
        # How failures name it: on('tick'), every(5), after(3), spawn.
        if self.kind == "on":
            self.label = f"on({self.event!r})"
        elif self.kind == "spawn":
            self.label = "spawn"
        else:
            self.label = f"{self.kind}({self.interval})"


@dataclass(slots=True)
class Task:
    """A callback paused in ``wait``: resumed at tick ``due``.

    ``point`` and ``data``: the resume point and (a copy of) the data it waited with
    (``wait(ticks, point, data)``): after a restore, the task is re-entered as the point's
    function called with the data. ``None`` for a plain ``wait``.
    """

    id: int
    due: int
    label: str
    where: str
    point: str | None = None
    data: Any = None


@dataclass(frozen=True, slots=True)
class Event:
    """An event on its way to mods (or the game).

    Attributes:
        name: the event's name (``tick``, ``world:refused``, or a mod's own).
        data: plain data, copied into each receiving mod.
        source: the mod that emitted it, or ``None`` for the game.
        tick: the tick it was emitted on.
    """

    name: str
    data: Any = None
    source: str | None = None
    tick: int = 0


@dataclass(frozen=True, slots=True)
class Failure:
    """A call of a mod that failed: attributed to (mod, handler, chunk:line).

    Attributes:
        mod: the mod's id.
        handler: which callback (``on('tick')``, ``every(5)``, ``export 'name'``, ``load``).
        where: where that callback was defined (``chunk:line``).
        error: the script error, with the line that failed and its kind (``runtime`` or
            ``budget``).
        tick: the tick it happened on.
        caller: for a failed export call, the mod that called it: the failure counts
            toward the caller's quarantine, never the exporter's (a caller's arguments
            must not shut another mod down). ``None`` otherwise.
    """

    mod: str
    handler: str
    where: str
    error: ScriptError
    tick: int
    caller: str | None = None

    @property
    def trip(self) -> bool:
        return self.error.kind == "budget"

    def __str__(self) -> str:
        called = f" (called by mod {self.caller!r})" if self.caller is not None else ""
        return (f"mod {self.mod!r}, {self.handler}{called} defined at {self.where}: "
                f"{self.error} (tick {self.tick})")


@dataclass(frozen=True, slots=True)
class Quarantine:
    """Why a mod's dispatch is suspended.

    Attributes:
        kind: ``failures`` (consecutive errors), ``trips`` (consecutive budget trips),
            ``load`` (its main chunk failed), ``runtime`` (its runtime was lost, e.g.
            replaced after an out-of-memory trip, or the engine failed while dispatching
            it) or ``host`` (the host asked).
        reason: one sentence for a person.
        tick: when it began.
        failure: the failure that tipped it, if any.
    """

    kind: Literal["failures", "trips", "load", "runtime", "host"]
    reason: str
    tick: int
    failure: Failure | None = None


@dataclass(slots=True)
class ModStats:
    """What a mod has spent and done since it was loaded.

    ``memory_peak_bytes`` is the highest heap seen during a call (the heap now is
    :attr:`Mod.memory_bytes`). In an isolated game (``Game(isolation="process")``),
    ``restores`` counts the times the mod was built again in a fresh worker after its worker
    was lost, and ``worker`` is the latest reading of its worker process (memory and CPU,
    shared with the mods pinned to the same worker; refreshed about once a second while
    the game ticks, and by :meth:`Game.worker_stats`); both stay 0 / ``None`` in process.
    """

    calls: int = 0
    steps: int = 0
    wall_s: float = 0.0
    memory_peak_bytes: int = 0
    errors: int = 0
    trips: int = 0
    events_dropped: int = 0
    commands_applied: int = 0
    commands_refused: int = 0
    restores: int = 0
    worker: WorkerStats | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "calls": self.calls, "steps": self.steps, "wall_s": round(self.wall_s, 6),
            "memory_peak_bytes": self.memory_peak_bytes,
            "errors": self.errors, "trips": self.trips, "events_dropped": self.events_dropped,
            "commands_applied": self.commands_applied,
            "commands_refused": self.commands_refused,
        }
        if self.worker is not None:
            data["restores"] = self.restores
            data["worker"] = self.worker.to_dict()
        return data


@dataclass(eq=False, slots=True)
class Mod:
    """A loaded mod. Read it; change it through the :class:`~moonbox.engine.Game`.

    Attributes:
        id: the mod's id.
        api: its bindings (:meth:`Registry.mod`).
        sandbox: its own runtime: a :class:`~moonbox.sandbox.Sandbox`, or in an isolated
            game an :class:`~moonbox.isolation.IsolatedSandbox` in one of the game's workers.
        budget: the budget of each of its calls.
        quarantine: why dispatch is suspended, or ``None``.
        stats: what it has spent.
        state: its key/value state (plain data).
    """

    id: str
    api: ModApi
    sandbox: Sandbox | IsolatedSandbox
    budget: Budget
    chunk: str
    quarantine: Quarantine | None = None
    _stats: ModStats = field(default_factory=ModStats)
    # The calls the compiled tick accounted and the stats have not taken yet (see stats).
    _tally: Any = field(default_factory=_new_tally, repr=False)
    state: dict[str, Any] = field(default_factory=dict)
    state_bytes: dict[str, int] = field(default_factory=dict)
    callbacks: dict[int, Callback] = field(default_factory=dict)
    by_event: dict[str, list[Callback]] = field(default_factory=dict)
    timers: list[tuple[int, int]] = field(default_factory=list)  # heap of (due, id)
    _stale_timers: int = 0  # entries of ``timers`` whose timer was cancelled
    tasks: dict[int, Task] = field(default_factory=dict)
    queue: deque[Event] = field(default_factory=deque)
    # name -> (kind, value, point): ("data", copy, None) or ("function", where, point)
    exports: dict[str, tuple[str, Any, str | None]] = field(default_factory=dict)
    emits_this_tick: int = 0
    failures_in_a_row: int = 0
    trips_in_a_row: int = 0
    next_id: int = 1
    # What a snapshot needs to build the mod again: its permissions, whether the host gave
    # it access and a preparation, the tick of its (last) load and the callback ids that
    # load registered (first, end).
    permissions: Permissions | None = field(default=None, repr=False)
    loaded_tick: int = 0
    _load_ids: tuple[int, int] = (1, 1)
    _load_signature: tuple[tuple[Any, ...], ...] = ()  # (id, kind, event, interval, where)
    _load_exports: dict[str, str] = field(default_factory=dict)  # function name -> where
    _has_access: bool = False
    _keeper: Run | IsolatedRun | None = field(default=None, repr=False)
    _dispatch: FunctionHandle | None = field(default=None, repr=False)
    _run: Run | IsolatedRun | None = field(default=None, repr=False)
    _generation: int = 0
    # What it takes to build the mod again (a restore from a snapshot, or in an isolated
    # game a fresh worker): its main chunk and the host's preparation; isolated mods keep
    # the engine library compiled in the worker and the sandbox's restore count it was
    # last built at.
    _isolated: bool = False
    _source: str | bytes = field(default="", repr=False)
    _prepare: Any = field(default=None, repr=False)
    _runtime_chunk: IsolatedChunk | None = field(default=None, repr=False)
    _built: int = 0
    # Bumped whenever the mod's Lua side is lost: a dispatch in progress stops there.
    _epoch: int = 0

    @property
    def stats(self) -> ModStats:
        tally = self._tally
        if tally is not None and tally.pending:
            calls, steps, wall_s = tally.take()
            stats = self._stats
            stats.calls += calls
            stats.steps += steps
            stats.wall_s += wall_s
        return self._stats

    @stats.setter
    def stats(self, stats: ModStats) -> None:
        if self._tally is not None:
            self._tally.take()  # what it held was of the stats replaced
        self._stats = stats

    @property
    def active(self) -> bool:
        """Loaded and not quarantined."""
        return self.quarantine is None

    @property
    def memory_bytes(self) -> int:
        """The mod's heap now, in bytes (0 once its sandbox is closed, or while its worker
        is lost)."""
        sandbox = self.sandbox
        if isinstance(sandbox, IsolatedSandbox) and sandbox.lost:
            return 0
        try:
            return sandbox.memory_used_bytes
        except MoonboxError:
            return 0

    @property
    def handler_count(self) -> int:
        return sum(1 for c in self.callbacks.values() if c.kind == "on")

    @property
    def timer_count(self) -> int:
        return len(self.callbacks) - self.handler_count
