"""Snapshots of a whole game at a tick boundary, and restoring one.

A :class:`GameSnapshot` is plain data: the tick, the world (entities, counters, queued
commands), the events on their way, and for each mod its identity and script revision,
its data state, its handlers, timers and waiting tasks as data, its queued events, its
random generator's state, its exports and its quarantine record.

What lives only in a mod's runtime (locals, upvalues, globals, coroutines) cannot be
written down. A restore builds each mod again from its source, as its load did (the main
chunk registers its handlers, timers and exports anew), then puts the snapshot's data
back. Work the main chunk does not register again comes back through a *resume point*
(``resume_point(name, fn)``): a task waiting with ``wait(ticks, name, data)`` is
re-entered as ``fn(data)`` when its wait is over, and a handler, timer or exported function
registered after loading with a declared point's function is registered again with it.
Whatever has no resume point is reported (:attr:`GameSnapshot.unresumable`,
:attr:`RestoreReport.lost`) and sent to the mod as a ``game:restored`` event; nothing is
dropped silently.
"""

from __future__ import annotations

import hashlib
import heapq
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

import msgpack

from .._errors import BudgetExceeded, Frame, MoonboxError, ScriptError
from ..bindings import Permissions
from ..isolation import WorkerPool
from ..sandbox import Budget
from ..world import World
from ._dispatch import TickReport
from ._errors import EngineError
from ._limits import ModLimits
from ._mod import Callback, Event, Failure, Mod, ModStats, Quarantine, Task
from ._protocol import DONE

__all__ = ["SNAPSHOT_FORMAT", "SNAPSHOT_VERSION", "GameSnapshot", "Lost", "ModSnapshot",
           "RestoreReport", "Snapshots"]

SNAPSHOT_FORMAT = "moonbox.game"
SNAPSHOT_VERSION = 1
# An engine operation in a mod's runtime (snapshot, restore) gets at least this many steps,
# whatever the mod's budget: a few per callback, task and export.
OP_STEPS = 100_000

_OP_FAILED = object()  # what _engine_op answers when the operation could not be done

LostKind = Literal["task", "callback", "export", "random", "mod"]


@dataclass(frozen=True, slots=True)
class Lost:
    """Work of a mod that a snapshot cannot hold, or a restore could not bring back.

    Attributes:
        mod: the mod's id.
        kind: ``task`` (a waiting task), ``callback`` (a handler or timer), ``export``
            (an exported function), ``random`` (the generator's state: its runtime could
            not be reached when the snapshot was taken; it draws from a fresh seed) or
            ``mod`` (the mod as a whole could not be restored: it is quarantined,
            ``runtime``).
        label: what it was: ``on('tick')``, ``after(3)``, ``export 'name'``, ``load``.
        where: where its function was defined (``chunk:line``).
        reason: one sentence, naming the fix.
    """

    mod: str
    kind: LostKind
    label: str
    where: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"mod": self.mod, "kind": self.kind, "label": self.label,
                "where": self.where, "reason": self.reason}


_NO_POINT = ("registered after loading with a function that is no resume point; declare "
             "it with resume_point(name, fn) in the main chunk")
_NO_WAIT_POINT = ("waits with no resume point; wait(ticks, name, data) with a point "
                  "declared by resume_point(name, fn) can be restored")


@dataclass(frozen=True)
class ModSnapshot:
    """One mod in a :class:`GameSnapshot`, as plain data (lists, dicts, strings, numbers).

    Attributes:
        id, chunk, source: the mod's identity and main chunk.
        revision: sha256 (hex) of the source's UTF-8 bytes: the script revision.
        permissions, budget: as loaded (their ``model_dump``).
        prepared, has_access: whether the host gave a preparation or access at load (a
            restore asks the host for them again).
        loaded_tick: the tick of its (last) load.
        load_ids: ``[first, end)`` of the callback ids its load registered.
        load_signature: ``[id, kind, event, interval, where]`` of each callback the load
            registered, as it did (a restore checks the main chunk registers the same).
        load_exports: ``name -> where`` of the functions the load exported.
        next_id: the id its next callback gets.
        callbacks: ``[id, kind, event, interval, due, where, point]`` of each handler and
            timer registered now.
        tasks: ``[id, due, label, where, point, data]`` of each waiting task.
        runtime: the random generator's state (its four 64-bit words as eight 32-bit
            halves) and the next task id, from the mod's runtime: nine ints; ``None`` when
            it could not be reached (a mod that never loaded, or lost its runtime).
        state: its key/value state.
        exports: ``[name, kind, value, point]``: data exports with their value, function
            exports with where they were defined and their resume point.
        queue: ``[name, data, source, tick]`` of each event waiting for it.
        quarantine: its quarantine record, or ``None``.
        failures_in_a_row, trips_in_a_row: toward quarantine.
        stats: its :class:`ModStats` (without the worker reading).
    """

    id: str
    chunk: str
    source: str | bytes
    revision: str
    permissions: dict[str, Any]
    budget: dict[str, Any]
    prepared: bool
    has_access: bool
    loaded_tick: int
    load_ids: list[int]
    load_signature: list[list[Any]]
    load_exports: dict[str, str]
    next_id: int
    callbacks: list[list[Any]]
    tasks: list[list[Any]]
    runtime: list[int] | None
    state: dict[str, Any]
    exports: list[list[Any]]
    queue: list[list[Any]]
    quarantine: dict[str, Any] | None
    failures_in_a_row: int
    trips_in_a_row: int
    stats: dict[str, Any]

    @property
    def unresumable(self) -> tuple[Lost, ...]:
        """What a restore of this mod cannot bring back, as far as the snapshot tells."""
        lost: list[Lost] = []
        first, end = self.load_ids
        for cid, kind, event, interval, _due, where, point in self.callbacks:
            if point is None and not first <= cid < end:
                lost.append(Lost(self.id, "callback", _label(kind, event, interval), where,
                                 _NO_POINT))
        for _tid, _due, label, where, point, _data in self.tasks:
            if point is None:
                lost.append(Lost(self.id, "task", label, where, _NO_WAIT_POINT))
        for name, kind, value, point in self.exports:
            if kind == "function" and point is None and self.load_exports.get(name) != value:
                lost.append(Lost(self.id, "export", f"export {name!r}", value, _NO_POINT))
        return tuple(lost)


@dataclass(frozen=True)
class GameSnapshot:
    """A whole game at a tick boundary (:meth:`Game.snapshot`); plain data throughout.

    Attributes:
        tick: ticks run when it was taken.
        seed: the game's seed.
        world: the world's snapshot, queued commands included (:meth:`World.snapshot`).
        outbox: ``[name, data, source, tick]`` of each event sent and not yet delivered.
        mods: each mod, in load (dispatch) order.
    """

    tick: int
    seed: int | None
    world: bytes
    outbox: list[list[Any]]
    mods: tuple[ModSnapshot, ...]

    @property
    def unresumable(self) -> tuple[Lost, ...]:
        """The mods' work that a restore cannot bring back (see :class:`Lost`)."""
        return tuple(lost for mod in self.mods for lost in mod.unresumable)

    def to_bytes(self) -> bytes:
        """The snapshot as msgpack: what :meth:`from_bytes` reads back."""
        return msgpack.packb({
            "format": SNAPSHOT_FORMAT, "version": SNAPSHOT_VERSION, "tick": self.tick,
            "seed": self.seed, "world": self.world, "outbox": self.outbox,
            "mods": [asdict(m) for m in self.mods],
        }, use_bin_type=True)

    @classmethod
    def from_bytes(cls, data: bytes) -> GameSnapshot:
        """A snapshot from :meth:`to_bytes`.

        Raises:
            EngineError: ``bad_snapshot``: not a game snapshot, another version, or a
                field missing or of the wrong kind.
        """
        try:
            doc = msgpack.unpackb(data, raw=False, strict_map_key=False)
        except Exception as exc:
            raise EngineError(f"not a game snapshot: {exc}", code="bad_snapshot") from None
        if not isinstance(doc, dict) or doc.get("format") != SNAPSHOT_FORMAT:
            raise EngineError("not a game snapshot (no moonbox.game format marker)",
                              code="bad_snapshot")
        if doc.get("version") != SNAPSHOT_VERSION:
            raise EngineError(f"game snapshot version {doc.get('version')!r} is not "
                              f"supported (this moonbox reads version {SNAPSHOT_VERSION})",
                              code="bad_snapshot")
        names = {f.name for f in fields(ModSnapshot)}
        try:
            mods = []
            for m in doc["mods"]:
                if not isinstance(m, dict) or set(m) != names:
                    raise ValueError("a mod's fields do not match this version's")
                mods.append(ModSnapshot(**m))
            snapshot = cls(int(doc["tick"]), doc["seed"], bytes(doc["world"]),
                           list(doc["outbox"]), tuple(mods))
        except (KeyError, TypeError, ValueError) as exc:
            raise EngineError(f"the game snapshot is damaged: {exc}",
                              code="bad_snapshot") from None
        return snapshot


@dataclass
class RestoreReport:
    """What :meth:`Game.restore` did.

    Attributes:
        tick: the tick the game is at now (the snapshot's).
        mods: the mods restored, in dispatch order.
        lost: what could not be brought back (each mod concerned also gets a
            ``game:restored`` event on the next tick listing its own).
        quarantined: mods quarantined because they could not be restored (``runtime``).
    """

    tick: int
    mods: list[str] = field(default_factory=list)
    lost: list[Lost] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)


def _label(kind: str, event: str | None, interval: int) -> str:
    return f"on({event!r})" if kind == "on" else f"{kind}({interval})"


def revision_of(source: str | bytes) -> str:
    """The script revision of a mod's source: sha256 (hex) of its UTF-8 bytes."""
    raw = source if isinstance(source, bytes) else source.encode("utf-8", "surrogateescape")
    return hashlib.sha256(raw).hexdigest()


def _event_doc(event: Event) -> list[Any]:
    return [event.name, event.data, event.source, event.tick]


def _event_from(doc: list[Any]) -> Event:
    name, data, source, tick = doc
    if not isinstance(name, str) or (source is not None and not isinstance(source, str)):
        raise ValueError(f"bad event {doc!r:.80}")
    return Event(name, data, source, int(tick))


def _error_doc(error: ScriptError) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "kind": error.kind, "message": error.message, "chunk": error.chunk,
        "line": error.line, "traceback": [[f.chunk, f.line, f.function] for f in error.traceback],
    }
    if isinstance(error, BudgetExceeded):
        doc["budget"] = [error.budget, error.limit, error.used]
    return doc


def _error_from(doc: dict[str, Any]) -> ScriptError:
    frames = tuple(Frame(c, line, fn) for c, line, fn in doc["traceback"])
    if "budget" in doc:
        kind, limit, used = doc["budget"]
        return BudgetExceeded(kind, limit, used, chunk=doc["chunk"], line=doc["line"],
                              traceback=frames)
    return ScriptError(doc["message"], chunk=doc["chunk"], line=doc["line"],
                       traceback=frames, kind=doc["kind"])


def _quarantine_doc(q: Quarantine | None) -> dict[str, Any] | None:
    if q is None:
        return None
    f = q.failure
    return {"kind": q.kind, "reason": q.reason, "tick": q.tick, "failure": None if f is None
            else {"mod": f.mod, "handler": f.handler, "where": f.where,
                  "error": _error_doc(f.error), "tick": f.tick, "caller": f.caller}}


def _quarantine_from(doc: dict[str, Any] | None) -> Quarantine | None:
    if doc is None:
        return None
    f = doc["failure"]
    failure = None if f is None else Failure(f["mod"], f["handler"], f["where"],
                                             _error_from(f["error"]), int(f["tick"]),
                                             f["caller"])
    return Quarantine(doc["kind"], doc["reason"], int(doc["tick"]), failure)


_STATS = ("calls", "steps", "wall_s", "memory_peak_bytes", "errors", "trips",
          "events_dropped", "commands_applied", "commands_refused", "restores")


class Snapshots:
    """The part of :class:`~moonbox.engine.Game` that takes and restores snapshots."""

    # Set by Game.__init__ (see _game.py); the other parts of the game are its mixins.
    world: World
    limits: ModLimits
    seed: int | None
    pool: WorkerPool | None
    _mods: dict[str, Mod]
    _order: dict[str, int]
    _subscribers: dict[str, list[Mod]]
    _outbox: list[Event]
    _tick: int
    _ticking: bool

    def snapshot(self) -> GameSnapshot:
        """The whole game as it is now, between ticks: see :class:`GameSnapshot`.

        Mods are not called: the engine asks each mod's runtime for its generator's state
        and next task id, as engine work that counts toward no call of the mod. What a
        restore could not bring back is listed in :attr:`GameSnapshot.unresumable`.

        Raises:
            EngineError: ``closed``; ``busy`` during a tick (a snapshot is taken between
                ticks, where no call is in progress).
        """
        self._check_open()  # type: ignore[attr-defined]
        if self._ticking:
            raise EngineError("a snapshot is taken between ticks, not during one",
                              code="busy")
        snapshot = GameSnapshot(
            self._tick, self.seed, self.world.snapshot(pending=True),
            [_event_doc(e) for e in self._outbox],
            tuple(self._snapshot_mod(mod) for mod in self._mods.values()))
        # Through its bytes: it shares no object with the live game, and is known to be
        # writable.
        return GameSnapshot.from_bytes(snapshot.to_bytes())

    def _snapshot_mod(self, mod: Mod) -> ModSnapshot:
        runtime = None
        if mod.quarantine is None or mod.quarantine.kind not in ("load", "runtime"):
            answer = self._engine_op(mod, "snapshot")
            if isinstance(answer, list) and len(answer) == 9 and all(
                    type(v) is int for v in answer):
                runtime = answer
        stats = mod.stats
        return ModSnapshot(
            id=mod.id, chunk=mod.chunk, source=mod._source, revision=revision_of(mod._source),
            permissions=(mod.permissions or Permissions()).model_dump(mode="python"),
            budget=mod.budget.model_dump(mode="python"),
            prepared=mod._prepare is not None, has_access=mod._has_access,
            loaded_tick=mod.loaded_tick, load_ids=list(mod._load_ids),
            load_signature=[list(s) for s in mod._load_signature],
            load_exports=dict(mod._load_exports), next_id=mod.next_id,
            callbacks=[[cb.id, cb.kind, cb.event, cb.interval, cb.due, cb.where, cb.point]
                       for _, cb in sorted(mod.callbacks.items())],
            tasks=[[t.id, t.due, t.label, t.where, t.point, t.data]
                   for _, t in sorted(mod.tasks.items())],
            runtime=runtime,
            state=dict(mod.state),
            exports=[[name, kind, value, point]
                     for name, (kind, value, point) in mod.exports.items()],
            queue=[_event_doc(e) for e in mod.queue],
            quarantine=_quarantine_doc(mod.quarantine),
            failures_in_a_row=mod.failures_in_a_row, trips_in_a_row=mod.trips_in_a_row,
            stats={name: getattr(stats, name) for name in _STATS})

    def _engine_op(self, mod: Mod, op: str, arg: Any = None) -> Any:
        """An engine operation in the mod's dispatcher (``0, op, arg``): its answer, or
        ``_OP_FAILED`` when the runtime could not be reached or the operation failed. Not
        a call of the mod: nothing is counted toward its stats or quarantine."""
        if mod._isolated and (mod.sandbox.lost  # type: ignore[union-attr]
                              or mod.sandbox.restores != mod._built):  # type: ignore[union-attr]
            return _OP_FAILED
        run = mod._run
        if run is None or not run._open:
            handle = mod._dispatch
            if handle is None or not handle.valid:
                return _OP_FAILED
            try:
                run = mod._run = mod.sandbox.start(handle)
            except MoonboxError:
                return _OP_FAILED
        budget = mod.budget
        if budget.steps < OP_STEPS:
            budget = budget.model_copy(update={"steps": OP_STEPS})
        try:
            outcome = run.resume(0, op, arg, budget=budget)
        except MoonboxError:
            mod._run = None
            return _OP_FAILED
        if outcome.status != "yielded":
            mod._run = None  # a trip ends the dispatcher; the next call starts it again
            return _OP_FAILED
        values = outcome.values
        if not values:
            return None  # done, with nothing to say
        if values[0] != DONE:
            return _OP_FAILED
        return values[1] if len(values) > 1 else None

    def restore(
        self,
        snapshot: GameSnapshot | bytes,
        *,
        prepare: Callable[[str], Callable[[Any], None] | None] | None = None,
        access: Mapping[str, Any] | None = None,
    ) -> RestoreReport:
        """Replace the whole game by a snapshot: its tick, world, events and mods.

        Every loaded mod is unloaded first, and the game takes the snapshot's seed (what
        mods loaded later are seeded from). Each mod of the snapshot gets a fresh sandbox
        from this game's registry, under the permissions and budget it had, and is built
        as its load built it: the engine library, the host's preparation and its main
        chunk, at the tick it was loaded at, in load order. What those main chunks ask of
        the world and send to other mods is taken back; then the snapshot's data goes in:
        the world, each mod's state, timers' schedule, tasks, exports, queued events,
        generator, quarantine record and failure counts. The main chunk must register the
        same handlers and timers as it did (the snapshot holds what it registered); a mod
        whose main chunk does otherwise, or fails, is quarantined (``runtime``) and
        reported. Restoring and running on gives the world the game would have had.

        Args:
            snapshot: a :class:`GameSnapshot` or its bytes.
            prepare: ``prepare(mod_id)``: the preparation to build that mod with (see
                :meth:`load_mod`), asked for each mod that was loaded with one.
            access: what the host captured for each mod loaded with access, by id.

        Raises:
            EngineError: ``closed``; ``busy`` during a tick; ``bad_snapshot`` (damaged,
                another version, a source that does not match its revision, data this
                game's limits refuse); ``needs_prepare`` / ``needs_access`` (a mod was
                loaded with one and none is given), all before anything changes; a
                world or data refusal found while restoring leaves the game with no mods.
        """
        self._check_open()  # type: ignore[attr-defined]
        if self._ticking:
            raise EngineError("a restore happens between ticks, not during one", code="busy")
        if isinstance(snapshot, (bytes, bytearray, memoryview)):
            snapshot = GameSnapshot.from_bytes(bytes(snapshot))
        preparations: dict[str, Any] = {}
        for m in snapshot.mods:
            if revision_of(m.source) != m.revision:
                raise EngineError(f"mod {m.id!r}: the source does not match its revision",
                                  code="bad_snapshot")
            if m.prepared:
                fn = prepare(m.id) if prepare is not None else None
                if fn is None:
                    raise EngineError(f"mod {m.id!r} was loaded with a preparation: pass "
                                      "prepare= to restore", code="needs_prepare")
                preparations[m.id] = fn
            if m.has_access and (access is None or m.id not in access):
                raise EngineError(f"mod {m.id!r} was loaded with access: pass access= to "
                                  "restore", code="needs_access")
        for mod_id in list(self._mods):
            self.unload_mod(mod_id)  # type: ignore[attr-defined]
        self.seed = snapshot.seed
        self._order.clear()
        self._subscribers.clear()
        self._outbox.clear()
        report = RestoreReport(snapshot.tick)
        try:
            # First every main chunk, in load order (one may import from another), then
            # the data: what the main chunks did to each other's state is overwritten.
            built = [(m, self._restore_build(m, preparations.get(m.id),
                                             (access or {}).get(m.id), report))
                     for m in snapshot.mods]
            self.world.restore(snapshot.world)
            for m, mod in built:
                self._restore_data(m, mod, report)
            self._outbox[:] = [_event_from(e) for e in snapshot.outbox]
        except (KeyError, TypeError, ValueError, MoonboxError) as exc:
            for mod_id in list(self._mods):
                self.unload_mod(mod_id)  # type: ignore[attr-defined]
            self._outbox.clear()
            self._tick = snapshot.tick
            if isinstance(exc, MoonboxError) and getattr(exc, "code", None) != "bad_state":
                raise
            raise EngineError(f"the snapshot could not be restored: {exc}",
                              code="bad_snapshot") from None
        self._tick = snapshot.tick
        self._report = TickReport(snapshot.tick)
        for _, mod in built:
            lost = [x for x in report.lost if x.mod == mod.id]
            if "game:restored" in mod.by_event and mod.quarantine is None:
                self._enqueue(mod, Event("game:restored", {  # type: ignore[attr-defined]
                    "tick": snapshot.tick,
                    "lost": [{"kind": x.kind, "label": x.label, "where": x.where,
                              "reason": x.reason} for x in lost]}, None, snapshot.tick))
        return report

    def _restore_build(self, m: ModSnapshot, prepare: Any, access: Any,
                       report: RestoreReport) -> Mod:
        """Build one mod of a snapshot as its load did; its data comes after."""
        permissions = Permissions.model_validate(m.permissions)
        budget = Budget.model_validate(m.budget)
        mod = self._open_mod(m.id, m.source, m.chunk, permissions, budget,  # type: ignore[attr-defined]
                             access, prepare)
        self._mods[m.id] = mod
        self._order[m.id] = len(self._order)
        report.mods.append(m.id)
        # What the main chunk asks of the world and sends to other mods is overwritten by
        # the snapshot's world and events.
        self._tick = m.loaded_tick
        mod.next_id = m.load_ids[0]
        ok = self._build(mod, m.source, prepare)  # type: ignore[attr-defined]
        signature = [list(s) for s in mod._load_signature]
        if not ok:
            if (m.quarantine or {}).get("kind") not in ("load", "runtime"):
                self._unrestorable(mod, report, f"its main chunk failed when built again: "
                                   f"{mod.quarantine.reason if mod.quarantine else '?'}")
        elif list(mod._load_ids) != list(m.load_ids) or signature != m.load_signature:
            self._unrestorable(mod, report, "its main chunk registered other handlers or "
                               "timers than at its load; a main chunk that registers what the "
                               "state says cannot be restored: register the same, and decide "
                               "in the handlers")
        return mod

    def _unrestorable(self, mod: Mod, report: RestoreReport, why: str) -> None:
        reason = f"could not be restored: {why}; unload it and load it again"
        mod.quarantine = None
        self._quarantine(mod, "runtime", reason, None)  # type: ignore[attr-defined]
        report.quarantined.append(mod.id)
        report.lost.append(Lost(mod.id, "mod", "load", mod.chunk.lstrip("@="), why))

    def _restore_data(self, m: ModSnapshot, mod: Mod, report: RestoreReport) -> None:
        """Put a mod's data back, into what its main chunk registered again."""
        lost: list[Lost] = []
        first, end = m.load_ids
        restorable = mod.id not in report.quarantined
        if restorable and mod._dispatch is not None:
            self._restore_runtime(m, mod, lost)
        if restorable:
            mod.quarantine = _quarantine_from(m.quarantine)
        mod.next_id = m.next_id
        mod.loaded_tick = m.loaded_tick
        mod._load_ids = (first, end)
        mod._load_signature = tuple(tuple(s) for s in m.load_signature)
        mod._load_exports = dict(m.load_exports)
        self.set_state(mod.id, m.state)  # type: ignore[attr-defined]
        mod.queue = deque(_event_from(e) for e in m.queue)
        mod.failures_in_a_row = int(m.failures_in_a_row)
        mod.trips_in_a_row = int(m.trips_in_a_row)
        mod.stats = ModStats(**{name: m.stats[name] for name in _STATS},
                             worker=mod.stats.worker)
        report.lost.extend(lost)

    def _restore_runtime(self, m: ModSnapshot, mod: Mod, lost: list[Lost]) -> None:
        """The snapshot's handlers, timers, tasks and exports, into what the main chunk
        registered again, and the generator's state into its runtime."""
        first, end = m.load_ids
        rebuilt = mod.callbacks
        callbacks: dict[int, Callback] = {}
        bind: list[list[Any]] = []
        for cid, kind, event, interval, due, where, point in m.callbacks:
            if first <= cid < end and cid in rebuilt:
                cb = rebuilt[cid]
            elif point is not None:
                cb = Callback(cid, kind, event, interval, due, where, point)
                bind.append([cid, point, kind == "after"])
            else:
                lost.append(Lost(mod.id, "callback", _label(kind, event, interval), where,
                                 _NO_POINT))
                continue
            cb.due = due
            callbacks[cid] = cb
        drop = [cid for cid in rebuilt if cid not in callbacks]
        exports: dict[str, tuple[str, Any, str | None]] = {}
        export_points: list[list[Any]] = []  # [name, point]; no point: not exported
        for name, kind, value, point in m.exports:
            if kind == "data":
                exports[name] = ("data", value, None)
            elif name in mod.exports and mod.exports[name][:2] == ("function", value):
                exports[name] = mod.exports[name]  # the main chunk exported it again
            elif point is not None:
                exports[name] = ("function", value, point)
                export_points.append([name, point])
            else:
                lost.append(Lost(mod.id, "export", f"export {name!r}", value, _NO_POINT))
        for name, entry in mod.exports.items():
            if entry[0] == "function" and exports.get(name) is not entry:
                if not any(name == e[0] for e in export_points):
                    export_points.append([name, None])
        tasks: dict[int, Task] = {}
        revive: list[list[Any]] = []
        for tid, due, label, where, point, data in m.tasks:
            if point is None:
                lost.append(Lost(mod.id, "task", label, where, _NO_WAIT_POINT))
                continue
            tasks[tid] = Task(tid, due, label, where, point, data)
            revive.append([tid, point, data])
        if m.runtime is not None:
            random, next_task = m.runtime[:8], m.runtime[8]
        else:
            random, next_task = None, max([0, *tasks])
            lost.append(Lost(mod.id, "random", "math.random", mod.chunk.lstrip("@="),
                             "its runtime could not be reached when the snapshot was taken: "
                             "it draws from a fresh seed"))
        answer = self._engine_op(mod, "restore", {
            "random": random, "next_task": next_task, "drop": drop, "bind": bind,
            "exports": export_points, "tasks": revive})
        if answer is _OP_FAILED:  # nothing was bound
            gone = {cb.point for cb in callbacks.values()} | {t.point for t in tasks.values()}
            gone |= {e[1] for e in export_points}
        else:  # the points the main chunk did not declare again
            gone = set(answer) if isinstance(answer, list) else set()
        gone.discard(None)
        bound = {b[0] for b in bind}
        for cid in [c for c, cb in callbacks.items() if cb.point in gone and c in bound]:
            cb = callbacks.pop(cid)
            lost.append(Lost(mod.id, "callback", cb.label, cb.where,
                             f"its resume point {cb.point!r} is not declared"))
        for tid in [t for t, task in tasks.items() if task.point in gone]:
            task = tasks.pop(tid)
            lost.append(Lost(mod.id, "task", task.label, task.where,
                             f"its resume point {task.point!r} is not declared"))
        for name in [n for n, e in exports.items() if [n, e[2]] in export_points
                     and e[2] in gone]:
            entry = exports.pop(name)
            lost.append(Lost(mod.id, "export", f"export {name!r}", entry[1],
                             f"its resume point {entry[2]!r} is not declared"))
        self._set_callbacks(mod, callbacks)
        mod.tasks = tasks
        mod.exports = exports

    def _set_callbacks(self, mod: Mod, callbacks: dict[int, Callback]) -> None:
        """Make ``callbacks`` the mod's handlers and timers: events, heap, subscribers."""
        for subs in self._subscribers.values():
            if mod in subs:
                subs.remove(mod)
        mod.callbacks = callbacks
        mod.by_event = {}
        mod.timers = []
        mod._stale_timers = 0
        for cid, cb in sorted(callbacks.items()):
            if cb.kind == "on":
                assert cb.event is not None
                mod.by_event.setdefault(cb.event, []).append(cb)
            else:
                mod.timers.append((cb.due, cid))
        heapq.heapify(mod.timers)
        for event in mod.by_event:
            subs = self._subscribers.setdefault(event, [])
            subs.append(mod)
            subs.sort(key=lambda x: self._order[x.id])
