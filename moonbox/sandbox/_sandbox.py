"""The sandbox: one hardened LuaJIT runtime per mod, runs under per-resume budgets."""

from __future__ import annotations

import functools
import logging
import math
import re
import secrets
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal, NamedTuple, Protocol

from .._errors import (
    BindingError,
    BudgetExceeded,
    ConfigError,
    Frame,
    HostError,
    SandboxClosed,
    ScriptError,
)
from ._budget import Budget
from ._environment import ALLOWED_GLOBALS, ALLOWED_LIBRARIES
from ._instrument import ReservedNameError, instrument
from ._lua import lua
from ._marshal import ValueLimits, encode_text, to_lua, to_python
from ._tokenizer import LuaTokenError

__all__ = [
    "Chunk",
    "HostCall",
    "HostFunction",
    "Outcome",
    "Run",
    "Sandbox",
    "Stats",
    "Status",
]

log = logging.getLogger("moonbox.sandbox")

_PRELUDE_NAME = b"=[moonbox prelude]"
# The prelude's files, in the order they are joined into its one chunk: each sees the
# locals of those before it (prelude.lua says why they share locals, not a table).
_PRELUDE_PARTS = (
    "prelude.lua",  # the head: its arguments, the globals it captures, the host's handle
    "meter.lua",  # the clock, the meter and the count hook of jit=False
    "environment.lua",  # a mod's environment, built from the allowlist
    "protected.lua",  # pcall, xpcall and the coroutine functions: a trip is re-raised
    "guards.lua",  # library functions charged for their work, ids in place of addresses
    "replay.lua",  # the seeded math.random and the ordered pairs
    "values.lua",  # the check of values that cross to Python
    "dispatch.lua",  # the host functions' closures and the checks of their arguments
    "runs.lua",  # loading and resuming; last: it seals the globals and returns the handle
)
# Runs the prelude: compiled once per process to bytecode (the host's own, never a mod's),
# so a new sandbox loads it in ~20 µs instead of parsing it again in ~500 µs.
_LOADER = b"""
local code, name, config, dispatch, patterns = ...
local f = assert(load(code, name, "b"))
return f(config, dispatch, patterns)
"""
@functools.cache
def _prelude_bytecode() -> tuple[bytes, bytes]:
    """The prelude and the metered pattern functions, compiled once per process. Both carry
    the prelude's chunk name: the count hook of jit=False treats them as host code."""
    files = resources.files("moonbox.sandbox")
    prelude = b"".join(files.joinpath(part).read_bytes() for part in _PRELUDE_PARTS)
    patterns = files.joinpath("patterns.lua").read_bytes()
    rt = lua.LuaRuntime(register_eval=False, register_builtins=False, encoding=None)
    dump = rt.eval("function(src, name) return string.dump(assert(load(src, name, 't'))) end")
    return bytes(dump(prelude, _PRELUDE_NAME)), bytes(dump(patterns, _PRELUDE_NAME))


# The allowlist as the prelude reads it: "name ... lib:field,field ...".
_ENV_SPEC = " ".join(
    [*ALLOWED_GLOBALS, *(f"{lib}:{','.join(fields)}" for lib, fields in ALLOWED_LIBRARIES.items())]
).encode()


_SCALARS = frozenset({bool, int, float})
_tuple_new = tuple.__new__
_NO_VALUES = ()
_MAX_EXACT_INT = 1 << 53  # past this an int crosses as a float (to_lua)
_MIN_EXACT_INT = -_MAX_EXACT_INT
_TRIP_MESSAGE = "moonbox: budget exceeded"  # what the prelude raises on a trip
_HOST_BUG = "{}: the host failed to handle this call (a host bug, logged)"
# What a resume ended in, as the prelude's host.resume answers (the same numbers there).
_YIELDED, _DONE, _PREEMPTED, _BUDGET, _FAILED, _BAD_VALUE = 1, 2, 3, 4, 5, 6


# At most this many arguments of a resume cross without conversion.
_FAST_ARGS = 8


def _all_scalar(values: tuple[Any, ...], start: int = 0) -> bool:
    """Only numbers that are exact in Lua, booleans and nils, from ``start`` on."""
    # Iterated directly (a range and indexing cost several times more per value).
    for v in values[start:] if start else values:
        kind = type(v)
        if kind is float or v is None or kind is bool:
            continue
        if kind is int and _MIN_EXACT_INT <= v <= _MAX_EXACT_INT:
            continue
        return False
    return True


def _from_pairs(flat: Any) -> Any:
    """The plain data of a flat table from its pairs (``n, k1, v1, ...``), as to_python
    copies it: keys exactly 1..n make a list, others a dict; strings decoded."""
    if type(flat) is not tuple:  # n == 0: an empty table
        return {}
    n = flat[0]
    out: dict[Any, Any] = {}
    listed = True
    # One plain loop: comprehensions and generators each cost a frame, several times
    # this whole function for the one- or two-entry tables this path serves.
    for i in range(1, 2 * n, 2):
        k, v = flat[i], flat[i + 1]
        if type(v) is bytes:
            v = v.decode("utf-8", "replace")
        if type(k) is bytes:
            k = k.decode("utf-8", "replace")
            listed = False
        elif listed and not (type(k) is int and 1 <= k <= n):
            listed = False
        out[k] = v
    if listed:  # n distinct keys, each in 1..n
        return [out[i] for i in range(1, n + 1)]
    return out


def _values(res: tuple[Any, ...]) -> tuple[Any, ...]:
    # Values from the 4th on, checked in Lua already: scalars as they are, the rest copied.
    return tuple([v if v is None or type(v) in _SCALARS else to_python(v) for v in res[3:]])

# Room above the heap cap for the host's own work between resumes (copying results out,
# building error descriptions), so that work never meets an out-of-memory error.
_HOST_HEADROOM_BYTES = 4 << 20
# A host call from Lua needs this much room below the heap cap, or it is a memory trip.
_HOST_CALL_MARGIN_BYTES = 256 << 10
# After an out-of-memory trip and a full collection, a heap still above this share of the
# cap means the mod keeps that memory alive: the runtime is replaced.
_REPLACE_ABOVE = 0.75

# jit=False mode: the count hook fires every HOOK_INSTRUCTIONS VM instructions and charges
# HOOK_STEPS steps: one step per two instructions, the cost of the tightest loop iteration
# (ADDVN + FORL), so the hook never counts fewer steps than the instrumented checks would.
HOOK_INSTRUCTIONS = 1000
HOOK_STEPS = 500

MAX_REPORTS = 1000
MAX_REPORT_CHARS = 4096
MAX_REPORTS_TOTAL_CHARS = 256 << 10
MAX_MESSAGE_BYTES = 4096
# Calls nested through library functions that call back into Lua (gsub, sort, tostring,
# string.format, coroutine resumes): the same bound as LuaJIT's own C-call limit.
MAX_C_DEPTH = 200
# What one step of a guarded library function buys (docs/guards.md): about 64 bytes or
# values copied, or 4 comparisons of table.sort — the same order of time as a step of
# metered Lua code.
WORK_PER_STEP = 64
COMPARISONS_PER_STEP = 4
# table.sort of more values than this runs a metered sort, which the time budget can stop.
SORT_NATIVE_MAX = 4096
# Pattern calls: the native matcher runs when its worst case, (subject length + 1) to the
# power of the pattern's repeating items + 1, is at most this many matcher steps, charged
# at PATTERN_OPS_PER_STEP a step; beyond it the metered matcher (patterns.lua) runs.
NATIVE_PATTERN_OPS = 100_000
PATTERN_OPS_PER_STEP = 256

Status = Literal["done", "yielded", "preempted", "error", "budget"]

_FINISHED = frozenset({"done", "error", "budget"})
# LuaJIT's compile-time limits, as its messages name them.
_LUAJIT_LIMITS = ("upvalues", "syntax levels", "too long", "too many", "complex")

_POSITION = re.compile(r"^(.*?):(\d+): (.*)$", re.DOTALL)


class _Deny:
    """Attribute access on Python objects from Lua: always refused."""

    def __call__(self, obj: object, name: object, *value: object) -> None:
        raise AttributeError("attribute access is disabled in moonbox")


_DENY = _Deny()


class Stats(NamedTuple):
    """What a resume (or a whole run) spent.

    ``wall_s`` is read on the meter's clock, the one the wall budget runs on (monotonic
    wall time wherever the platform has it).
    """

    steps: int = 0
    memory_peak_bytes: int = 0
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "steps": self.steps,
            "memory_peak_bytes": self.memory_peak_bytes,
            "wall_s": round(self.wall_s, 6),
        }


_NO_STATS = Stats()


class Outcome(NamedTuple):
    """The result of one resume, or of a whole run (:meth:`Sandbox.run`, :meth:`Run.finish`).

    Attributes:
        status: ``done`` (the chunk returned), ``yielded`` (it yielded; resume it again),
            ``preempted`` (its slice ran out and it was paused; resume it again), ``error``
            (a script fault) or ``budget`` (a budget tripped).
        values: what the chunk returned or yielded, as plain data.
        error: the :class:`ScriptError` for ``error`` and ``budget``.
        reports: the ``report()`` lines of this resume (or run).
        stats: steps, peak heap and wall time.
    """

    status: Status
    values: tuple[Any, ...] = ()
    error: ScriptError | None = None
    reports: tuple[str, ...] = ()
    stats: Stats = _NO_STATS

    @property
    def ok(self) -> bool:
        return self.status in ("done", "yielded", "preempted")

    @property
    def value(self) -> Any:
        """The single value returned, ``None`` for none, a list for several."""
        if not self.values:
            return None
        return self.values[0] if len(self.values) == 1 else list(self.values)

    @property
    def budget(self) -> str | None:
        return self.error.budget if isinstance(self.error, BudgetExceeded) else None

    def unwrap(self) -> tuple[Any, ...]:
        """The values, or raise the script's error."""
        if self.error is not None:
            raise self.error
        return self.values


class HostCall:
    """What a host function learns about the call it serves.

    Attributes:
        sandbox: the sandbox the call comes from.
        run: the run making the call (``None`` outside a run).
        name: the host function's name.
        mod: the calling mod's context, set by the bindings layer (its ``ModApi``), or
            ``None``.
    """

    __slots__ = ("sandbox", "run", "name", "mod")

    def __init__(self, sandbox: Sandbox, run: Run | None, name: str, mod: Any = None) -> None:
        self.sandbox = sandbox
        self.run = run
        self.name = name
        self.mod = mod

    def report(self, text: str) -> None:
        """Add one line to the run's reports (capped in count and size)."""
        if self.run is not None:
            self.run._add_report(text)

    def time_left_s(self) -> float:
        """Seconds left of the running resume's wall budget (``inf`` outside a resume)."""
        sb = self.sandbox
        if sb is None or sb._running is None:
            return math.inf
        return max(0.0, sb._deadline - sb._clock())

    def wait_left_s(self, max_total_s: float) -> float:
        """How long host work may still wait in this resume: what is left of the
        ``max_total_s`` it may exclude (see :meth:`excluded_time`) plus the time left."""
        sb = self.sandbox
        if sb is None or sb._running is None:
            return max_total_s
        excluded = sb._excluded_in_resume()
        return max(0.0, max_total_s - excluded) + max(0.0, sb._deadline - sb._clock())

    @contextmanager
    def excluded_time(self, max_total_s: float) -> Iterator[None]:
        """Host work inside this block does not count against the resume's wall budget.

        For waits the mod does not control (a person answering an approval). At most
        ``max_total_s`` seconds per resume are excluded in total; beyond that the wait
        counts, so a mod cannot stall its host through repeated waits.
        """
        sb = self.sandbox
        if sb is None or sb._running is None:
            yield
            return
        sb._excluded_in_resume()
        t0 = sb._clock()
        try:
            yield
        finally:
            spent = min(sb._clock() - t0, max(0.0, max_total_s - sb._excluded_s))
            if spent > 0 and sb._h_extend is not None:
                sb._excluded_s += spent
                sb._deadline += spent
                sb._h_extend(spent)


class HostFunction(Protocol):
    """A Python function a mod may call. The bindings registry builds these.

    ``__call__`` gets the call context and the arguments as plain data, returns a tuple of
    plain values, and raises :class:`BindingError` to fail the call with one line.
    """

    name: str
    cost: int
    # Optional: ``accepts_functions = True`` lets a mod pass its own functions as
    # arguments; they arrive as :class:`FunctionHandle` objects.
    # Optional: ``lane(call, args)``, tried first with the arguments exactly as lupa gives
    # them (Lua strings as bytes, tables as Lua objects): it returns the results as a
    # tuple, or one result that is neither a tuple nor None as it is, or ``None`` to send
    # the call to ``__call__`` with the arguments as plain data.

    def __call__(self, call: HostCall, args: tuple[Any, ...]) -> tuple[Any, ...]: ...


@dataclass(frozen=True, slots=True)
class Chunk:
    """Compiled mod source, bound to the sandbox runtime that compiled it."""

    name: str
    checks: int
    _fn: Any = field(repr=False)
    _generation: int = field(repr=False)


class FunctionHandle:
    """An opaque handle to a function of a mod, for the host to run later as a budgeted run.

    A host function receives one when it declares it accepts functions (a binding whose
    argument model has a ``moonbox.bindings.LuaFunction`` field) and the mod passes one of
    its own functions. The host can only run it: ``sandbox.start(handle)`` or
    ``sandbox.run(handle, args=...)``, under the sandbox's budget like any run.

    Attributes:
        sandbox: the sandbox whose runtime holds the function.
        chunk: the chunk that defined it (``@mods/waves/main.lua``).
        line: the line where its definition starts.
    """

    __slots__ = ("sandbox", "chunk", "line", "_key", "_generation", "__weakref__")

    def __init__(self, sandbox: Sandbox, chunk: str, line: int, key: int, generation: int) -> None:
        self.sandbox = sandbox
        self.chunk = chunk
        self.line = line
        # The function stays in the runtime, under this key: a Lua object made inside a
        # run's coroutine must not outlive the call that received it (lupa would free it
        # through the coroutine's state, which may be gone by then).
        self._key: int | None = key
        self._generation = generation

    @property
    def where(self) -> str:
        """``chunk:line`` of the definition, for attribution (``mods/waves/main.lua:12``)."""
        return f"{_short(self.chunk)}:{self.line}"

    @property
    def valid(self) -> bool:
        """False once released, or when its sandbox is closed or its runtime replaced."""
        sb = self.sandbox
        return self._key is not None and not sb._closed and sb._generation == self._generation

    def release(self) -> None:
        """Drop the reference to the function (the runtime may collect it). Idempotent."""
        if self.valid:
            self.sandbox._dropped.append(self._key)
        self._key = None

    def __del__(self) -> None:
        # Only a list append: dropping the key from the runtime waits for the sandbox's
        # next host entry (a collection can run anywhere, even inside a Lua call).
        try:
            self.release()
        except Exception:  # interpreter shutdown
            pass

    def __repr__(self) -> str:
        return f"<FunctionHandle {self.where}{'' if self.valid else ' (invalid)'}>"


def _short(chunk: str) -> str:
    return chunk[1:] if chunk[:1] in ("@", "=") else chunk


def _text(b: Any) -> str:
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b)


class Run:
    """A chunk running in a coroutine. Each :meth:`resume` gets a fresh budget.

    Create with :meth:`Sandbox.start`; resume until :attr:`finished`.
    """

    # Slots: attribute access on the resume path is measurably cheaper.
    __slots__ = (
        "sandbox", "chunk", "_id", "_generation", "status", "reports", "reports_dropped",
        "_report_chars", "_steps", "_peak", "_wall_s", "resumes", "_denials", "_open",
    )

    def __init__(self, sandbox: Sandbox, chunk: Chunk, run_id: int) -> None:
        self.sandbox = sandbox
        self.chunk = chunk
        self._id = run_id
        self._generation = chunk._generation
        self.status: Status | Literal["new"] = "new"
        self.reports: list[str] = []
        self.reports_dropped = 0
        self._report_chars = 0
        self._steps = 0
        self._peak = 0
        self._wall_s = 0.0
        self.resumes = 0
        self._denials: set[str] = set()
        self._open = True  # False once finished, closed, or its runtime is gone

    @property
    def finished(self) -> bool:
        return self.status in _FINISHED

    @property
    def stats(self) -> Stats:
        """What the run has spent over all its resumes (peak heap: the highest seen)."""
        return Stats(self._steps, self._peak, self._wall_s)

    def _add_report(self, text: str) -> None:
        if len(self.reports) >= MAX_REPORTS or self._report_chars >= MAX_REPORTS_TOTAL_CHARS:
            self.reports_dropped += 1
            return
        if len(text) > MAX_REPORT_CHARS:
            text = text[: MAX_REPORT_CHARS - 3] + "..."
        self.reports.append(text)
        self._report_chars += len(text)

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
            for v in args:  # _all_scalar, inline: this runs on every handler call
                kind = type(v)
                if not (kind is float or v is None or kind is bool or (
                        kind is int and _MIN_EXACT_INT <= v <= _MAX_EXACT_INT)):
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
        first = len(reports)
        sb._running = self
        # Callables held in slots are read, then called: a call straight on the attribute
        # takes CPython's generic method lookup every time.
        clock, lua_resume = sb._clock, sb._h_resume
        start = clock()
        sb._start = start
        sb._deadline = start + sb._wall_s_limit
        try:
            if args:
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
        if type(res) is tuple:
            if len(res) == 2:
                # A yield of nothing, the commonest answer: the prelude sends the two
                # figures alone.
                steps, peak = res
                values: tuple[Any, ...] = ()
            elif res[0] == _YIELDED:
                values = res[3:]
                for v in values:  # numbers, booleans, nils cross as they are: no copy
                    kind = type(v)
                    if not (kind is float or v is None or kind is bool or (
                            kind is int and _MIN_EXACT_INT <= v <= _MAX_EXACT_INT)):
                        return self._ended(res, first, wall, growth_limited)
                steps, peak = res[1], res[2]
            else:
                return self._ended(res, first, wall, growth_limited)
            self._wall_s += wall
            self._steps += steps
            if peak > self._peak:
                self._peak = peak
            self.status = "yielded"
            return _tuple_new(Outcome, ("yielded", values, None,
                                        tuple(reports[first:]) if len(reports) > first else (),
                                        _tuple_new(Stats, (steps, peak, wall))))
        return self._ended(res, first, wall, growth_limited)

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
        first = len(self.reports)
        sb._running = self
        if sb._dropped:  # handles released since: free their functions first
            sb._loosen()
            sb._drop_handles()
        if args:
            # A few numbers, booleans or nils cross as they are: pushing them allocates
            # nothing (the stack keeps room for them). Anything else is converted first,
            # with the host's headroom.
            lua_args = args
            if len(args) > _FAST_ARGS or not _all_scalar(args):
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
        try:
            if args:
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
        if type(res) is tuple and len(res) == 2:  # a yield of nothing (see resume)
            res = (_YIELDED, *res)
        if type(res) is tuple and res[0] == _YIELDED:
            steps, peak = res[1], res[2]
            self._wall_s += wall
            self._steps += steps
            if peak > self._peak:
                self._peak = peak
            self.status = "yielded"
            if len(res) == 3:
                values: tuple[Any, ...] = ()
            elif _all_scalar(res, 3):
                values = res[3:]  # numbers, booleans, nils: nothing to copy
            else:
                sb._loosen()  # copying tables out takes references in Lua
                values = _values(res)
            reports = self.reports
            new = tuple(reports[first:]) if len(reports) > first else ()
            # tuple.__new__ skips the NamedTuple constructors.
            return _tuple_new(Outcome, ("yielded", values, None, new,
                                        _tuple_new(Stats, (steps, peak, wall))))
        return self._ended(res, first, wall, growth_limited)

    def _ended(self, res: Any, first: int, wall: float, growth_limited: bool) -> Outcome:
        # Any outcome but a plain yield: values to copy, an error, a trip, the end. The
        # budget is the one the resume ran under (sent to Lua before it).
        sb = self.sandbox
        budget = sb._lua_budget
        self._wall_s += wall
        outcome = sb._outcome(self, res, first, wall,
                              budget.alloc_bytes if growth_limited else budget.max_memory)
        stats = outcome.stats
        self._steps += stats.steps
        if stats.memory_peak_bytes > self._peak:
            self._peak = stats.memory_peak_bytes
        status = self.status = outcome.status
        if status in _FINISHED:
            sb._close_run(self)
        return outcome

    def _refuse(self) -> None:
        if self.sandbox._running is not None and self._open:
            raise HostError("a run cannot be resumed while another run of the sandbox runs")
        if self.status in _FINISHED:
            raise SandboxClosed(f"the run of {self.chunk.name} is finished ({self.status})")
        raise SandboxClosed(f"the run of {self.chunk.name} was closed")

    def finish(self, *args: Any, max_resumes: int = 1000, budget: Budget | None = None) -> Outcome:
        """Resume until the chunk returns, fails or trips; each resume has a fresh budget.

        Returns one outcome for the whole run: the final values, all reports, summed stats.
        A chunk still yielding after ``max_resumes`` resumes ends as an ``error``.
        """
        first = len(self.reports)
        outcome = self.resume(*args, budget=budget)
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
        return Outcome(
            outcome.status,
            outcome.values,
            outcome.error,
            tuple(self.reports[first:]),
            self.stats,
        )

    def close(self) -> None:
        """Drop the run's coroutine. Idempotent."""
        if not self.finished:
            self.status = "error"
        self.sandbox._close_run(self)


class Sandbox:
    """A fresh, isolated LuaJIT runtime for one mod.

    The runtime is created with Python eval, builtins and attribute access off, the
    ``python`` module removed, and an environment built from the allowlist in
    :mod:`moonbox.sandbox._environment` plus the given host functions.

    Args:
        budget: the per-resume budget (defaults to :class:`Budget`'s defaults).
        jit: ``True`` (default): the JIT stays on and the source is instrumented with budget
            checks. ``False``: the JIT is off and a count hook meters instead (slower, and
            independent of the instrumenter).
        preempt: at slice end (steps or time) a resume yields to the host (status
            ``preempted``) instead of tripping; the next resume continues with a fresh slice.
            ``Budget.total_steps`` is then the hard cap. Needs ``jit=True``.
        host_functions: functions the mod may call (see :mod:`moonbox.bindings`).
        value_limits: limits on values crossing from Lua to Python.
        seed: seeds the runtime's ``math.random`` (again after a replacement), so a mod's
            random numbers replay; ``None`` picks one at random. The seed used is
            :attr:`seed`.
        deterministic: ``pairs`` visits number, string and boolean keys in a fixed order
            (numbers, then strings, then booleans, each sorted), instead of an order that
            depends on the runtime's hash seed; it costs a sort per traversal. Keys that
            are tables, functions or coroutines come last, in an order that does not
            replay. ``next`` stays raw.

    Raises:
        ConfigError: an option that cannot be enforced (``preempt`` without the JIT
            instrumentation, two host functions with one name, a reserved name).
    """

    # Slots: the resume and the dispatcher read a dozen of these per call, and a slot is
    # the fastest attribute CPython has (a class this size otherwise gets a plain dict).
    __slots__ = (
        "_alloc_bytes", "_call", "_cell_name", "_clock", "_closed", "_current_limit",
        "_deadline", "_dropped", "_entries", "_env", "_excluded_s", "_excluded_start",
        "_failed", "_fixed_limit", "_generation", "_h_check_argument", "_h_close", "_h_compile",
        "_h_drop_kept", "_h_expire", "_h_extend", "_h_flat_argument", "_h_keep_function",
        "_h_kept_count", "_h_resume", "_h_set_budget", "_h_start", "_h_start_kept",
        "_host_functions", "_limit", "_loose_limit", "_lua_budget", "_max_memory",
        "_not_enough_memory", "_rt", "_running", "_runs", "_slow_name", "_start",
        "_wall_s_limit", "budget", "deterministic", "jit", "preempt", "replacements", "seed",
        "value_limits", "__weakref__",
    )

    def __init__(
        self,
        budget: Budget | None = None,
        *,
        jit: bool = True,
        preempt: bool = False,
        host_functions: Iterable[HostFunction] = (),
        value_limits: ValueLimits | None = None,
        seed: int | None = None,
        deterministic: bool = False,
    ) -> None:
        self.budget = budget or Budget()
        self.jit = jit
        self.preempt = preempt
        self.value_limits = value_limits or ValueLimits()
        if seed is not None and not (isinstance(seed, int) and 0 <= seed < 2**31):
            raise ConfigError("seed must be an int in [0, 2**31)")
        self.seed = secrets.randbelow(2**31) if seed is None else seed
        self.deterministic = deterministic
        if preempt and not jit:
            raise ConfigError(
                "preempt needs jit=True: the count hook of jit=False cannot yield"
            )
        # By position: the closure of host function i calls the dispatcher with i, a
        # number, which crosses from Lua faster than a name.
        self._host_functions: tuple[HostFunction, ...] = tuple(host_functions)
        # A host function may offer a lane: tried first with the arguments as they come
        # from Lua, it returns the results or None to send the call down the full path.
        self._entries = tuple((hf, hf.name, getattr(hf, "lane", None))
                              for hf in self._host_functions)
        names = [hf.name for hf in self._host_functions]
        for hf in self._host_functions:
            if names.count(hf.name) > 1:
                raise ConfigError(f"two host functions are named {hf.name!r}")
            if hf.name in ALLOWED_GLOBALS or hf.name in ALLOWED_LIBRARIES or hf.name == "_G":
                raise ConfigError(f"host function {hf.name!r} would shadow a standard global")
        suffix = secrets.token_hex(6)
        self._cell_name = f"__mb_n{suffix}"
        self._slow_name = f"__mb_s{suffix}"
        self._generation = 0
        self._runs: dict[int, Run] = {}
        self._running: Run | None = None
        # One call context, reused: a host function cannot call back into its sandbox.
        self._call = HostCall(self, None, "")
        self._closed = False
        self.replacements = 0
        self._open_runtime()

    # -- runtime lifecycle ---------------------------------------------------------------

    def _open_runtime(self) -> None:
        rt = lua.LuaRuntime(
            register_eval=False,
            register_builtins=False,
            encoding=None,
            unpack_returned_tuples=True,
            attribute_handlers=(_DENY, _DENY),
            max_memory=self.budget.max_memory + _HOST_HEADROOM_BYTES,
        )
        limits = self.value_limits
        config = to_lua(
            rt,
            {
                "jit": self.jit,
                "hook_instructions": HOOK_INSTRUCTIONS,
                "hook_steps": HOOK_STEPS,
                "max_message_bytes": MAX_MESSAGE_BYTES,
                "max_c_depth": MAX_C_DEPTH,
                "work_per_step": WORK_PER_STEP,
                "comparisons_per_step": COMPARISONS_PER_STEP,
                "sort_native_max": SORT_NATIVE_MAX,
                "native_pattern_ops": NATIVE_PATTERN_OPS,
                "pattern_ops_per_step": PATTERN_OPS_PER_STEP,
                "host_call_margin_bytes": _HOST_CALL_MARGIN_BYTES,
                "value_max_depth": limits.max_depth,
                "value_max_items": limits.max_items,
                "value_max_bytes": limits.max_bytes,
                "seed": self.seed,
                "deterministic": self.deterministic,
            },
        )
        prelude, patterns = _prelude_bytecode()
        host = rt.execute(_LOADER, prelude, _PRELUDE_NAME, config, self._dispatch, patterns)
        self._rt = rt
        self._h_compile = host[b"compile"]
        self._h_start = host[b"start"]
        self._h_close = host[b"close"]
        self._h_resume = host[b"resume"]
        self._h_set_budget = host[b"set_budget"]
        self._h_expire = host[b"expire"]
        self._limit = self.budget.max_memory
        self._h_keep_function = host[b"keep_function"]
        self._h_start_kept = host[b"start_kept"]
        self._h_drop_kept = host[b"drop_kept"]
        self._h_kept_count = host[b"kept_count"]
        self._dropped: list[int] = []
        self._deadline = 0.0
        self._start = 0.0
        self._excluded_start = 0.0  # the resume (by its start) _excluded_s belongs to
        self._excluded_s = 0.0
        self._h_extend = host[b"extend"]
        self._h_check_argument = host[b"check_argument"]
        self._h_flat_argument = host[b"flat_argument"]
        self._lua_budget: Budget | None = None
        self._fixed_limit: int | None = None
        self._loose_limit = self.budget.max_memory + _HOST_HEADROOM_BYTES
        # The meter's clock: the host reads the same one to start each resume.
        self._clock = time.monotonic if host[b"clock"] == b"monotonic" else time.process_time
        closures = rt.table()
        for i, hf in enumerate(self._host_functions):
            closures[hf.name.encode()] = host[b"make_host_function"](i, hf.cost)
        # The first value of a failed call's answer (the second is the message).
        self._failed = host[b"host_failed"]
        self._not_enough_memory = (self._failed, b"not enough memory")
        self._env = host[b"make_env"](_ENV_SPEC, closures)
        rt.set_max_memory(self.budget.max_memory + _HOST_HEADROOM_BYTES, total=True)
        self._current_limit = self.budget.max_memory + _HOST_HEADROOM_BYTES
        self._generation += 1

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxClosed("the sandbox is closed")

    def close(self) -> None:
        """Release the runtime; later calls raise :class:`SandboxClosed`. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for run in list(self._runs.values()):
            run.status = "error" if not run.finished else run.status
            run._open = False
        self._runs.clear()
        # Drop every handle into the runtime so lupa can free it now.
        for name in self.__slots__:
            if name.startswith("_h_"):
                setattr(self, name, None)
        self._rt = None  # type: ignore[assignment]
        self._env = None
        self._failed = self._not_enough_memory = None

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reset(self) -> None:
        """Replace the runtime with a fresh one: every chunk and run of the old one is gone."""
        self._check_open()
        for run in list(self._runs.values()):
            if not run.finished:
                run.status = "error"
            run._open = False
        self._runs.clear()
        self._open_runtime()
        self.replacements += 1

    @property
    def functions_held(self) -> int:
        """How many mod functions the host holds handles to (released ones not counted)."""
        self._check_open()
        if self._dropped:
            self._drop_handles()
        return int(self._h_kept_count())

    @property
    def memory_used_bytes(self) -> int:
        """The runtime's heap now, in bytes."""
        self._check_open()
        return int(self._rt.get_memory_used(total=True))

    # -- loading -------------------------------------------------------------------------

    def load(self, source: str | bytes, chunk: str = "=(mod)") -> Chunk:
        """Compile source text as a named chunk (``@path/to/file.lua`` or ``=name``).

        Raises:
            ScriptError: kind ``syntax``, for bytecode, a syntax error or a reserved name.
            ConfigError: a chunk name that is not ``@...`` or ``=...``.
        """
        self._check_open()
        self._loosen()
        if chunk[:1] not in ("@", "=") or chunk.startswith("=[moonbox") or len(chunk) > 512:
            raise ConfigError(
                f"chunk name {chunk!r} must start with '@' (a file) or '=' (a label)"
            )
        if isinstance(source, bytes):
            if source[:1] == b"\x1b":
                raise self._syntax("bytecode is refused: moonbox loads Lua source text only",
                                   chunk, None)
            text = source.decode("utf-8", "surrogateescape")
        else:
            text = source
        if text[:1] == "\x1b":
            raise self._syntax("bytecode is refused: moonbox loads Lua source text only",
                               chunk, None)
        raw = encode_text(text)
        wrapped: bytes | None = None
        checks = 0
        # Instrumented in both modes, so reserved names are refused alike; the count-hook
        # mode then loads the source as it is.
        try:
            inst = instrument(text, cell=self._cell_name, slow=self._slow_name)
        except ReservedNameError as exc:
            raise self._syntax(str(exc).split(": ", 1)[1], chunk, exc.line) from None
        except (LuaTokenError, ValueError):
            inst = None  # let LuaJIT's own parser name the syntax error
        if inst is not None and self.jit:
            wrapped = encode_text(inst.source)
            checks = inst.checks
        fn, err, *rest = self._compile(raw, wrapped, chunk)
        if fn is None:
            message = _text(err)
            if rest and rest[0]:
                # LuaJIT accepted the source but not its instrumented form. Near one of
                # LuaJIT's limits that is the mod's to fix; anything else is a moonbox bug.
                if any(limit in message for limit in _LUAJIT_LIMITS):
                    m = _POSITION.match(message.split("(", 1)[-1])
                    raise self._syntax(
                        f"{m.group(3).rstrip(')') if m else message} once instrumented: "
                        "moonbox adds up to 2 upvalues to each function and one nesting "
                        "level, and this source is at LuaJIT's limit; split the function "
                        "or nest less",
                        chunk, int(m.group(2)) if m else None,
                    )
                raise HostError(f"{chunk}: {message}")
            m = _POSITION.match(message)
            if m:
                raise self._syntax(m.group(3), chunk, int(m.group(2)))
            raise self._syntax(message, chunk, None)
        if self.jit and wrapped is None:
            # The tokenizer refused what LuaJIT accepted: never run it uninstrumented.
            raise HostError(f"{chunk}: moonbox could not instrument this source")
        return Chunk(chunk, checks, fn, self._generation)

    def _compile(self, raw: bytes, wrapped: bytes | None, chunk: str) -> tuple[Any, ...]:
        result = self._h_compile(raw, wrapped, chunk.encode(), self._env)
        return result if isinstance(result, tuple) else (result, None)

    @staticmethod
    def _syntax(message: str, chunk: str, line: int | None) -> ScriptError:
        return ScriptError(message, chunk=chunk, line=line, kind="syntax")

    # -- running -------------------------------------------------------------------------

    def start(self, source: str | bytes | Chunk | FunctionHandle, chunk: str = "=(mod)") -> Run:
        """Compile (unless given a :class:`Chunk`) and create a run; nothing runs yet.

        Given a :class:`FunctionHandle`, the run calls that function: the first resume's
        arguments are its arguments.

        Raises:
            ScriptError: kind ``syntax`` (see :meth:`load`).
            SandboxClosed: the chunk or handle belongs to a closed or replaced runtime, or
                the handle was released.
            ConfigError: the handle belongs to another sandbox.
        """
        self._check_open()
        self._loosen()
        if self._dropped:
            self._drop_handles()
        if isinstance(source, FunctionHandle):
            compiled = self._handle_chunk(source)
            started = self._h_start_kept(source._key)
            if started is None:
                raise SandboxClosed(f"the function at {source.where} was released")
        else:
            compiled = source if isinstance(source, Chunk) else self.load(source, chunk)
            if compiled._generation != self._generation:
                raise SandboxClosed(f"{compiled.name} was compiled by a runtime that has been "
                                    "replaced; load it again")
            started = self._h_start(compiled._fn)
        run_id = int(started)
        run = Run(self, compiled, run_id)
        self._runs[run_id] = run
        return run

    def _handle_chunk(self, handle: FunctionHandle) -> Chunk:
        if handle.sandbox is not self:
            raise ConfigError(f"the function at {handle.where} belongs to another sandbox")
        if not handle.valid:
            raise SandboxClosed(
                f"the function at {handle.where} was released or its runtime replaced"
            )
        return Chunk(handle.chunk, 0, handle._key, handle._generation)

    def _excluded_in_resume(self) -> float:
        """Seconds excluded from the running resume's wall budget so far."""
        if self._excluded_start != self._start:
            self._excluded_start, self._excluded_s = self._start, 0.0
        return self._excluded_s

    def _drop_handles(self) -> None:
        dropped, self._dropped = self._dropped, []
        for key in dropped:
            self._h_drop_kept(key)

    def run(
        self,
        source: str | bytes | Chunk | FunctionHandle,
        chunk: str = "=(mod)",
        *,
        args: Sequence[Any] = (),
        max_resumes: int = 1000,
    ) -> Outcome:
        """Compile and run a chunk to its end; each resume after a yield gets a fresh budget.

        Script faults, syntax errors included, come back as the outcome's ``error``.
        """
        try:
            run = self.start(source, chunk)
        except ScriptError as exc:
            return Outcome("error", (), exc)
        return run.finish(*args, max_resumes=max_resumes)

    def _close_run(self, run: Run) -> None:
        run._open = False
        if self._runs.pop(run._id, None) is not None and run._generation == self._generation:
            self._h_close(run._id)

    def _loosen(self) -> None:
        """Give the host headroom above the mod's limit before it works in the runtime:
        lupa's pushes and references are unprotected allocations, and one failing there
        would abort the process."""
        if self._current_limit != self._loose_limit:
            self._rt.set_max_memory(self._loose_limit, True)
            self._current_limit = self._loose_limit

    def _send_budget(self, budget: Budget) -> None:
        total = -1 if budget.total_steps is None else budget.total_steps
        self._h_set_budget(budget.steps, budget.wall_s, total, self.preempt,
                           budget.alloc_bytes, budget.max_memory)
        self._lua_budget = budget
        # The budget's figures the steady resume reads, copied: attribute reads on a
        # pydantic model take CPython's slow path (the class defines __getattr__).
        self._wall_s_limit = budget.wall_s
        self._alloc_bytes = budget.alloc_bytes
        self._max_memory = budget.max_memory
        cap = budget.max_memory
        self._fixed_limit = cap if budget.alloc_bytes >= cap else None
        self._loose_limit = cap + _HOST_HEADROOM_BYTES
        self._loosen()

    def _outcome(
        self, run: Run, res: Any, first_report: int, wall: float, memory_limit: int
    ) -> Outcome:
        """The outcome of a resume other than a plain yield (see :meth:`Run.resume`).

        ``memory_limit`` is the limit the allocator held the resume to: its growth allowance
        or the heap cap.
        """
        self._loosen()
        reports = tuple(run.reports[first_report:])
        if res is None:  # out of memory again in the host's own Lua code, after the mod's
            self._rt.gccollect()
            err = BudgetExceeded("memory", memory_limit, memory_limit, chunk=run.chunk.name)
            self._after_memory_trip(run)
            return Outcome("budget", (), err, reports, Stats(0, self.budget.max_memory, wall))
        if type(res) is not tuple:
            raise SandboxClosed(f"the run of {run.chunk.name} is finished")
        status = res[0]
        stats = Stats(int(res[1]), int(res[2]), wall)
        if status == _YIELDED or status == _DONE:
            values = () if len(res) == 3 else _values(res)
            return Outcome("done" if status == _DONE else "yielded", values, None, reports, stats)
        if status == _PREEMPTED:
            return Outcome("preempted", (), None, reports, stats)
        if status == _BAD_VALUE:
            what = "returned" if res[4] == _DONE else "yielded"
            msg = _text(res[3]).replace("value", f"the {what} value", 1)
            return Outcome("error", (), ScriptError(msg, chunk=run.chunk.name), reports, stats)
        info = res[3]
        frames = self._frames(info[b"traceback"])
        if status == _BUDGET:
            err = self._budget_error(info, frames, run.chunk.name)
            if err.budget == "memory":
                self._after_memory_trip(run)
            return Outcome("budget", (), err, reports, stats)
        err = self._runtime_error(_text(info[b"message"]), frames, run.chunk.name)
        if err.message in run._denials:
            err.kind = "denied"
        return Outcome("error", (), err, reports, stats)

    @staticmethod
    def _budget_error(info: Any, frames: tuple[Frame, ...], chunk_name: str) -> BudgetExceeded:
        kind = _text(info[b"kind"])
        limit, used = info[b"limit"], info[b"used"]
        if kind == "time":
            limit, used = float(limit), float(used)
        else:
            limit, used = int(limit), int(used)
        chunk = _text(info[b"chunk"]) if info[b"chunk"] is not None else None
        line = int(info[b"line"]) if info[b"line"] is not None else None
        if chunk is None and frames:
            chunk, line = frames[0].chunk, frames[0].line
        return BudgetExceeded(kind, limit, used, chunk=chunk or chunk_name,  # type: ignore[arg-type]
                              line=line, traceback=frames)

    def _after_memory_trip(self, run: Run) -> None:
        self._loosen()
        self._runs.pop(run._id, None)
        run.status = "budget"
        run._open = False
        self._h_close(run._id)
        self._rt.gccollect()
        if self._rt.get_memory_used(total=True) > self.budget.max_memory * _REPLACE_ABOVE:
            log.warning("heap still full after an out-of-memory trip: replacing the runtime")
            self.reset()

    def _frames(self, table: Any) -> tuple[Frame, ...]:
        frames = []
        for i in range(1, len(table) + 1):
            f = table[i]
            name = f[b"name"]
            frames.append(
                Frame(_text(f[b"chunk"]), int(f[b"line"]) if f[b"line"] else None,
                      _text(name) if name is not None else None)
            )
        return tuple(frames)

    def _runtime_error(self, message: str, frames: tuple[Frame, ...], chunk: str) -> ScriptError:
        m = _POSITION.match(message)
        if m:
            where = m.group(1)
            for frame in frames:
                short = _short(frame.chunk)
                if where == short or (where.startswith("...") and short.endswith(where[3:])):
                    return ScriptError(m.group(3), chunk=frame.chunk, line=int(m.group(2)),
                                       traceback=frames)
            if where == _short(chunk):
                return ScriptError(m.group(3), chunk=chunk, line=int(m.group(2)),
                                   traceback=frames)
        if frames:
            return ScriptError(message, chunk=frames[0].chunk, line=frames[0].line,
                               traceback=frames)
        return ScriptError(message, chunk=chunk, traceback=frames)

    # -- host functions ------------------------------------------------------------------

    def _dispatch(self, index: int, *args: Any) -> Any:
        # The answer: the results themselves (one value as it is, several or none as a
        # tuple lupa unpacks), or (the prelude's failure marker, message) on a failure.
        hf, name, lane = self._entries[index]
        call = self._call
        call.run = self._running
        call.name = name
        try:
            # The hot path of every binding call: kept flat on purpose.
            result = None if lane is None else lane(call, args)
            kind = type(result)
            if kind is float or kind is bool or (
                kind is int and _MIN_EXACT_INT <= result <= _MAX_EXACT_INT
            ):
                return result  # a lane's one number or boolean: the commonest answer
            if result is None:
                call.mod = None
                for value in args:
                    if value is not None and type(value) not in _SCALARS:
                        args = self._plain_arguments(args, hf)
                        break
                result = hf(call, args)
            elif kind is not tuple:
                result = (result,)
            if not result:
                return _NO_VALUES
            if len(result) == 1:  # the common case: one number, boolean or nil
                value = result[0]
                kind = type(value)
                if value is None or kind is float or kind is bool or (
                    kind is int and _MIN_EXACT_INT <= value <= _MAX_EXACT_INT
                ):
                    return value
            return self._results(result)
        except BindingError as exc:
            message = f"{hf.name}: {exc}"
            if exc.denied and call.run is not None and len(call.run._denials) < 64:
                call.run._denials.add(message)
            # Capped: the message is pushed as a Lua string after the call returns.
            return (self._failed, message.encode("utf-8", "replace")[:MAX_MESSAGE_BYTES])
        except lua.LuaMemoryError:
            return self._not_enough_memory  # the mod's side turns it into a memory trip
        except lua.LuaError as exc:
            if _TRIP_MESSAGE in str(exc):
                # The meter tripped in the host's own Lua helpers (the count hook of
                # jit=False can fire there): the mod's side re-raises the trip.
                return (self._failed, _TRIP_MESSAGE.encode())
            log.exception("host function %r failed", hf.name)
            return (self._failed, _HOST_BUG.format(hf.name).encode())
        except Exception:
            log.exception("host function %r failed", hf.name)
            return (self._failed, _HOST_BUG.format(hf.name).encode())
        finally:
            if self._clock() > self._deadline:
                # One host call can take long for one step, and the meter polls the clock
                # only every K steps: tell it now that the time is up.
                self._h_expire()

    def _results(self, result: tuple[Any, ...]) -> tuple[Any, ...]:
        out: list[Any] = []
        text_bytes = 0
        for value in result:
            # Every value goes back as a Lua value: an int lupa cannot convert would come
            # back to the mod as a Python exception object.
            kind = type(value)
            if value is None or kind is float or kind is bool:
                out.append(value)
            elif kind is int and _MIN_EXACT_INT <= value <= _MAX_EXACT_INT:
                out.append(value)
            elif kind is int or kind is str or kind is bytes:
                value = value if kind is bytes else to_lua(self._rt, value)
                if type(value) is bytes:
                    text_bytes += len(value)
                out.append(value)
            else:
                out.append(self._build_table(value))
        # lupa pushes strings after the call returns, with allocations that must not fail
        # (a failure there would unwind through the interpreter). The prelude refused this
        # call within _HOST_CALL_MARGIN_BYTES of the limit in force; strings of more than a
        # quarter of that are checked against the room actually left.
        if text_bytes > _HOST_CALL_MARGIN_BYTES // 4 and (
            self._rt.get_memory_used(True) + text_bytes + _HOST_CALL_MARGIN_BYTES // 4
            > self._current_limit
        ):
            return self._not_enough_memory  # the mod's side turns it into a memory trip
        return tuple(out)

    def _plain_arguments(self, args: tuple[Any, ...], hf: HostFunction) -> tuple[Any, ...]:
        plain = []
        for index, value in enumerate(args, 1):
            kind = type(value)
            if kind is bytes:
                plain.append(value.decode("utf-8", "replace"))
            elif value is None or kind in _SCALARS:
                plain.append(value)
            else:
                plain.append(self._argument(value, index, hf))
        return tuple(plain)

    def _build_table(self, value: Any) -> Any:
        # Building tables allocates through lupa's unprotected API: the host's work gets the
        # headroom above the resume's limit (the prelude already refused a call made within
        # its margin of the cap), so an allocation never fails there.
        rt = self._rt
        rt.set_max_memory(self._limit + _HOST_HEADROOM_BYTES, True)
        try:
            return to_lua(rt, value)
        finally:
            rt.set_max_memory(self._limit, True)
            self._current_limit = self._limit

    def _argument(self, value: Any, index: int, hf: HostFunction) -> Any:
        # A Lua object (scalars never get here): a table of plain data, a function of the
        # mod for a host function that takes callbacks, or refused.
        kind = lua.lua_type(value)  # lupa's own check: no call into the runtime
        if kind == "function" and getattr(hf, "accepts_functions", False):
            kept = self._h_keep_function(value)
            if type(kept) is not tuple:
                raise BindingError(
                    f"argument {index}: only a function defined by the mod can be passed"
                )
            return FunctionHandle(self, _text(kept[1]), int(kept[2]), int(kept[0]),
                                  self._generation)
        if kind != "table":
            raise BindingError(f"argument {index}: a {kind} cannot cross to the host")
        flat = self._h_flat_argument(value)
        if flat is not None:  # a small table of scalars: its pairs, in one call
            return _from_pairs(flat)
        problem = self._h_check_argument(value)
        if problem is not None:
            raise BindingError(_text(problem).replace("value", f"argument {index}", 1))
        return to_python(value)
