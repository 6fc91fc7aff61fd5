"""The game thread's side of the dashboard: what each tick did, kept and summed up as plain data.

Everything here runs on the thread that ticks the game (``Dashboard.after_tick``). What the
web side may read is :class:`Published` (replaced whole, never changed once made) and the
log, read under a lock. Nothing the web side holds ever refers to a mod, a sandbox or the
game.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .._errors import BudgetExceeded, MoonboxError, ScriptError
from ..engine import RUNTIME_CHUNK
from ..world import REASONS

if TYPE_CHECKING:
    from ..engine import Failure, Game, Mod, TickReport
    from ..isolation import WorkerPool
    from ..mods import ModHost, ReloadResult

__all__ = ["LOG_KINDS", "Published", "Recorder", "ShardSource", "Sources"]

Sources = Mapping[str, str] | Callable[[str], "str | None"]
"""Where the dashboard finds a chunk's source text (``@mods/waves/main.lua`` -> text)."""


class ShardSource(Protocol):
    """A sharded game as the dashboard reads it (``moonbox.cluster.ShardedGame``): its
    figures as plain data. Read on the game thread, where the sharded game is ticked."""

    def observe(self) -> dict[str, Any]: ...

LOG_KINDS = ("report", "error", "trip", "quarantine", "refused", "reload", "restored",
             "action", "dashboard")
"""The kinds of live-log entries (see docs/dashboard.md)."""

HISTORY_S = 300.0  # how far back the tick chart goes
BUCKETS = 150  # points of the tick chart
RECENT_S = 60.0  # the window of the percentiles and the per-minute counts
MAX_RECENT_TICKS = 5000  # ticks the percentiles are taken over, at most
RATE_WINDOW_S = 5.0  # per-mod rates are taken over the last seconds
PUBLISH_INTERVAL_S = 0.2  # a summary at most this often (and after every action)
WORLD_INTERVAL_S = 0.5  # the world view at most this often
SLOW_INTERVAL_S = 1.0  # worker and shard figures, mod heaps (a round trip each when apart)
MAX_RECOVERIES = 20  # a sharded game's recoveries listed, newest
MAX_LOG = 2000
MAX_LOG_PER_TICK = 200
MAX_ERROR_GROUPS = 200
MAX_ENTITIES = 2000
MAX_RECENT_ITEMS = 50  # refused commands and events listed
MAX_TEXT = 2000  # characters of one message kept
SOURCE_CONTEXT = 4  # source lines shown either side of a failing line
_FILE_LINE = re.compile(r"(mods/[^\s:]+):(\d+): ")  # how the mod host names a file and line


def _text(value: Any, limit: int = MAX_TEXT) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _preview(value: Any, limit: int = 200) -> str:
    """Plain data as one short line of JSON (non-finite numbers as strings)."""
    def plain(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return str(v)
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in list(v.items())[:50]}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in list(v)[:50]]
        return v
    try:
        text = json.dumps(plain(value), ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return _text(text, limit)


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    i = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[i]


def _context(chunk: str, text: str, line: int) -> dict[str, Any] | None:
    """The source lines around ``line`` of ``text``."""
    lines = text.splitlines()
    if line == len(lines) + 1:  # at the end of the file ('<eof>' expected ...)
        lines.append("")
    if not 0 < line <= len(lines):
        return None
    first, last = max(1, line - SOURCE_CONTEXT), min(len(lines), line + SOURCE_CONTEXT)
    return {"chunk": chunk, "line": line,
            "lines": [{"line": n, "text": _text(lines[n - 1], 300)}
                      for n in range(first, last + 1)]}


@dataclass(frozen=True)
class Published:
    """One published view of the game: plain data, never changed once made.

    Attributes:
        version: one more for each publication.
        summary: mods, cost, tick health, events and queues, workers (see docs/dashboard.md).
        world: the world view (entities by id, at most :data:`MAX_ENTITIES`).
        world_version: one more each time ``world`` was read again.
        errors: the failures, grouped, newest first.
        errors_version: one more each time ``errors`` changed.
    """

    version: int
    summary: dict[str, Any]
    world: dict[str, Any]
    world_version: int
    errors: list[dict[str, Any]] = field(default_factory=list)
    errors_version: int = 0


class _Bucket:
    """The ticks of one slice of the chart's time."""

    __slots__ = ("index", "ticks", "sum_ms", "max_ms", "over", "calls", "failures", "applied",
                 "refused", "events")

    def __init__(self, index: int) -> None:
        self.index = index
        self.ticks = self.calls = self.failures = self.applied = self.refused = 0
        self.events = self.over = 0
        self.sum_ms = self.max_ms = 0.0


class Recorder:
    """Keeps what the game did and publishes summaries of it; the game thread's only.

    Args:
        game: the game.
        mods: its mod host, if any (status of mods that failed to load, reloads, sources).
        store: the versions store (its presence only: the web side reads it itself).
        pool: the worker pool to report (default: the game's).
        shards: a sharded game whose shards to report, as the workers are.
        tick_budget_s: the time one tick may take (the chart's budget line).
        sources: chunk name -> source text, for error detail beyond the mod host's files.
        clock: monotonic seconds (injectable for tests); ``wall``: Unix seconds.
    """

    def __init__(self, game: Game, *, mods: ModHost | None = None, store: Any = None,
                 pool: WorkerPool | None = None, shards: ShardSource | None = None,
                 tick_budget_s: float = 0.05,
                 sources: Sources | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.game = game
        self.mods = mods
        self.store = store
        self.pool = pool
        self.shards = shards
        self.tick_budget_s = tick_budget_s
        self.sources = sources
        self.clock = clock
        self.wall = wall
        self._bucket_s = HISTORY_S / BUCKETS
        self._buckets: deque[_Bucket] = deque()
        self._recent: deque[tuple[float, float]] = deque(maxlen=MAX_RECENT_TICKS)
        self._rates: deque[tuple[float, int, dict[str, tuple[int, int, float]]]] = deque()
        self._log: deque[dict[str, Any]] = deque(maxlen=MAX_LOG)
        self._log_lock = threading.Lock()
        self._seq = 0
        self._groups: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()
        self._groups_by_id: dict[int, dict[str, Any]] = {}
        self._group_ids = 0
        self._errors_version = 0
        self._errors_published = -1
        self._errors: list[dict[str, Any]] = []
        self._refused: deque[dict[str, Any]] = deque(maxlen=MAX_RECENT_ITEMS)
        self._refused_by_reason: Counter[str] = Counter()
        self._events: deque[dict[str, Any]] = deque(maxlen=MAX_RECENT_ITEMS)
        self._events_by_name: Counter[str] = Counter()
        self._totals: Counter[str] = Counter()
        self._wall_sum = self._mods_wall()
        self._last_tick_ms = 0.0
        self._version = 0
        self._world_version = 0
        self._world: dict[str, Any] = {}
        self._world_read = -math.inf
        self._slow_read = -math.inf
        self._workers: dict[str, Any] = {"isolated": False, "workers": [], "spares": []}
        self._shards: dict[str, Any] = {"sharded": False, "shards": []}
        self._memory: dict[str, int] = {}
        self.published = self._publish()
        self._published_at = -math.inf  # the first tick publishes at once

    # -- the log ---------------------------------------------------------------------------

    def log(self, kind: str, message: str, *, mod: str | None = None, tick: int | None = None,
            **fields: Any) -> dict[str, Any]:
        """Add an entry to the live log; the entry."""
        entry = {"seq": 0, "tick": self.game.tick_count if tick is None else tick,
                 "time_s": round(self.wall(), 3), "kind": kind, "mod": mod,
                 "message": _text(message), **fields}
        with self._log_lock:
            self._seq += 1
            entry["seq"] = self._seq
            self._log.append(entry)
        return entry

    def log_since(self, since: int = 0, *, mod: str | None = None, kind: str | None = None,
                  limit: int = 500) -> list[dict[str, Any]]:
        """Log entries after ``since`` (a ``seq``), oldest first, at most the ``limit`` newest.
        Safe from any thread."""
        with self._log_lock:
            entries = [e for e in self._log if e["seq"] > since]
        if mod:
            entries = [e for e in entries if e["mod"] == mod]
        if kind:
            kinds = set(kind.split(","))
            entries = [e for e in entries if e["kind"] in kinds]
        return entries[-limit:] if limit > 0 else []

    @property
    def last_seq(self) -> int:
        with self._log_lock:
            return self._seq

    # -- each tick -------------------------------------------------------------------------

    def record(self, report: TickReport, elapsed_s: float | None) -> None:
        """Take in one tick's report. ``elapsed_s``: how long the tick took (``None``: the
        time the mods' calls took, from their stats)."""
        now = self.clock()
        wall_sum = self._mods_wall()
        if elapsed_s is None:
            elapsed_s = max(0.0, wall_sum - self._wall_sum)
        self._wall_sum = wall_sum
        ms = elapsed_s * 1000.0
        self._last_tick_ms = ms
        applied = sum(1 for r in report.results if r.status == "applied")
        refused = len(report.results) - applied
        bucket = self._bucket(now)
        bucket.ticks += 1
        bucket.sum_ms += ms
        bucket.max_ms = max(bucket.max_ms, ms)
        bucket.over += ms > self.tick_budget_s * 1000.0
        bucket.calls += report.calls
        bucket.failures += len(report.failures)
        bucket.applied += applied
        bucket.refused += refused
        bucket.events += len(report.events)
        self._recent.append((now, ms))
        self._totals.update(ticks=1, calls=report.calls, failures=len(report.failures),
                            applied=applied, refused=refused, events=len(report.events))
        self._take_in(report)

    def _bucket(self, now: float) -> _Bucket:
        index = int(now // self._bucket_s)
        buckets = self._buckets
        if not buckets or buckets[-1].index != index:
            buckets.append(_Bucket(index))
        while buckets and buckets[0].index <= index - BUCKETS:
            buckets.popleft()
        return buckets[-1]

    def _take_in(self, report: TickReport) -> None:
        t = report.tick
        room = MAX_LOG_PER_TICK  # reports, failures and refusals kept of this tick
        dropped = 0
        for mod_id, line in report.reports:
            if room > 0:
                room -= 1
                self.log("report", line, mod=mod_id, tick=t)
            else:
                dropped += 1
        for failure in report.failures:
            group = self._group(failure)
            if room > 0:
                room -= 1
                error = failure.error
                self.log("trip" if failure.trip else "error", error.message, mod=failure.mod,
                         tick=t, handler=failure.handler, defined_at=failure.where,
                         where=error.where, error_kind=error.kind,
                         budget=getattr(error, "budget", None), group=group)
            else:
                dropped += 1
        for result in report.results:
            if result.status == "applied":
                continue
            reason = result.reason or "refused"
            self._refused_by_reason[reason] += 1
            self._refused.append({"tick": t, "id": result.id, "mod": result.mod,
                                  "command": result.kind, "reason": reason,
                                  "message": _text(result.message, 300)})
            if room > 0:
                room -= 1
                self.log("refused", f"{result.kind} refused: {reason}: {result.message}",
                         mod=result.mod, tick=t, reason=reason, command=result.kind)
            else:
                dropped += 1
        events = report.events
        self._events_by_name.update(event.name for event in events)
        for event in events[-MAX_RECENT_ITEMS:]:  # only those that stay listed are shown
            self._events.append({"tick": event.tick, "name": event.name, "source": event.source,
                                 "data": _preview(event.data)})
        for mod_id in report.quarantined:  # always kept: few, and what matters most
            q = self._quarantine_of(mod_id)
            where = q.failure.error.where if q is not None and q.failure is not None else None
            self.log("quarantine", q.reason if q is not None else "quarantined", mod=mod_id,
                     tick=t, where=where, quarantine_kind=q.kind if q is not None else None)
        for mod_id in report.restored:
            self.log("restored", "built again in a fresh worker (its worker was lost)",
                     mod=mod_id, tick=t)
        if dropped:
            self.log("dashboard", f"{dropped} more entries of tick {t} were not kept", tick=t)

    def note_reload(self, result: ReloadResult) -> None:
        """A load or reload of the mod host, as a log entry (unchanged ones are left out)."""
        if result.unchanged:
            return
        if result.ok:
            what = "removed: unloaded" if result.removed else \
                f"live {result.version_hash[:12]} ({result.elapsed_s * 1000:.0f} ms)"
            self.log("reload", what, mod=result.mod, ok=True)
        else:
            error = result.error or "refused"
            group = self._reload_group(result.mod, error)
            first = error.splitlines()[0]
            self.log("reload", f"refused, the previous version (if any) runs on: {first}",
                     mod=result.mod, ok=False, detail=_text(error), group=group,
                     where=self._groups_by_id[group]["where"])

    def _reload_group(self, mod_id: str, error: str) -> int:
        """A refused load or reload as an error group: the mod host's sentence, and when it
        names ``mods/<id>/<file>:<line>``, the lines around it in the refused version."""
        message = error.splitlines()[0]
        if message.startswith(f"mod {mod_id!r}: "):
            message = message[len(f"mod {mod_id!r}: "):]
        m = _FILE_LINE.search(message)
        chunk, line = (f"@{m.group(1)}", int(m.group(2))) if m else (None, None)
        if m is not None and m.start() == 0:
            message = message[m.end():]
        key = (mod_id, "reload", chunk, line, "reload", message)
        group = self._groups.get(key)
        now = round(self.wall(), 3)
        tick = self.game.tick_count
        if group is None:
            source = None
            state = self.mods.mods.get(mod_id) if self.mods is not None else None
            package = state.pending if state is not None and state.pending is not None \
                else state.package if state is not None else None
            if m and package is not None and m.group(1).startswith(f"mods/{package.id}/"):
                text = package.files.get(m.group(1)[len(f"mods/{package.id}/"):])
                if text is not None:
                    source = _context(chunk or "", text, line or 0)
            group = self._new_group(key, {
                "mod": mod_id, "handler": "reload", "defined_at": None, "kind": "reload",
                "error_kind": "reload", "budget": None, "message": _text(message),
                "where": m.group(0)[:-2] if m else None, "chunk": chunk, "line": line,
                "traceback": [], "limit": None, "first_tick": tick, "first_time_s": now,
                "source": source, "detail": _text(error)})
        else:
            self._groups.move_to_end(key)
        group["count"] += 1
        group["last_tick"] = tick
        group["last_time_s"] = now
        self._errors_version += 1
        return int(group["id"])

    def _new_group(self, key: tuple[Any, ...], fields: dict[str, Any]) -> dict[str, Any]:
        self._group_ids += 1
        group = {"id": self._group_ids, "count": 0, **fields}
        self._groups[key] = group
        self._groups_by_id[self._group_ids] = group
        while len(self._groups) > MAX_ERROR_GROUPS:
            _, dropped = self._groups.popitem(last=False)
            self._groups_by_id.pop(dropped["id"], None)
        return group

    # -- errors ----------------------------------------------------------------------------

    def _group(self, failure: Failure) -> int:
        error = failure.error
        key = (failure.mod, failure.handler, error.chunk, error.line, error.kind, error.message)
        group = self._groups.get(key)
        now = round(self.wall(), 3)
        if group is None:
            group = self._new_group(key, {
                "mod": failure.mod, "handler": failure.handler, "defined_at": failure.where,
                "kind": "trip" if failure.trip else "error", "error_kind": error.kind,
                "budget": getattr(error, "budget", None), "message": _text(error.message),
                "where": error.where, "chunk": error.chunk, "line": error.line,
                "traceback": [{**f.to_dict(), "text": str(f)} for f in error.traceback
                              if f.chunk != RUNTIME_CHUNK],
                "limit": error.limit if isinstance(error, BudgetExceeded) else None,
                "first_tick": failure.tick, "first_time_s": now,
                "source": self._source_context(error), "detail": None})
        else:
            self._groups.move_to_end(key)
        group["count"] += 1
        group["last_tick"] = failure.tick
        group["last_time_s"] = now
        self._errors_version += 1
        return int(group["id"])

    def _source_context(self, error: ScriptError) -> dict[str, Any] | None:
        if not error.chunk or not error.line:
            return None
        text = self._source_of(error.chunk)
        return None if text is None else _context(error.chunk, text, error.line)

    def _source_of(self, chunk: str) -> str | None:
        sources = self.sources
        if sources is not None:
            try:
                text = sources(chunk) if callable(sources) else sources.get(chunk)
            except Exception:  # noqa: BLE001 - a host's lookup; the detail goes without
                text = None
            if isinstance(text, str):
                return text
        host = self.mods
        if host is not None and chunk.startswith("@mods/"):
            mod_id, _, path = chunk[len("@mods/"):].partition("/")
            state = host.mods.get(mod_id)
            if state is not None and state.package is not None:
                return state.package.files.get(path)
        return None

    # -- publishing ------------------------------------------------------------------------

    def maybe_publish(self, *, force: bool = False) -> None:
        """Publish a new summary if the last one is older than :data:`PUBLISH_INTERVAL_S`
        (or ``force``)."""
        if force or self.clock() - self._published_at >= PUBLISH_INTERVAL_S:
            self.published = self._publish(force_world=force)

    def _publish(self, *, force_world: bool = False) -> Published:
        now = self.clock()
        self._published_at = now
        if now - self._slow_read >= SLOW_INTERVAL_S:
            self._slow_read = now
            self._workers = self._read_workers()
            self._shards = self._read_shards()
            self._memory = {m.id: m.memory_bytes for m in self.game.mods}
        if force_world or now - self._world_read >= WORLD_INTERVAL_S:
            self._world_read = now
            self._world = self._read_world()
            self._world_version += 1
        if self._errors_published != self._errors_version:
            self._errors_published = self._errors_version
            self._errors = [dict(g) for g in reversed(self._groups.values())]
        self._version += 1
        mods = list(self.game.mods)
        summary = {
            "tick": self.game.tick_count,
            "time_s": round(self.wall(), 3),
            "isolated": self.game.pool is not None or self.pool is not None,
            "store": self.store is not None,
            "mods_dir": str(self.mods.mods_dir) if self.mods is not None else None,
            "log_seq": self.last_seq,
            "errors": len(self._groups),
            "mods": self._mods_view(mods),
            "cost": self._cost_view(mods, now),
            "health": self._health_view(now),
            "queues": self._queues_view(mods, now),
            "workers": self._workers,
            "shards": self._shards,
        }
        return Published(self._version, summary, self._world, self._world_version,
                         self._errors, self._errors_version)

    def _mods_wall(self) -> float:
        return sum(m.stats.wall_s for m in self.game.mods)

    def _quarantine_of(self, mod_id: str) -> Any:
        try:
            return self.game.mod(mod_id).quarantine
        except MoonboxError:
            return None

    def _mods_view(self, mods: list[Mod]) -> list[dict[str, Any]]:
        states = self.mods.mods if self.mods is not None else {}
        rows = []
        seen = set()
        for mod in mods:
            seen.add(mod.id)
            rows.append(self._mod_row(mod.id, mod, states.get(mod.id)))
        for mod_id in sorted(set(states) - seen):
            rows.append(self._mod_row(mod_id, None, states[mod_id]))
        return rows

    def _mod_row(self, mod_id: str, mod: Mod | None, state: Any) -> dict[str, Any]:
        q = mod.quarantine if mod is not None else None
        if mod is None or (q is not None and q.kind == "load"):
            status = "failed"
        elif q is not None:
            status = "quarantined"
        else:
            status = "running"
        package = state.package if state is not None else None
        error = state.error if state is not None else None
        if error is None and q is not None and q.failure is not None:
            error = str(q.failure.error)
        row: dict[str, Any] = {
            "id": mod_id, "status": status,
            "change_refused": state is not None and state.status == "failed_reload",
            "error": _text(error) if error else None,
            "quarantine": None if q is None else {
                "kind": q.kind, "reason": _text(q.reason), "tick": q.tick,
                "where": q.failure.error.where if q.failure is not None else None,
                "liftable": q.kind in ("failures", "trips", "host")},
            "version": package.manifest.version if package is not None else None,
            "hash": package.version_hash[:12] if package is not None else None,
            "folder": package.root.name if package is not None else None,
            "reloads": state.reloads if state is not None else 0,
            "chunk": mod.chunk if mod is not None else None,
            "handlers": mod.handler_count if mod is not None else 0,
            "timers": mod.timer_count if mod is not None else 0,
            "tasks": len(mod.tasks) if mod is not None else 0,
            "reloadable": self.mods is not None,
        }
        return row

    def _cost_view(self, mods: list[Mod], now: float) -> list[dict[str, Any]]:
        tick = self.game.tick_count
        current = {m.id: (m.stats.calls, m.stats.steps, m.stats.wall_s) for m in mods}
        rates = self._rates
        rates.append((now, tick, current))
        while len(rates) > 2 and rates[1][0] <= now - RATE_WINDOW_S:
            rates.popleft()
        budget_ms = self.tick_budget_s * 1000.0
        rows = []
        for mod in mods:
            s = mod.stats
            calls, steps, wall_s = current[mod.id]
            per = (0.0, 0.0, 0.0)
            # The oldest reading in the window of this very mod (a reloaded mod starts its
            # stats again from 0).
            for _, then_tick, before in rates:
                old = before.get(mod.id)
                if old is not None and old[0] <= calls and old[1] <= steps:
                    ticks = tick - then_tick
                    if ticks > 0:
                        per = ((calls - old[0]) / ticks, (steps - old[1]) / ticks,
                               (wall_s - old[2]) * 1000 / ticks)
                    break
            rows.append({
                "mod": mod.id, "calls": s.calls, "steps": s.steps,
                "wall_ms": round(s.wall_s * 1000, 3),
                "calls_per_tick": round(per[0], 2), "steps_per_tick": round(per[1], 1),
                "ms_per_tick": round(per[2], 4),
                "budget_share": round(per[2] / budget_ms, 4) if budget_ms else 0.0,
                "memory_bytes": self._memory.get(mod.id, 0),
                "memory_peak_bytes": s.memory_peak_bytes, "errors": s.errors, "trips": s.trips,
                "commands_applied": s.commands_applied, "commands_refused": s.commands_refused,
                "events_dropped": s.events_dropped, "restores": s.restores,
            })
        rows.sort(key=lambda r: (-r["ms_per_tick"], -r["steps_per_tick"], -r["trips"],
                                 -r["errors"], r["mod"]))
        return rows

    def _health_view(self, now: float) -> dict[str, Any]:
        recent = sorted(ms for t, ms in self._recent if t >= now - RECENT_S)
        budget_ms = self.tick_budget_s * 1000.0
        index = int(now // self._bucket_s)
        series = [{"ago_s": round((index - b.index) * self._bucket_s, 1),
                   "mean_ms": round(b.sum_ms / b.ticks, 4), "max_ms": round(b.max_ms, 4),
                   "ticks": b.ticks, "over": b.over}
                  for b in self._buckets if b.ticks]
        span = [t for t, _ in self._recent if t >= now - RECENT_S]
        tps = (len(span) - 1) / (span[-1] - span[0]) if len(span) > 1 and span[-1] > span[0] \
            else 0.0
        return {
            "budget_ms": round(budget_ms, 3), "last_ms": round(self._last_tick_ms, 4),
            "p50_ms": round(_percentile(recent, 0.5), 4),
            "p90_ms": round(_percentile(recent, 0.9), 4),
            "max_ms": round(recent[-1], 4) if recent else 0.0,
            "over_budget": sum(1 for ms in recent if ms > budget_ms),
            "ticks": len(recent), "window_s": RECENT_S, "tps": round(tps, 2),
            "history_s": HISTORY_S, "bucket_s": self._bucket_s, "series": series,
        }

    def _queues_view(self, mods: list[Mod], now: float) -> dict[str, Any]:
        index = int(now // self._bucket_s)
        minute = [b for b in self._buckets if b.index > index - RECENT_S / self._bucket_s]
        world = self.game.world
        return {
            "last_minute": {k: sum(getattr(b, k) for b in minute)
                            for k in ("ticks", "calls", "failures", "applied", "refused",
                                      "events")},
            "totals": dict(self._totals),
            "refused_by_reason": dict(self._refused_by_reason.most_common()),
            "reasons": {r: REASONS.get(r, "") for r in self._refused_by_reason},
            "refused": list(reversed(self._refused)),
            "events_by_name": dict(self._events_by_name.most_common(30)),
            "events": list(reversed(self._events)),
            "world": {"pending": len(world.pending), "max_pending": world.max_pending,
                      "entities": len(world), "max_entities": world.max_entities},
            "mods": [{"mod": m.id, "queued_events": len(m.queue),
                      "events_dropped": m.stats.events_dropped,
                      "tasks": len(m.tasks), "timers": m.timer_count,
                      "handlers": m.handler_count,
                      "commands_applied": m.stats.commands_applied,
                      "commands_refused": m.stats.commands_refused} for m in mods],
        }

    def _read_workers(self) -> dict[str, Any]:
        pool = self.pool if self.pool is not None else self.game.pool
        if pool is None:
            return {"isolated": False, "workers": [], "spares": []}
        try:
            stats = pool.stats() if self.pool is not None else self.game.worker_stats()
            spares = list(pool.spare_pids)
        except MoonboxError:
            stats, spares = [], []
        restores = {m.id: m.stats.restores for m in self.game.mods}
        return {"isolated": True, "memory_limit_bytes": pool.memory_limit_bytes,
                "workers": [{**w.to_dict(), "restores": sum(restores.get(m, 0) for m in w.mods)}
                            for w in stats],
                "spares": spares}

    def _read_shards(self) -> dict[str, Any]:
        """The sharded game's shards, as the workers are shown: one row per shard (pid,
        mods, tick, own ms per tick, CPU ms per tick, restarts, the tick it was restored
        from), a row per lost shard, and the game's skew, coordinator cost, last
        checkpoint and recoveries."""
        if self.shards is None:
            return {"sharded": False, "shards": []}
        doc = self.shards.observe()
        rows = [{**s, "status": "running"} for s in doc["shards"]]
        for index, mod_ids in sorted(doc["lost"].items(), key=lambda kv: int(kv[0])):
            rows.append({"shard": int(index), "status": "lost", "pid": None,
                         "mods": len(mod_ids), "mod_ids": list(mod_ids)})
        rows.sort(key=lambda r: r["shard"])
        return {
            "sharded": True, "backend": doc["backend"], "tick": doc["tick"], "shards": rows,
            "skew_ms": doc["skew_ms"], "skew_max_ms": doc["skew_max_ms"],
            "tick_ms": doc["tick_ms"], "coordinator_ms_per_tick": doc["coordinator_ms_per_tick"],
            "overhead_ms_per_shard_per_tick": doc["overhead_ms_per_shard_per_tick"],
            "last_checkpoint": doc["last_checkpoint"], "checkpoints": len(doc["checkpoints"]),
            "recoveries": doc["recoveries"][-MAX_RECOVERIES:], "lost": doc["lost"],
        }

    def _read_world(self) -> dict[str, Any]:
        world = self.game.world
        entities = world.entities()
        shown = entities[:MAX_ENTITIES]
        return {"tick": self.game.tick_count, "bound": world.bound, "count": len(entities),
                "shown": len(shown), "max_entities": world.max_entities,
                "entities": [e.to_dict() for e in shown]}
