"""The tick and the dispatch of each mod: every handler call, timer and task resume is one
budgeted resume of the mod's dispatcher, its outcome settled here."""

from __future__ import annotations

import heapq
import os
import time
from dataclasses import dataclass, field
from typing import Any

from .._errors import MoonboxError, ScriptError
from ..isolation import WorkerCrashed, WorkerPool
from ..sandbox import Budget, Outcome
from ..sandbox._run import Run
from ..world import CommandResult, World
from ._limits import ModLimits
from ._mod import Callback, Event, Failure, Mod, ModStats, Task
from ._protocol import (
    DONE_ONLY,
    FAILED,
    MISSING,
    PAUSED_RUN,
    WAIT,
    checked_yield,
    error_from_message,
    shown,
    task_id,
)

WORKER_STATS_INTERVAL_S = 1.0
"""How often, at most, a ticking isolated game reads its workers' memory and CPU."""

TICK_ENV = "MOONBOX_ENGINE_TICK"
"""Set to ``python`` to run every mod's tick in this module's Python, not the compiled
tick's loop (``_tick.c``): the same calls, for comparison."""

# The compiled tick (see _tick.c), or None: no C compiler where moonbox was installed, no
# compiled resume, or TICK_ENV says "python".
_compiled_tick: Any = None
if os.environ.get(TICK_ENV) != "python":
    try:
        from ._tick import set_up as _set_up_tick
        from ._tick import tick as _tick
    except ImportError:
        pass
    else:
        try:
            _set_up_tick(Mod, Callback, ModStats, Run)
        except ImportError:  # the compiled resume is missing
            pass
        else:
            _compiled_tick = _tick


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


class Dispatch:
    """The part of :class:`~moonbox.engine.Game` that runs ticks and dispatches mods."""

    # Set by Game.__init__ (see _game.py); the other parts of the game are its mixins.
    world: World
    limits: ModLimits
    pool: WorkerPool | None
    _mods: dict[str, Mod]
    _chain: list[str]
    _tick: int
    _report: TickReport
    _stats_read: float
    _ticking: bool
    _call_clock: Any = None  # the clock the last call's end was read on (see tick)

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
        self._ticking = True
        try:
            self._deliver()
            mods = list(self._mods.values())
            # Most mods are steady (their one tick handler, nothing else due): the compiled
            # tick calls those itself and hands the others to _tick_slow, in order.
            calls = None if _compiled_tick is None else _compiled_tick(
                mods, t, self._chain, self._tick_slow, self._tick_finish,
                self._tick_reported, self._broken)
            if calls is None:
                start = None  # when the next mod's calls may start: the end of the last
                for mod in mods:
                    if mod.quarantine is None:
                        try:
                            start = self._run_mod_tick(mod, t, start)
                        except Exception as exc:  # noqa: BLE001 - one mod, not the tick
                            start = None
                            self._broken(mod, exc)
            else:
                report.calls += calls
            results = self.world.apply()
            report.results = results
            self._route(results)
        finally:
            self._ticking = False
        if self.pool is not None and time.monotonic() - self._stats_read >= \
                WORKER_STATS_INTERVAL_S:
            self.worker_stats()
        self._report = TickReport(t)  # collects what happens until the next tick
        return report

    def run(self, ticks: int) -> list[TickReport]:
        """Run ``ticks`` ticks; their reports."""
        return [self.tick() for _ in range(ticks)]

    def _run_mod_tick(self, mod: Mod, t: int, start: float | None = None) -> float | None:
        """All of one mod's work of tick ``t``, in one call of the engine: its ``tick``
        handlers, queued events, due timers and tasks, each a budgeted call.

        ``start`` is a reading of the sandboxes' clock no later than now (the end of the
        previous mod's calls), or ``None``. Returns the reading at the end of this mod's
        calls when it took the common way (its ``tick`` handler alone, nothing else due, its
        calls in a steady state), else ``None``: the next mod reads the clock itself."""
        mod.emits_this_tick = 0
        run = mod._run
        if (run is not None and not mod.queue and not mod.tasks and not mod._isolated
                and (not mod.timers or mod.timers[0][0] > t)
                and not (mod.failures_in_a_row or mod.trips_in_a_row)):
            handlers = mod.by_event.get("tick")
            if handlers is not None and len(handlers) == 1:
                return self._call_tick_handler(mod, run, handlers[0], t, start)
        self._dispatch_mod(mod, t)
        return None

    def _call_tick_handler(self, mod: Mod, run: Any, cb: Callback, t: int,
                           start: float | None) -> float | None:
        """The commonest call of all, kept flat: a mod's one ``tick`` handler, through
        :meth:`Run.call`. A call that ends otherwise than done is settled as any other."""
        clock = run.sandbox.clock
        if start is None or clock is not self._call_clock:
            start = clock()
            self._call_clock = clock
        chain = self._chain
        chain.append(mod.id)
        try:
            res = run.call(start, cb.id, t)
        except MoonboxError as exc:
            self._lost(mod, f"lost its runtime: {exc}")
            return None
        finally:
            chain.pop()
        return self._tick_handler_ended(mod, run, cb, start, res)

    def _tick_slow(self, mod: Mod) -> None:
        """A mod's tick that the compiled tick hands over: all of it, as the loop of
        :meth:`tick` runs it."""
        if mod.quarantine is None:
            try:
                self._run_mod_tick(mod, self._tick)
            except Exception as exc:  # noqa: BLE001 - one mod, never the whole tick
                self._broken(mod, exc)

    def _tick_finish(self, mod: Mod, run: Run, cb: Callback, start: float, res: Any,
                     error: BaseException | None) -> None:
        """The end of a call of a mod's tick handler that the compiled tick made and that
        did not end plainly (``res``, or ``error``, as the compiled resume answered: see
        Run._finish_call); the mod's id is still on the chain."""
        try:
            try:
                ended = run._finish_call(start, res, (cb.id, self._tick), error)
            except MoonboxError as exc:
                self._lost(mod, f"lost its runtime: {exc}")
                return
            finally:
                self._chain.pop()
            self._tick_handler_ended(mod, run, cb, start, ended)
        except Exception as exc:  # noqa: BLE001 - one mod, never the whole tick
            self._broken(mod, exc)

    def _tick_reported(self, mod: Mod, run: Run, cb: Callback, start: float,
                       steps: int) -> None:
        """A plain call of the compiled tick that reported lines: taken here."""
        try:
            self._tick_handler_ended(mod, run, cb, start, steps)
        except Exception as exc:  # noqa: BLE001 - one mod, never the whole tick
            self._broken(mod, exc)

    def _tick_handler_ended(self, mod: Mod, run: Any, cb: Callback, start: float,
                            res: int | Outcome) -> float | None:
        """How a call of the mod's one tick handler ended: its reports, then its
        accounting (a plain end) or its settling; the clock reading at its end when it
        ended plainly."""
        end = run.ended_at
        if run.reports:
            if run.reports_dropped_now:
                self._count_dropped(mod, run.reports_dropped_now)
            self._report.reports.extend((mod.id, line) for line in run.reports)
        if type(res) is int:
            self._report.calls += 1
            stats = mod.stats
            stats.calls += 1
            stats.steps += res
            stats.wall_s += end - start
            if run.peak_bytes > stats.memory_peak_bytes:
                stats.memory_peak_bytes = run.peak_bytes
            return end
        values = self._settle(mod, cb.label, cb.where, res)
        if values is not None:
            if values[0] == WAIT:
                self._park(mod, values, cb.label, cb.where)
            elif values[0] == MISSING:
                self._drop_callback(mod, cb.id)
        return None

    def _dispatch_mod(self, mod: Mod, t: int) -> None:
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
                if values is not None and values[0] == WAIT:
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
            if outcome[0] == "yielded" and outcome[1] == DONE_ONLY:
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
        if code == WAIT:
            self._park(mod, values, cb.label, cb.where)
        elif code == MISSING:
            self._drop_callback(mod, cb.id)

    def _park(self, mod: Mod, values: tuple[Any, ...], label: str, where: str) -> None:
        task_id, ticks, point, data = values[1], values[2], values[3], values[4]  # checked
        if len(mod.tasks) >= self.limits.max_tasks:
            self._forget(mod, label, where, task_id)
            error = ScriptError(
                f"too many handlers are waiting at once (at most {self.limits.max_tasks}); "
                "this one was stopped: wait in fewer places, or for fewer ticks",
                chunk=mod.chunk)
            self._fail(mod, label, where, error)
            return
        if point is not None and data is not None:
            # Kept as a copy taken now: what a restore re-enters the task with.
            try:
                data = self._copy(data, self.limits.max_value_bytes)
            except ValueError as exc:
                self._forget(mod, label, where, task_id)
                self._fail(mod, label, where, ScriptError(
                    f"wait: the data of resume point {point!r}: {exc}; this task was stopped",
                    chunk=mod.chunk))
                return
        mod.tasks[task_id] = Task(task_id, self._tick + max(1, ticks), label, where, point,
                                  data)

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
            if code == FAILED and type(code) is int:
                message = values[1] if len(values) > 1 else "failed"
                self._fail(mod, label, where, error_from_message(message, mod.chunk))
                return None
            if code == PAUSED_RUN and type(code) is int:
                # The dispatcher's coroutine is the task now: its run is done with (the
                # Lua side keeps the coroutine), and the next call starts it again.
                run, mod._run = mod._run, None
                if run is not None:
                    run.close()
                values = (WAIT, *values[1:])
            checked = checked_yield(values)
            if checked is None:
                # The engine library never yields this: the mod's code yielded past it.
                if code == WAIT and len(values) > 1 and task_id(values[1]) is not None:
                    self._forget(mod, label, where, values[1])
                self._fail(mod, label, where, ScriptError(
                    f"yielded {shown(values)} to the engine; use wait(ticks) to pause, "
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
