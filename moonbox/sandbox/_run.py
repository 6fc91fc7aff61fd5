"""Runs: a chunk running in a coroutine of the sandbox's runtime, resumed under budgets."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from .._errors import BudgetExceeded, HostError, SandboxClosed, ScriptError
from ._budget import Budget
from ._lua import lua
from ._marshal import to_lua
from ._outcome import DONE, FIGURES, FINISHED, PREEMPTED, YIELDED, Outcome, Stats, Status
from ._protocols import SandboxState
from ._runtime import resume_call
from ._script_errors import ended_outcome
from ._values import MAX_EXACT_INT, MIN_EXACT_INT, all_scalar, resume_values
from ._watchdog import Stall, stall_margin_s

__all__ = ["Chunk", "Run"]

# What one resume may report (report/print), per resume: a long-lived run (an engine
# mod's dispatcher) gets the same allowance on every call. Lines past it are dropped and
# counted (Run.reports_dropped_now, the engine's TickReport.reports_dropped), and the first
# drop leaves REPORTS_DROPPED as the resume's last line.
MAX_REPORTS = 1000
MAX_REPORT_CHARS = 4096
MAX_REPORTS_TOTAL_CHARS = 256 << 10
REPORTS_DROPPED = (f"[moonbox: the report limit of this resume ({MAX_REPORTS} lines, "
                   f"{MAX_REPORTS_TOTAL_CHARS} characters) was reached; later lines were "
                   "dropped and counted]")

_tuple_new = tuple.__new__


class ReportLines:
    """The report()/print() lines of a run's latest resume, under the caps of one resume
    (in process, and as the host collects them for a worker's run)."""

    __slots__ = ("reports", "reports_dropped", "reports_dropped_now", "_report_chars")

    def __init__(self) -> None:
        self.reports: list[str] = []
        self.reports_dropped = 0  # over the run's life
        self.reports_dropped_now = 0  # in its latest resume
        self._report_chars = 0

    def _new_resume(self) -> None:
        """A fresh allowance: the caps are per resume."""
        self.reports.clear()
        self._report_chars = self.reports_dropped_now = 0

    def _add_report(self, text: str) -> None:
        if len(self.reports) >= MAX_REPORTS or self._report_chars >= MAX_REPORTS_TOTAL_CHARS:
            if not self.reports_dropped_now:
                self.reports.append(REPORTS_DROPPED)
            self.reports_dropped += 1
            self.reports_dropped_now += 1
            return
        if len(text) > MAX_REPORT_CHARS:
            text = text[: MAX_REPORT_CHARS - 3] + "..."
        self.reports.append(text)
        self._report_chars += len(text)


class ReportsOfARun:
    """The lines of a whole run, across its resumes, under the caps of one resume (what
    :meth:`Run.finish` and a sandbox's ``run`` return)."""

    __slots__ = ("lines", "_chars", "_dropped")

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._chars = 0
        self._dropped = False

    def add(self, lines: tuple[str, ...]) -> None:
        for line in lines:
            if line == REPORTS_DROPPED or (len(self.lines) >= MAX_REPORTS
                                           or self._chars >= MAX_REPORTS_TOTAL_CHARS):
                if not self._dropped:
                    self.lines.append(REPORTS_DROPPED)
                    self._dropped = True
                continue
            self.lines.append(line)
            self._chars += len(line)
# At most this many arguments of a resume cross without conversion.
_FAST_ARGS = 8
# The compiled resume's call (see _resume.c), or None.
_c_call = resume_call()

# What a resume ended in when it ended plainly (not in a trip or an error of its own).
_PLAIN_ENDS = frozenset({YIELDED, DONE, PREEMPTED})


@dataclass(frozen=True, slots=True)
class Chunk:
    """Compiled mod source, bound to the sandbox runtime that compiled it."""

    name: str
    checks: int
    _fn: Any = field(repr=False)
    _generation: int = field(repr=False)


class Run(ReportLines):
    """A chunk running in a coroutine. Each :meth:`resume` gets a fresh budget.

    Create with :meth:`Sandbox.start`; resume until :attr:`finished`.
    """

    # Slots: attribute access on the resume path is measurably cheaper.
    __slots__ = (
        "sandbox", "chunk", "_id", "_generation", "status", "_steps", "peak_bytes", "_wall_s",
        "resumes", "_denials", "_open", "ended_at", "_c_co", "_c_run",
    )

    def __init__(self, sandbox: SandboxState, chunk: Chunk, run_id: int) -> None:
        self.sandbox = sandbox
        self.chunk = chunk
        self._id = run_id
        self._generation = chunk._generation
        self.status: Status | Literal["new"] = "new"
        ReportLines.__init__(self)
        self._steps = 0
        self.peak_bytes = 0  # the highest heap seen in any resume of the run
        self._wall_s = 0.0
        self.resumes = 0
        self._denials: set[str] = set()
        self._open = True  # False once finished, closed, or its runtime is gone
        self.ended_at = 0.0  # the sandbox's clock when the last call ended (see call)
        # The addresses of its coroutine and figures for the compiled resume (0: none yet,
        # or none at all); valid while the run is open (the sandbox drops them first).
        self._c_co = self._c_run = 0

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def stats(self) -> Stats:
        """What the run has spent over all its resumes (peak heap: the highest seen)."""
        return Stats(self._steps, self.peak_bytes, self._wall_s)

    def resume(self, *args: Any, budget: Budget | None = None) -> Outcome:
        """Resume the run with a fresh budget (the sandbox's unless one is given).

        ``args`` (plain data) are what the pending ``coroutine.yield`` returns, or the
        chunk's ``...`` on the first resume.

        Raises:
            SandboxClosed: the run is finished, closed, or its sandbox was closed/replaced.
            HostError: another run of the same sandbox is running (a host function tried to
                resume a run), or moonbox itself failed.
        """
        # The hot path of every tick of every mod: kept flat on purpose.
        sb = self.sandbox
        if (budget is not None or not self._open or sb._running is not None
                or sb._lua_budget is not sb.budget or sb._dropped):
            return self._resume(args, budget)
        if args:
            if len(args) > _FAST_ARGS:
                return self._resume(args, budget)
            for v in args:  # all_scalar, inline: this runs on every handler call
                kind = type(v)
                if not (kind is float or v is None or kind is bool or (
                        kind is int and MIN_EXACT_INT <= v <= MAX_EXACT_INT)):
                    return self._resume(args, budget)
        # The steady state: the sandbox's budget already in Lua, nothing to free first, a
        # few numbers, booleans or nils as arguments (they cross as they are). What _resume
        # does, minus the checks.
        limit = sb._fixed_limit  # sb._limit is this already
        growth_limited = False
        if limit is None:  # see _resume
            limit = sb._rt.get_memory_used(True) + sb._alloc_bytes
            growth_limited = limit < sb._max_memory
            if not growth_limited:
                limit = sb._max_memory
            sb._limit = limit
        if sb._current_limit != limit:
            sb._rt.set_max_memory(limit, True)
            sb._current_limit = limit
        reports = self.reports
        if reports or self.reports_dropped_now:
            self._new_resume()
        first = 0
        # Callables held in slots are read, then called: a call straight on the attribute
        # takes CPython's generic method lookup every time.
        clock, lua_resume, watchdog = sb._clock, sb._h_resume, sb._watchdog
        start = clock()
        sb._start = start
        sb._deadline = start + sb._wall_s_limit
        sb._running = self  # after the deadline: the alarm reads them in this order
        try:
            if watchdog is not None:
                sb._margin_now = sb._margin_s
                res = watchdog.call(sb._stall_at, clock, lua_resume, self._id, start,
                                    growth_limited, *args)
            elif args:
                res = lua_resume(self._id, start, growth_limited, *args)
            else:
                res = lua_resume(self._id, start, growth_limited)
        except lua.LuaMemoryError:
            res = None
        except lua.LuaError as exc:
            sb._loosen()
            raise HostError(f"moonbox failed while resuming {self.chunk.name}: {exc}") from exc
        finally:
            sb._running = None
        wall = clock() - start
        self.resumes += 1
        if wall > sb._late_s:
            late = self._late(res, first, wall, growth_limited, sb._late_s)
            if late is not None:
                return late
        if type(res) is tuple:
            if len(res) == 2:
                # A yield of nothing, the commonest answer: the prelude sends the two
                # figures alone.
                steps, peak = res
                values: tuple[Any, ...] = ()
            elif res[0] == YIELDED:
                values = res[3:]
                for v in values:  # numbers, booleans, nils cross as they are: no copy
                    kind = type(v)
                    if not (kind is float or v is None or kind is bool or (
                            kind is int and MIN_EXACT_INT <= v <= MAX_EXACT_INT)):
                        return self._ended(res, first, wall, growth_limited)
                steps, peak = res[1], res[2]
            else:
                return self._ended(res, first, wall, growth_limited)
            self._wall_s += wall
            self._steps += steps
            if peak > self.peak_bytes:
                self.peak_bytes = peak
            self.status = "yielded"
            return _tuple_new(Outcome, ("yielded", values, None,
                                        tuple(reports[first:]) if len(reports) > first else (),
                                        _tuple_new(Stats, (steps, peak, wall))))
        return self._ended(res, first, wall, growth_limited)

    def call(self, start: float, *args: Any) -> int | Outcome:
        """Resume the run with a fresh budget, for a host that resumes it over and over (an
        engine calling a mod's handlers): the same resume as :meth:`resume`, with less
        said about it.

        ``start`` is the host's reading of the sandbox's :attr:`~Sandbox.clock` as the
        resume begins (the end of the previous call will do: a host calling many runs in a
        row reads the clock once per call); :attr:`ended_at` is the reading when it ended.
        A resume that yields nothing (the commonest end) answers the steps it took, and
        :attr:`stats` has its heap and time; any other end answers the :class:`Outcome`
        :meth:`resume` would. Either way the call's reports are in :attr:`reports` (and
        its drops in :attr:`reports_dropped_now`) until the next call or resume, never in
        the outcome: the caps are per call.

        The allocator holds each call to its growth allowance plus at most 192 KiB (it is
        set again only when the heap moves to another 64 KiB block); the meter's own check
        of the allowance is exact, so a call that grows past it trips all the same.

        Raises:
            SandboxClosed, HostError: as :meth:`resume`.
        """
        # Every check of resume's steady state, then what it does, inline: this runs once
        # per handler call of every mod.
        sb = self.sandbox
        if (sb._running is not None or sb._call_limit != sb._current_limit or not self._open
                or sb._lua_budget is not sb.budget or sb._dropped or sb._watchdog is not None
                or len(args) > _FAST_ARGS):
            return self._first_call(start, args)
        for v in args:
            kind = type(v)
            if not (kind is int and MIN_EXACT_INT <= v <= MAX_EXACT_INT or kind is float
                    or v is None or kind is bool):
                return self._called(self.resume(*args))
        if self.reports or self.reports_dropped_now:
            self._new_resume()  # the caps are per call: the host took the last call's
        sb._start = start
        sb._deadline = start + sb._wall_s_limit
        sb._running = self  # after the deadline: the alarm reads them in this order
        res, error = NotImplemented, None  # (what only the prelude's way sets up)
        if self._c_co:
            try:
                res = _c_call(sb._resumer, self._c_co, self._c_run, self._id, start,
                              sb._call_growth_limited, sb._call_fresh, *args)
            except BaseException as exc:  # noqa: BLE001 - raised again by _finish_call
                error = exc
        return self._finish_call(start, res, args, error)

    def _call_end(self, start: float, res: Any) -> int | Outcome:
        """A call's end: its clock reading and its accounting."""
        sb = self.sandbox
        end = self.ended_at = sb._clock()
        wall = end - start
        if type(res) is int and wall <= sb._late_s:  # a yield of nothing
            self._steps += res
            self._wall_s += wall
            self.resumes += 1
            return res
        return self._call_ended(res, wall)

    def _finish_call(self, start: float, res: Any, args: tuple[Any, ...],
                     error: BaseException | None) -> int | Outcome:
        """The rest of :meth:`call` once the compiled resume answered ``res`` (or raised
        ``error``; NotImplemented: it could not make the call), while the sandbox marks
        this run running. Also the end of a call the compiled Run.call (``_resume.c``'s
        run_call) made for a host calling runs from C, and did not end plainly."""
        sb = self.sandbox
        try:
            if error is not None:
                raise error
            if res is None:  # an end other than a plain yield: the prelude answered it
                res = sb._h_take_end()
            if res is NotImplemented:
                res = sb._h_call(self._id, start, sb._call_growth_limited, sb._call_fresh,
                                 *args)
        except lua.LuaMemoryError:
            res = None
        except lua.LuaError as exc:
            sb._loosen()
            raise HostError(f"moonbox failed while resuming {self.chunk.name}: {exc}") from exc
        finally:
            sb._running = None
        return self._call_end(start, res)

    def _first_call(self, start: float, args: tuple[Any, ...]) -> int | Outcome:
        """A call whose sandbox is not in its steady state: the allocator's limit is set
        from the heap now (then the next calls keep it up to date), or, for what only
        :meth:`resume` handles (another budget, handles to drop, a watchdog), resume's way."""
        sb = self.sandbox
        if (sb._running is not None or not self._open or sb._lua_budget is not sb.budget
                or sb._dropped or sb._watchdog is not None or len(args) > _FAST_ARGS):
            return self._called(self.resume(*args))
        sb._limit_calls(sb._rt.get_memory_used(True), fresh=True)
        if sb._call_limit != sb._current_limit:
            return self._called(self.resume(*args))
        if self.status == "new":
            self.status = "yielded"  # what it stays while calls end in plain yields
        if not self._c_co and sb._resumer is not None:
            addresses = sb._h_run_addresses(self._id)
            if addresses is not None:
                self._c_co, self._c_run = addresses
        return self.call(start, *args)

    def _call_ended(self, res: Any, wall: float) -> int | Outcome:
        """A call's end other than a plain yield of nothing within its time."""
        sb = self.sandbox
        self.resumes += 1
        first = len(self.reports)  # its reports are the run's to take (see call)
        if wall > sb._late_s:
            answer = res  # as resume's answer has it, for _late
            if type(res) is int:
                answer = (res, self.peak_bytes)
            elif type(res) is tuple and res[0] == FIGURES:
                answer = res[1:3]
            late = self._late(answer, first, wall, sb._call_growth_limited, sb._late_s)
            if late is not None:
                return late
        if type(res) is int:
            self._steps += res
            self._wall_s += wall
            return res
        if type(res) is tuple and res[0] == FIGURES:
            # A yield of nothing, with what changed: the peak, and the heap the next call
            # starts from (the allocator's limit follows it).
            steps = res[1]
            self._steps += steps
            self._wall_s += wall
            if res[2] > self.peak_bytes:
                self.peak_bytes = res[2]
            sb._limit_calls(res[3])
            return steps  # type: ignore[no-any-return]
        sb._call_limit = -1  # whatever happened, the next call reads the heap again
        if type(res) is tuple and res[0] == YIELDED:
            steps, peak = res[1], res[2]
            self._wall_s += wall
            self._steps += steps
            if peak > self.peak_bytes:
                self.peak_bytes = peak
            self.status = "yielded"
            if all_scalar(res, 3):
                values = res[3:]
            else:
                sb._loosen()
                values = resume_values(sb, res)
            return _tuple_new(Outcome, ("yielded", values, None, (),
                                        _tuple_new(Stats, (steps, peak, wall))))
        return self._ended(res, first, wall, sb._call_growth_limited)

    def _called(self, outcome: Outcome) -> Outcome:
        # The end of a call that took resume's way: its clock reading, and its reports
        # left in the run's list (a call's always are; see call).
        self.ended_at = self.sandbox._clock()
        return outcome._replace(reports=()) if outcome.reports else outcome

    def _resume(self, args: tuple[Any, ...], budget: Budget | None) -> Outcome:
        sb = self.sandbox
        if not self._open or sb._running is not None:
            self._refuse()
        if budget is None:
            budget = sb.budget
        if budget is not sb._lua_budget:
            sb._send_budget(budget)
        # The allocator holds the mod to its heap cap and to this resume's growth allowance
        # while it runs; between resumes the host keeps headroom for its own work (lupa's
        # pushes are unprotected: an out-of-memory there would abort the process).
        limit = sb._fixed_limit
        growth_limited = False
        if limit is None:  # the growth allowance may be the tighter limit
            cap = budget.max_memory
            limit = sb._rt.get_memory_used(True) + budget.alloc_bytes
            growth_limited = limit < cap
            if not growth_limited:
                limit = cap
        sb._limit = limit
        if self.reports or self.reports_dropped_now:
            self._new_resume()
        first = 0
        sb._deadline = math.inf  # until the resume's own: the alarm reads it (see resume)
        sb._running = self
        if sb._dropped:  # handles released since: free their functions first
            sb._loosen()
            sb._drop_handles()
        if args:
            # A few numbers, booleans or nils cross as they are: pushing them allocates
            # nothing (the stack keeps room for them). Anything else is converted first,
            # with the host's headroom.
            lua_args = args
            if len(args) > _FAST_ARGS or not all_scalar(args):
                sb._loosen()
                lua_args = [to_lua(sb._rt, a) for a in args]
        # The allocator stays at this limit after a plain yield (nothing of the host's needs
        # Lua memory then); every other host entry point loosens it first (see _loosen).
        if sb._current_limit != limit:
            sb._rt.set_max_memory(limit, True)
            sb._current_limit = limit
        # The resume's time is read on the meter's clock, the one its wall budget runs on.
        start = sb._clock()
        sb._start = start
        sb._deadline = start + budget.wall_s
        margin = sb._margin_now = stall_margin_s(budget.wall_s)
        watchdog = sb._watchdog
        try:
            if watchdog is not None:
                res = watchdog.call(sb._stall_at, sb._clock, sb._h_resume, self._id, start,
                                    growth_limited, *(lua_args if args else ()))
            elif args:
                res = sb._h_resume(self._id, start, growth_limited, *lua_args)
            else:
                res = sb._h_resume(self._id, start, growth_limited)
        except lua.LuaMemoryError:
            res = None
        except lua.LuaError as exc:
            sb._loosen()
            raise HostError(f"moonbox failed while resuming {self.chunk.name}: {exc}") from exc
        finally:
            sb._running = None
        wall = sb._clock() - start
        self.resumes += 1
        if wall > budget.wall_s + margin:
            late = self._late(res, first, wall, growth_limited, budget.wall_s + margin)
            if late is not None:
                return late
        if type(res) is tuple and len(res) == 2:  # a yield of nothing (see resume)
            res = (YIELDED, *res)
        if type(res) is tuple and res[0] == YIELDED:
            steps, peak = res[1], res[2]
            self._wall_s += wall
            self._steps += steps
            if peak > self.peak_bytes:
                self.peak_bytes = peak
            self.status = "yielded"
            if len(res) == 3:
                values: tuple[Any, ...] = ()
            elif all_scalar(res, 3):
                values = res[3:]  # numbers, booleans, nils: nothing to copy
            else:
                sb._loosen()  # copying tables out takes references in Lua
                values = resume_values(sb, res)
            reports = self.reports
            new = tuple(reports[first:]) if len(reports) > first else ()
            # tuple.__new__ skips the NamedTuple constructors.
            return _tuple_new(Outcome, ("yielded", values, None, new,
                                        _tuple_new(Stats, (steps, peak, wall))))
        return self._ended(res, first, wall, growth_limited)

    def _late(self, res: Any, first: int, wall: float, growth_limited: bool,
              late_s: float) -> Outcome | None:
        """A resume that ended past its wall budget and the stall margin: a time trip after
        the fact, or (with a watchdog that stopped waiting) a stall. ``None`` when it ended
        in a trip or error of its own, or when the time past the budget was excluded (an
        approval it waited for): the usual outcome then stands."""
        sb = self.sandbox
        stalled = type(res) is Stall
        if not stalled:
            if wall - sb._excluded_in_resume() <= late_s:
                return None
            if type(res) is tuple and len(res) > 2 and res[0] not in _PLAIN_ENDS:
                return None  # its own trip or error says more (and where)
        budget = sb._lua_budget if sb._lua_budget is not None else sb.budget
        reports = self.reports
        new = tuple(reports[first:]) if len(reports) > first else ()
        steps = peak = 0
        if type(res) is tuple:
            steps, peak = (res[0], res[1]) if len(res) == 2 else (res[1], res[2])
        self._wall_s += wall
        self._steps += steps
        error = BudgetExceeded("time", budget.wall_s, wall, chunk=self.chunk.name)
        if stalled:
            error.message += (
                "; it was stuck in one operation (a library call or a VM instruction the meter "
                "cannot interrupt) past the margin, so its runtime was abandoned")
            self.status = "budget"
            self._open = False
            self._c_co = self._c_run = 0
            sb._abandon()
        else:
            error.message += (
                "; it ended late, counted after the fact: one operation ran long (a library "
                "call or a VM instruction the meter cannot interrupt)")
            self.status = "budget"
            sb._close_run(self)
        return _tuple_new(Outcome, ("budget", (), error, new,
                                    _tuple_new(Stats, (steps, peak, wall))))

    def _ended(self, res: Any, first: int, wall: float, growth_limited: bool) -> Outcome:
        # Any outcome but a plain yield: values to copy, an error, a trip, the end. The
        # budget is the one the resume ran under (sent to Lua before it).
        sb = self.sandbox
        budget = sb._lua_budget
        self._wall_s += wall
        outcome = ended_outcome(sb, self, res, first, wall,
                                budget.alloc_bytes if growth_limited else budget.max_memory)
        stats = outcome.stats
        self._steps += stats.steps
        if stats.memory_peak_bytes > self.peak_bytes:
            self.peak_bytes = stats.memory_peak_bytes
        status = self.status = outcome.status
        if status in FINISHED:
            sb._close_run(self)
        return outcome

    def _refuse(self) -> None:
        if self.sandbox._running is not None and self._open:
            raise HostError("a run cannot be resumed while another run of the sandbox runs")
        if self.status in FINISHED:
            raise SandboxClosed(f"the run of {self.chunk.name} is finished ({self.status})")
        raise SandboxClosed(f"the run of {self.chunk.name} was closed")

    def finish(self, *args: Any, max_resumes: int = 1000, budget: Budget | None = None) -> Outcome:
        """Resume until the chunk returns, fails or trips; each resume has a fresh budget.

        Returns one outcome for the whole run: the final values, all reports, summed stats.
        A chunk still yielding after ``max_resumes`` resumes ends as an ``error``.
        """
        # Each resume's lines, up to the caps of one resume for the whole run.
        outcome = self.resume(*args, budget=budget)
        reports = ReportsOfARun()
        reports.add(outcome.reports)
        count = 1
        while outcome.status in ("yielded", "preempted"):
            if count >= max_resumes:
                self.close()
                err = ScriptError(
                    f"still yielding after {max_resumes} resumes; finish within fewer",
                    chunk=self.chunk.name,
                )
                outcome = Outcome("error", (), err)
                break
            outcome = self.resume(budget=budget)
            count += 1
            reports.add(outcome.reports)
        return Outcome(
            outcome.status,
            outcome.values,
            outcome.error,
            tuple(reports.lines),
            self.stats,
        )

    def close(self) -> None:
        """Drop the run's coroutine. Idempotent."""
        if not self.finished:
            self.status = "error"
        self.sandbox._close_run(self)
