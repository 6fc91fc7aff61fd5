"""The invariants every fuzzed program must keep, and the checker that runs one program.

This module does not need the generator: the worker process imports only this one.

Invariants (the names are what reproducers and reports show):

- ``outcome``: the result is ``done``/``yielded`` with values, ``error`` with a
  :class:`ScriptError` of kind ``syntax``, ``runtime`` or ``denied``, or ``budget`` with a
  :class:`BudgetExceeded` of kind ``steps``, ``memory`` or ``time``; messages are bounded
  strings; reports are bounded in count and size.
- ``plain-data``: values, reports and errors hold only ``str``, ``int``, ``float``,
  ``bool``, ``None``, ``list`` and ``dict`` (no lupa object, no other Python object), and no
  host address.
- ``host-exception``: nothing but a script fault leaves the sandbox (no :class:`HostError`,
  no Python exception).
- ``wall-time``: every resume ends within its wall budget plus a margin (a resume the
  machine kept off the CPU for longer than the margin is judged on its CPU time; Python's
  full collections that land in it are left out: they cost what the whole process holds).
- ``syntax-verdict``: the sandbox refuses a program as a syntax error exactly when LuaJIT's
  own parser does (or when the instrumented form passes one of LuaJIT's limits, or the source
  one of the sandbox's documented parser limits: too many gotos or colliding numbers).
- ``capability``: after the program, nothing reachable from the mod's environment is a host
  capability, a userdata or a raw-memory cdata (walked from the host side, ``reach.lua``).
- ``sibling``: a sandbox created before the program still answers ``1 + 1`` and its
  environment is unchanged (``fingerprint.lua``).
- ``alive``: the program's sandbox, or its replacement after an out-of-memory trip, still
  runs ``return 'alive'``.
- ``host-time``: the host's work around a resume that is not the resume's own (copying
  values out, describing errors) stays under :data:`HOST_TIME_S`, which a linear copy of
  the largest values that may cross meets many times over. It is measured in CPU time of
  the host's thread: over the resume call, minus over the call into Lua inside it, which
  a busy machine does not inflate (the fuzzer runs niced, beside other work; a wall-clock
  bound failed there).
- ``late-end``: a resume whose own wall time (``outcome.stats.wall_s``) passes its wall
  budget, the stall margin and :data:`LATE_SLACK_S` is a time trip (or an error or trip of
  its own), never ``done`` or ``yielded``: what ends late is counted after the fact, on
  every path of a resume. (``wall-time`` judges the same resumes on the checker's clock.)
- ``source-limit``: a source over ``MAX_SOURCE_BYTES`` (in UTF-8 bytes) is a
  :class:`SourceTooLarge` naming its exact size and the limit; one at or under it never is.
- ``reports``: in each resume, a dropped line leaves ``REPORTS_DROPPED`` as the last
  line and nowhere else, and it is there exactly when ``reports_dropped_now`` counts drops.

Each kind of generated case (:data:`moonbox.fuzz._programs.KINDS`) adds the invariants of
its kind:

- ``colliding-keys`` cases: ``host-time`` holds the host's time around all the resumes to
  :data:`TWIN_FACTOR` times that of the program's twin with keys that do not collide
  (a walk by slot costs both the same; one that re-finds each key along the chain does
  not); ``wall-time`` allows the stall margin on top and judges the thread's CPU time (the
  mod's own inserts into the chain are charged like cheap ones, and cannot be interrupted);
- ``error-value`` cases: no metamethod of the mod ran on the host side (the flag
  ``metamethod_ran`` the programs' metamethods set stays nil: the programs never convert
  their error values themselves); the message bound is the general one, 4 KiB and "...";
- ``report-flood`` cases (programs that yield how many lines they sent): every resume
  keeps its own first line (the caps are per resume) and each line sent is kept or
  counted as dropped;
- ``long-operation`` cases: ``wall-time`` allows the stall margin on top of the margin
  and judges the thread's CPU time (one operation the meter cannot interrupt ends late, and
  is counted as a trip; what it costs is CPU, which a busy machine does not stretch).

Two more are checked by the process that drives the worker (:mod:`moonbox.fuzz._runner`):
``crash`` (the worker process died) and ``hang`` (it did not answer in time), and
``host-memory`` (the worker's resident memory grew past a bound over many programs).

With ``isolate`` (``moonbox fuzz --isolate``) every program also runs through
:class:`moonbox.isolation.IsolatedSandbox`, in a one-worker pool it shares with an isolated
sibling, so the isolation layer itself is fuzzed: frames, outcomes decoded in the host,
host functions served across the pipes, snapshots, kills and restores. Both runs use the
same seed and ``deterministic`` pairs. On the isolated run:

- ``outcome``, ``plain-data``, ``wall-time`` (around each resume, the crossing included)
  and ``alive``, as above;
- ``crash`` (the isolated worker died), ``hang`` (the watchdog killed it: the in-VM meter
  did not stop the program) and ``worker-memory`` (it passed its OS memory limit: memory
  the Lua allocator never saw);
- ``isolation-parity``: the same status, error kind and budget kind as in process, and,
  for the ``steps`` profile, the same values, reports and error message and line (judged
  only for programs that end the same way over repeated runs in process);
- ``sibling``: the isolated sibling still answers and its environment and state snapshot
  are unchanged, even when the program lost the worker they share (it is restored).

The ``capability`` walk runs on the in-process run only: it reads the runtime from the
host side, and the isolated runtime lives in another process.
"""

from __future__ import annotations

import gc
import math
import re
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from lupa import luajit21

from .._errors import MAX_SOURCE_BYTES, BudgetExceeded, Frame, ScriptError, SourceTooLarge
from ..bindings import Registry, default_bindings
from ..sandbox import STALL_MARGIN_S, Budget, Outcome, Sandbox, Stats
from ..sandbox._parser_limits import SourceLimitError, check_parser_limits
from ..sandbox._run import MAX_REPORT_CHARS, MAX_REPORTS, REPORTS_DROPPED
from ..sandbox._runtime import MAX_MESSAGE_BYTES
from ..sandbox._tokenizer import LuaTokenError, tokenize
from ..sandbox._watchdog import stall_margin_s

__all__ = [
    "CHUNK",
    "Checker",
    "CaseResult",
    "DEFAULT_MARGIN_S",
    "DEFAULT_WALL_S",
    "MAX_RESUMES",
    "Violation",
    "budget_for",
    "check_error_value",
    "check_flood",
    "check_host_time",
    "check_host_time_against_twin",
    "check_late_end",
    "check_outcome",
    "check_plain",
    "check_resume_reports",
    "check_source_limit",
    "check_wall",
]

CHUNK = "@fuzz/program.lua"
DEFAULT_WALL_S = 0.2
"""Wall budget of each resume of a fuzzed program."""
DEFAULT_MARGIN_S = 0.75
"""How late past its wall budget a resume may end: generous, for a shared, noisy machine."""
MAX_RESUMES = 3
"""Resumes of a program that yields at top level before the fuzzer closes it."""
MAX_MESSAGE_CHARS = MAX_MESSAGE_BYTES + 3
"""An error message longer than this is unbounded (the sandbox cuts them at 4 KiB and
adds "...")."""
HOST_TIME_S = 1.0
"""The host's time around one resume beyond the resume's own. Copying out the largest
values that may cross (100,000 items) takes ~0.05 s on a quiet machine: this bound is
for a gross superlinearity on a busy one. Colliding-keys cases are held to their twin's
time instead (:data:`TWIN_FACTOR`)."""
COLLIDING_CALL = "local keys = colliding_keys("
PLAIN_CALL = "local keys = plain_keys("
"""How a colliding-keys program makes its keys (``colliding_keys.lua``), and how its twin
does."""
TWIN_FACTOR = 3.0
TWIN_SLACK_S = 0.05
"""A colliding-keys program's host time (over all its resumes) may be at most this factor
of its twin's (the same program with keys that do not collide), plus the slack. A walk by
slot costs both the same; re-finding each key along the chain, ~5-9x at the sizes used."""
LATE_SLACK_S = 0.05
"""Past the wall budget and the stall margin, how late a resume may end before a plain end
(``done``, ``yielded``) is a ``late-end``: the sandbox reads its clock once more after the
resume returns."""
MAX_FRAMES = 256
"""More traceback frames than this is unbounded (the sandbox keeps at most 201)."""
MAX_REACH_ENTRIES = 200_000
"""Table entries the capability walk visits at most (a program may leave huge tables)."""

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
_SMALLEST_ADDRESS = 1 << 24
# The isolated worker's address space: the interpreter and moonbox take ~150 MiB of it.
ISOLATED_MEMORY_LIMIT_BYTES = 768 << 20
# How much later than the checker's margin the watchdog kills an isolated worker: a late
# resume is a wall-time finding first, then a hang.
ISOLATED_KILL_AFTER_S = 0.5
# Text that only the host's side would show (the generator never writes them itself: a
# program reporting its own literal would be taken for a leak).
HOST_MARKERS = ("Traceback (most recent call last)", "_LuaTable", "_LuaFunction",
                "LuaError", "<Lua table", "<Lua function", "lupa.")  # fmt: skip
_STATUSES = ("done", "yielded", "error", "budget")
_ERROR_KINDS = ("syntax", "runtime", "denied")
_BUDGET_KINDS = ("steps", "memory", "time")
_PLAIN_SCALARS = (str, int, float, bool, type(None))


@dataclass(frozen=True, slots=True)
class Violation:
    """One invariant a program broke.

    Attributes:
        invariant: the invariant's name (``outcome``, ``wall-time``, ``crash``, ...).
        detail: what was seen, in one or a few lines.
    """

    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"

    def to_dict(self) -> dict[str, str]:
        return {"invariant": self.invariant, "detail": self.detail}


def budget_for(profile: str, wall_s: float = DEFAULT_WALL_S) -> Budget:
    """The budget of a case: ``steps`` (a small step budget), ``time`` (steps without
    end, the wall budget trips) or ``memory`` (a small heap)."""
    if profile == "steps":
        return Budget(steps=100_000, wall_s=wall_s, max_memory=32 << 20, alloc_bytes=32 << 20)
    if profile == "time":
        return Budget(steps=1 << 50, wall_s=wall_s, max_memory=32 << 20, alloc_bytes=32 << 20)
    if profile == "memory":
        return Budget(steps=1 << 50, wall_s=wall_s, max_memory=8 << 20, alloc_bytes=4 << 20)
    raise ValueError(f"unknown budget profile {profile!r}")


# -- checks on values and outcomes (pure) ----------------------------------------------------


def check_plain(value: Any, path: str = "value", depth: int = 0) -> str | None:
    """Why ``value`` is not plain data, or ``None`` if it is.

    Plain data: ``str``, ``int``, ``float``, ``bool``, ``None``, and lists and dicts of them
    (dict keys: ``str``, ``int``, ``float`` or ``bool``). Exact types: a subclass (a lupa
    object that pretends) is not plain. Strings must not show a host address.
    """
    kind = type(value)
    if kind in _PLAIN_SCALARS:
        if kind is str:
            return _text_problem(value, path)
        return None
    if depth > 64:
        return f"{path} is nested more than 64 levels"
    if kind is list:
        for i, item in enumerate(value):
            problem = check_plain(item, f"{path}[{i}]", depth + 1)
            if problem:
                return problem
        return None
    if kind is dict:
        for key, item in value.items():
            if type(key) not in (str, int, float, bool):
                return f"{path} has a key of type {type(key).__name__}"
            problem = check_plain(key, f"{path}<key>", depth + 1) or check_plain(
                item, f"{path}[{key!r}]", depth + 1
            )
            if problem:
                return problem
        return None
    return f"{path} is a {kind.__module__}.{kind.__qualname__}, not plain data"


def _text_problem(text: str, path: str) -> str | None:
    for m in _ADDRESS.finditer(text):
        # The sandbox shows stable per-mod ids in the same form ("table: 0x00000002"); a
        # real address of this 64-bit host is far above them.
        if int(m.group(0), 16) >= _SMALLEST_ADDRESS:
            return f"{path} shows what looks like a host address ({m.group(0)}): {text[:120]!r}"
    for marker in HOST_MARKERS:
        if marker in text:
            return f"{path} shows host internals ({marker!r}): {text[:120]!r}"
    return None


def check_outcome(outcome: Any, *, expect_syntax: bool | None = None) -> list[Violation]:
    """The violations of the ``outcome`` and ``plain-data`` invariants in one outcome.

    ``expect_syntax``: ``True`` if LuaJIT's parser refuses the program (the outcome must be a
    syntax error), ``False`` if it accepts it (the outcome must not be one, unless the
    instrumented form passed one of LuaJIT's limits), ``None`` not to check.
    """
    found: list[Violation] = []

    def bad(invariant: str, detail: str) -> None:
        found.append(Violation(invariant, detail))

    if type(outcome) is not Outcome:
        bad("outcome", f"not an Outcome: a {type(outcome).__qualname__}")
        return found
    status, error = outcome.status, outcome.error
    if status not in _STATUSES:
        bad("outcome", f"status {status!r} is none of {', '.join(_STATUSES)}")
    if status in ("done", "yielded"):
        if error is not None:
            bad("outcome", f"status {status} carries an error: {error!r}")
        if type(outcome.values) is not tuple:
            bad("plain-data", f"values is a {type(outcome.values).__qualname__}")
        else:
            for i, value in enumerate(outcome.values):
                problem = check_plain(value, f"value {i + 1}")
                if problem:
                    bad("plain-data", problem)
    elif status == "error":
        if type(error) not in (ScriptError, SourceTooLarge):
            bad("outcome", f"status error carries a {type(error).__qualname__}, not a ScriptError")
        elif error.kind not in _ERROR_KINDS:
            bad("outcome", f"error kind {error.kind!r} is none of {', '.join(_ERROR_KINDS)}")
        if outcome.values:
            bad("outcome", "status error carries values")
    elif status == "budget":
        if type(error) is not BudgetExceeded:
            bad("outcome", f"status budget carries a {type(error).__qualname__}")
        elif error.budget not in _BUDGET_KINDS or error.kind != "budget":
            bad("outcome", f"budget kind {error.budget!r} is none of {', '.join(_BUDGET_KINDS)}")
    if isinstance(error, ScriptError):
        found.extend(_check_error(error))
    found.extend(_check_reports(outcome.reports))
    if type(outcome.stats) is not Stats or not all(
        type(x) in (int, float) and math.isfinite(x) and x >= 0 for x in outcome.stats
    ):
        bad("outcome", f"stats are not finite numbers: {outcome.stats!r}")
    if isinstance(error, SourceTooLarge):
        expect_syntax = None  # judged by its size instead (check_source_limit)
    if expect_syntax is True and not (status == "error" and getattr(error, "kind", None) == "syntax"):
        bad("syntax-verdict", f"LuaJIT's parser refuses the program, but the sandbox gave {status}"
            + (f" ({error})" if error is not None else ""))
    if (
        expect_syntax is False
        and status == "error"
        and getattr(error, "kind", None) == "syntax"
        and "once instrumented" not in str(error)
    ):
        bad("syntax-verdict", f"LuaJIT's parser accepts the program, but the sandbox refused it: "
            f"{error}")
    return found


def _check_error(error: ScriptError) -> list[Violation]:
    found = []
    message = error.message
    if type(message) is not str:
        return [Violation("plain-data", f"the error message is a {type(message).__qualname__}")]
    if len(message) > MAX_MESSAGE_CHARS:
        found.append(Violation("outcome", f"the error message is unbounded: {len(message)} chars"))
    problem = _text_problem(message, "the error message")
    if problem:
        found.append(Violation("plain-data", problem))
    if error.chunk is not None and type(error.chunk) is not str:
        found.append(Violation("plain-data", f"the error chunk is a {type(error.chunk).__name__}"))
    if error.line is not None and type(error.line) is not int:
        found.append(Violation("plain-data", f"the error line is a {type(error.line).__name__}"))
    if len(error.traceback) > MAX_FRAMES:
        found.append(Violation("outcome", f"the traceback has {len(error.traceback)} frames"))
    for frame in error.traceback:
        if type(frame) is not Frame or type(frame.chunk) is not str:
            found.append(Violation("plain-data", f"a traceback frame is not plain: {frame!r}"))
            break
    if isinstance(error, BudgetExceeded):
        for name in ("limit", "used"):
            value = getattr(error, name)
            if type(value) not in (int, float):
                found.append(Violation("plain-data", f"the trip's {name} is a {type(value)}"))
    return found


def _check_reports(reports: Any) -> list[Violation]:
    if type(reports) is not tuple:
        return [Violation("plain-data", f"reports is a {type(reports).__qualname__}")]
    found = []
    if len(reports) > MAX_REPORTS + 1:  # and the line that says the rest was dropped
        found.append(Violation("outcome", f"{len(reports)} reports, more than {MAX_REPORTS}"))
    for i, line in enumerate(reports):
        if type(line) is not str:
            found.append(Violation("plain-data", f"report {i + 1} is a {type(line).__qualname__}"))
            break
        if len(line) > MAX_REPORT_CHARS:
            found.append(Violation("outcome", f"report {i + 1} has {len(line)} chars"))
            break
        problem = _text_problem(line, f"report {i + 1}")
        if problem:
            found.append(Violation("plain-data", problem))
            break
    return found


class FullCollections:
    """The time Python's full collections (generation 2) took in this process so far, wall
    and CPU: a cost of every object the process holds, not of the resume it lands in (a
    worker that has run hundreds of programs holds many), which the ``wall-time`` check
    leaves out. The smaller collections stay in: they follow what the resume allocated."""

    def __init__(self) -> None:
        self.wall_s = 0.0
        self.cpu_s = 0.0
        self._started: tuple[float, float] | None = None
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = (time.perf_counter(), time.thread_time())
        elif self._started is not None:
            wall0, cpu0 = self._started
            self.wall_s += time.perf_counter() - wall0
            self.cpu_s += time.thread_time() - cpu0
            self._started = None

    def spent(self) -> tuple[float, float]:
        return self.wall_s, self.cpu_s


_full_collections: FullCollections | None = None


def full_collections() -> FullCollections:
    """The process's one :class:`FullCollections`, made on first use."""
    global _full_collections
    if _full_collections is None:
        _full_collections = FullCollections()
    return _full_collections


def check_wall(elapsed_s: float, budget: Budget, margin_s: float,
               cpu_s: float | None = None) -> Violation | None:
    """A ``wall-time`` violation if one resume ran past its wall budget plus the margin.

    ``cpu_s``, when given, is the CPU time of the resume's thread over the same span. A
    resume the machine kept off the CPU for longer than the margin (a busy machine, a
    low-priority campaign) ends late by that time whatever the sandbox does: its meter only
    runs while the thread does, and trips at its next poll once it runs again. Such a
    resume is judged on its CPU time instead, which descheduling does not stretch and a
    resume the meter failed to stop would still show."""
    judged = elapsed_s
    if cpu_s is not None and elapsed_s - cpu_s > margin_s:
        judged = cpu_s
    if judged > budget.wall_s + margin_s:
        off = "" if judged == elapsed_s else f" on the CPU (of {elapsed_s:.3f} s)"
        return Violation(
            "wall-time",
            f"a resume ran {judged:.3f} s{off}, past its wall budget of {budget.wall_s} s "
            f"plus the margin of {margin_s} s",
        )
    return None


def check_host_time(host_s: float, outcome: Outcome,
                    bound_s: float = HOST_TIME_S) -> Violation | None:
    """A ``host-time`` violation if the host spent more than ``bound_s`` (``host_s``: CPU
    time of its thread) around one resume, beyond the resume's own run in Lua."""
    if host_s > bound_s:
        return Violation(
            "host-time",
            f"the host spent {host_s:.3f} s around a resume of {outcome.stats.wall_s:.3f} s "
            f"({outcome.status}), past the bound of {bound_s} s: work superlinear in what "
            "the mod handed over?",
        )
    return None


def plain_twin(source: str) -> str:
    """A colliding-keys program with keys that do not collide instead."""
    return source.replace(COLLIDING_CALL, PLAIN_CALL, 1)


def check_host_time_against_twin(host_s: float, twin_s: float) -> Violation | None:
    """A ``host-time`` violation if a colliding-keys program cost the host (``host_s``, over
    all its resumes) more than :data:`TWIN_FACTOR` times what its twin with keys that do
    not collide cost (``twin_s``), plus :data:`TWIN_SLACK_S`."""
    if host_s > TWIN_FACTOR * twin_s + TWIN_SLACK_S:
        return Violation(
            "host-time",
            f"values of colliding keys cost the host {host_s:.3f} s, {host_s / max(twin_s, 1e-6):.1f}"
            f" times the {twin_s:.3f} s of the same values with keys that do not collide: a "
            "walk that re-finds each key along its chain?",
        )
    return None


def check_late_end(elapsed_s: float, outcome: Outcome, budget: Budget,
                   slack_s: float = LATE_SLACK_S) -> Violation | None:
    """A ``late-end`` violation if a resume that ran ``elapsed_s`` (the checker passes the
    resume's own wall time), past its wall budget, the stall margin and ``slack_s``, ended
    plainly (``done`` or ``yielded``), not as a trip."""
    late_s = budget.wall_s + stall_margin_s(budget.wall_s) + slack_s
    if elapsed_s > late_s and outcome.status in ("done", "yielded"):
        return Violation(
            "late-end",
            f"a resume ran {elapsed_s:.3f} s under a wall budget of {budget.wall_s} s and "
            f"ended {outcome.status}, not as a time trip (late past {late_s:.2f} s)",
        )
    return None


def check_source_limit(outcome: Outcome, size_bytes: int) -> Violation | None:
    """A ``source-limit`` violation: a source of ``size_bytes`` (UTF-8) over
    ``MAX_SOURCE_BYTES`` not refused as a :class:`SourceTooLarge` of that exact size and
    the limit, or one at or under it refused as one."""
    error = outcome.error
    if size_bytes > MAX_SOURCE_BYTES:
        if not isinstance(error, SourceTooLarge) or outcome.status != "error":
            return Violation("source-limit", f"a source of {size_bytes} bytes, over the "
                             f"limit of {MAX_SOURCE_BYTES}, ended {outcome.status}: "
                             f"{str(error)[:200] if error else outcome.values!r}")
        if (error.size_bytes, error.limit_bytes, error.code) != (
                size_bytes, MAX_SOURCE_BYTES, "source_too_large"):
            return Violation("source-limit", f"a source of {size_bytes} bytes was refused as "
                             f"{error.size_bytes} bytes over a limit of {error.limit_bytes} "
                             f"({error.code})")
        return None
    if isinstance(error, SourceTooLarge):
        return Violation("source-limit", f"a source of {size_bytes} bytes, within the limit "
                         f"of {MAX_SOURCE_BYTES}, was refused: {error}")
    return None


def check_resume_reports(outcome: Outcome, dropped_now: int) -> Violation | None:
    """A ``reports`` violation: in one resume, ``REPORTS_DROPPED`` anywhere but last, or
    there without drops counted (``dropped_now``), or drops counted without it."""
    reports = outcome.reports if type(outcome.reports) is tuple else ()
    marked = bool(reports) and reports[-1] == REPORTS_DROPPED
    if REPORTS_DROPPED in reports[:-1]:
        return Violation("reports", "REPORTS_DROPPED is not the resume's last line")
    if marked and not dropped_now:
        return Violation("reports", "the resume says lines were dropped, but counts none")
    if dropped_now and not marked:
        return Violation("reports", f"{dropped_now} lines were dropped silently: the resume's "
                         f"last line is not REPORTS_DROPPED ({len(reports)} lines)")
    return None


def check_flood(outcome: Outcome, dropped_now: int, resume: int) -> Violation | None:
    """A ``reports`` violation in resume ``resume`` (from 1) of a report flood (a program
    that reports ``resume <n>`` first and yields or returns how many lines it sent): its
    first line lost (the caps are not per resume) or lines neither kept nor counted."""
    if outcome.status not in ("done", "yielded") or len(outcome.values) != 1:
        return None  # tripped before it said how many it sent
    sent = outcome.values[0]
    reports = outcome.reports
    kept = len(reports) - (1 if reports and reports[-1] == REPORTS_DROPPED else 0)
    if not reports or reports[0] != f"resume {resume}":
        return Violation("reports", f"resume {resume} sent {sent} lines, but its first line "
                         f"is {reports[0] if reports else None!r}: the caps are not per "
                         "resume")
    if kept + dropped_now != sent:
        return Violation("reports", f"resume {resume} sent {sent} lines: {kept} kept, "
                         f"{dropped_now} counted as dropped")
    return None


def check_error_value(flag: Any) -> Violation | None:
    """An ``error-value`` violation if a metamethod of the mod ran on the host side: the
    ``metamethod_ran`` global the programs' metamethods set is not nil."""
    if flag is not None:
        return Violation("error-value", f"a metamethod of the mod ran on the host side: "
                         f"metamethod_ran = {flag!r}")
    return None


# -- running one program ---------------------------------------------------------------------


def _lua_file(name: str) -> bytes:
    return resources.files("moonbox.fuzz").joinpath(name).read_bytes()


@dataclass
class CaseResult:
    """What running one program showed.

    Attributes:
        violations: the invariants it broke (empty when none).
        status: ``done``, ``yielded``, ``error:<kind>`` or ``budget:<kind>``, for statistics.
        elapsed_s: wall time of its resumes, together.
        resumes: each resume's outcome, elapsed time, CPU time of the host's thread, CPU
            time of the host's work around the run in Lua, and ``reports_dropped_now`` (in
            process).
    """

    violations: list[Violation] = field(default_factory=list)
    status: str = ""
    elapsed_s: float = 0.0
    resumes: list[tuple[Outcome, float, float, float, int]] = field(default_factory=list)


class Checker:
    """Runs fuzzed programs one by one and checks every invariant on each.

    Each program runs in a fresh sandbox with the default bindings (``report``, ``add``),
    made through a registry as a host would. One sibling sandbox lives as long as the checker
    and is fingerprinted after every program.

    Args:
        jit: the metering mode of every sandbox.
        wall_s: the wall budget of each resume.
        margin_s: how late past ``wall_s`` a resume may end.
        isolate: also run every program through an isolated sandbox and check the
            isolation invariants (see the module's documentation).
    """

    def __init__(
        self, *, jit: bool = True, wall_s: float = DEFAULT_WALL_S,
        margin_s: float = DEFAULT_MARGIN_S, isolate: bool = False,
    ) -> None:
        self.jit = jit
        self.wall_s = wall_s
        self.margin_s = margin_s
        self.isolate = isolate
        self._seed = 1
        self._api = Registry(default_bindings()).mod("fuzz")
        self._reach = _lua_file("reach.lua")
        self._fingerprint = _lua_file("fingerprint.lua")
        self._parser = luajit21.LuaRuntime(register_eval=False, register_builtins=False,
                                           encoding=None)
        self._parses = self._parser.execute(
            b"require('ffi') return function(s) return load(s, '=fuzz', 't') ~= nil end"
        )
        probe = self._sandbox(budget_for("steps", wall_s))
        try:
            self._wrapped = bytes(probe._rt.execute(_lua_file("wrapped.lua"), probe._env))
        finally:
            probe.close()
        self.wrapped_names: tuple[str, ...] = tuple(self._wrapped.decode().split())
        """Functions of the mod environment the prelude wraps ("pcall", "coroutine.resume",
        ...): their real versions must be out of a mod's reach."""
        self._sibling = self._sandbox(Budget(steps=10_000_000, wall_s=5.0))
        self._sibling_print = self._sibling_fingerprint()
        self._pool: Any = None
        if isolate:
            from ..isolation import WorkerPool

            self._pool = WorkerPool(1, memory_limit_bytes=ISOLATED_MEMORY_LIMIT_BYTES)
            self._programs = 0
            self._iso_sibling = self._pool.sandbox(
                "sibling", Budget(steps=10_000_000, wall_s=5.0),
                host_functions=self._api.host_functions, jit=jit, seed=1, deterministic=True,
                respawn="next_call")
            self._iso_sibling.run("state = {answer = 42, name = 'sibling'}", "=fuzz-sibling")
            self._iso_sibling_print = self._isolated_fingerprint()

    def close(self) -> None:
        """Release the sibling sandboxes, the isolated worker and the bindings' scope."""
        self._sibling.close()
        if self._pool is not None:
            self._pool.close()
        self._api.close()

    def _sandbox(self, budget: Budget) -> Sandbox:
        if self.isolate:  # the same random numbers and pairs order as the isolated run
            return self._api.sandbox(budget, jit=self.jit, seed=self._seed, deterministic=True)
        return self._api.sandbox(budget, jit=self.jit)

    def parses(self, source: str) -> bool:
        """Whether LuaJIT's own parser accepts the source (nothing of it runs)."""
        return bool(self._parses(source.encode("utf-8", "surrogateescape")))

    @staticmethod
    def over_parser_limits(source: str) -> bool:
        """Whether the source passes one of the sandbox's documented parser limits (more
        gotos, or more colliding number constants, than loading can take in linear work):
        the sandbox refuses it as a syntax error although LuaJIT's parser would take it."""
        try:
            check_parser_limits(tokenize(source))
        except SourceLimitError:
            return True
        except (LuaTokenError, ValueError):
            return False  # not Lua the tokenizer reads: LuaJIT's parser judges it
        return False

    def check(self, source: str, profile: str, kind: str = "composed") -> CaseResult:
        """Run one program under the profile's budget; every invariant it broke, with the
        invariants of its ``kind`` of case (see the module's documentation)."""
        result = CaseResult()
        budget = budget_for(profile, self.wall_s)
        # A long operation, or the inserts of colliding keys, the meter cannot interrupt:
        # past the stall margin they are counted as trips (late-end), not stopped. Their
        # resumes are judged on the thread's CPU time: what one such operation takes is
        # CPU, and a niced worker on a busy machine stretched 0.5 s sorts to 2.5 s of wall.
        uninterruptible = kind in ("long-operation", "colliding-keys")
        margin_s = self.margin_s + (STALL_MARGIN_S if uninterruptible else 0.0)
        expect_syntax = not self.parses(source) or self.over_parser_limits(source)
        self._seed = (self._seed * 1103515245 + 12345) % (1 << 31)
        sb = self._sandbox(budget)
        try:
            outcome = self._run(sb, source, budget, result, margin_s, uninterruptible)
            if outcome is not None:
                result.violations.extend(check_outcome(outcome, expect_syntax=expect_syntax))
                result.status = _summary(outcome)
                result.violations.extend(self._by_resume(result, budget, kind))
                size = len(source.encode("utf-8", "surrogateescape"))
                limit = check_source_limit(outcome, size)
                if limit:
                    result.violations.append(limit)
            if kind == "error-value":
                flagged = check_error_value(self._flag(sb))
                if flagged:
                    result.violations.append(flagged)
            self._after(sb, result)
        finally:
            sb.close()
        if kind == "colliding-keys" and outcome is not None:
            twin = self._host_time_of_twin(source, budget, margin_s)
            slow = check_host_time_against_twin(_host_s(result), twin)
            if slow:
                result.violations.append(slow)
        self._check_sibling(result)
        if self.isolate:
            try:
                self._check_isolated(source, profile, budget, expect_syntax, outcome, result,
                                     margin_s)
            except Exception as exc:  # noqa: BLE001 - any escape is the finding
                result.violations.append(_escaped(exc, "running the program isolated"))
        return result

    # -- the isolated run ----------------------------------------------------------------

    @staticmethod
    def _by_resume(result: CaseResult, budget: Budget, kind: str) -> list[Violation]:
        """The invariants judged on each resume: host time, late ends, reports."""
        found = []
        for index, (outcome, _elapsed, _cpu_s, host_s, dropped_now) in enumerate(
                result.resumes, 1):
            for violation in (
                check_host_time(host_s, outcome),
                check_late_end(outcome.stats.wall_s, outcome, budget),
                check_resume_reports(outcome, dropped_now),
                check_flood(outcome, dropped_now, index) if kind == "report-flood" else None,
            ):
                if violation:
                    found.append(violation)
        return found

    def _host_time_of_twin(self, source: str, budget: Budget, margin_s: float) -> float:
        """The host's time around the resumes of a colliding-keys program's twin (the
        same program with keys that do not collide)."""
        twin = CaseResult()
        sb = self._sandbox(budget)
        try:
            self._run(sb, plain_twin(source), budget, twin, margin_s)
        finally:
            sb.close()
        return _host_s(twin)

    def _flag(self, sb: Sandbox) -> Any:
        """The mod's ``metamethod_ran`` global, read raw from the host side."""
        rt = sb._rt
        limit = sb._current_limit
        try:
            rt.set_max_memory(0)
            return rt.execute(b"return rawget(..., 'metamethod_ran')", sb._env)
        except Exception as exc:  # noqa: BLE001
            return f"(the flag could not be read: {exc})"
        finally:
            rt.set_max_memory(limit, True)

    def _check_isolated(self, source: str, profile: str, budget: Budget,
                        expect_syntax: bool, in_process: Outcome | None,
                        result: CaseResult, margin_s: float) -> None:
        """Run the program through an isolated sandbox; every isolation invariant."""
        self._programs += 1
        sb = self._pool.sandbox(
            f"program-{self._programs}", budget, host_functions=self._api.host_functions,
            jit=self.jit, seed=self._seed, deterministic=True, state_global="state",
            wall_margin_s=margin_s + ISOLATED_KILL_AFTER_S, respawn="next_call")
        found = result.violations
        try:
            outcome = self._run_isolated(sb, source, budget, found, margin_s)
            if outcome is not None:
                found.extend(self._isolated_outcome(sb, outcome, expect_syntax, margin_s))
                if in_process is not None:
                    missed = _parity(profile, in_process, outcome, self.jit)
                    if missed and self._repeats_in_process(source, profile, budget, in_process):
                        found.extend(missed)
            alive = sb.run("return 'alive'", "=fuzz-alive")
            if alive.status != "done" or alive.values != ("alive",):
                found.append(Violation("alive", f"the isolated sandbox no longer runs `return "
                                       f"'alive'`: {alive.status} {alive.error or alive.values!r}"))
        finally:
            sb.close()
        self._check_isolated_sibling(result)

    def _repeats_in_process(self, source: str, profile: str, budget: Budget,
                            first: Outcome) -> bool:
        """Whether the program ends in process as it did the first time, over a few more
        runs (seen by parity). Some programs end differently from one run to the next in
        process too (where a budget trips inside an unbounded metamethod recursion that
        overflows the Lua stack, say): isolation cannot match what does not repeat, so
        their parity is not judged."""
        for _ in range(REPEATS_FOR_PARITY):
            sb = self._sandbox(budget)
            try:
                again = self._run(sb, source, budget, CaseResult(), self.margin_s)
            finally:
                sb.close()
            if again is None or _parity(profile, first, again, self.jit):
                return False
        return True

    def _run_isolated(self, sb: Any, source: str, budget: Budget,
                      found: list[Violation], margin_s: float) -> Outcome | None:
        try:
            run = sb.start(source, CHUNK)
        except ScriptError as exc:
            return Outcome("error", (), exc)
        outcome: Outcome | None = None
        try:
            for i in range(MAX_RESUMES):
                t0 = time.perf_counter()
                outcome = run.resume()
                late = check_wall(time.perf_counter() - t0, budget, margin_s)
                if late:
                    found.append(Violation(late.invariant, "isolated: " + late.detail))
                if outcome.status != "yielded" or i == MAX_RESUMES - 1:
                    break
                found.extend(check_outcome(outcome))
        finally:
            run.close()
        return outcome

    def _isolated_outcome(self, sb: Any, outcome: Outcome,
                          expect_syntax: bool, margin_s: float) -> list[Violation]:
        """The outcome invariants, and the loss of the worker as the finding it is."""
        from ..isolation import WorkerCrashed

        error = outcome.error
        if isinstance(error, WorkerCrashed):
            return [Violation("crash", f"the isolated worker crashed: {error.message} "
                                       f"(signal {error.signal}, status {error.exit_code})")]
        found = check_outcome(outcome, expect_syntax=expect_syntax)
        if sb.lost:
            if outcome.budget == "memory":
                found.append(Violation("worker-memory", "the isolated worker passed its OS "
                                       f"memory limit ({ISOLATED_MEMORY_LIMIT_BYTES >> 20} MiB)"
                                       ": memory the Lua allocator never saw"))
            else:
                found.append(Violation("hang", "the watchdog killed the isolated worker: the "
                                       f"program was not stopped within its wall budget "
                                       f"plus {margin_s + ISOLATED_KILL_AFTER_S} s"))
        return found

    def _isolated_fingerprint(self) -> Any:
        out = self._iso_sibling.run(self._fingerprint, "=fuzz-sibling")
        state = self._iso_sibling.run("return state.answer, state.name", "=fuzz-sibling")
        return (out.status, out.values, str(out.error) if out.error else None, state.values)

    def _check_isolated_sibling(self, result: CaseResult) -> None:
        try:
            now = self._isolated_fingerprint()
        except Exception as exc:  # noqa: BLE001
            result.violations.append(Violation(
                "sibling", f"the isolated sibling failed: {exc!r}"))
            return
        if now != self._iso_sibling_print:
            result.violations.append(Violation(
                "sibling", "the isolated sibling changed (restored "
                f"{self._iso_sibling.restores} times): {str(now)[:300]}"))

    def _run(self, sb: Sandbox, source: str, budget: Budget, result: CaseResult,
             margin_s: float, on_cpu: bool = False) -> Outcome | None:
        """Run a program, resume by resume, with the ``wall-time`` check on each (on the
        thread's CPU time with ``on_cpu``); the last outcome, or ``None`` if something
        escaped."""
        try:
            run = sb.start(source, CHUNK)
        except ScriptError as exc:
            return Outcome("error", (), exc)
        except Exception as exc:  # noqa: BLE001 - any escape is the finding
            result.violations.append(_escaped(exc, "compiling"))
            result.status = "host-exception"
            return None
        outcome: Outcome | None = None
        # The host's work around a resume is the resume call's CPU time minus its call into
        # Lua's: timed by a wrapper of the sandbox's entry into Lua.
        lua_cpu = [0.0]
        enter_lua = sb._h_resume

        def timed(*args: Any) -> Any:
            c0 = time.thread_time()
            try:
                return enter_lua(*args)
            finally:
                lua_cpu[0] += time.thread_time() - c0

        sb._h_resume = timed
        collections = full_collections()
        try:
            for i in range(MAX_RESUMES):
                gc_wall0, gc_cpu0 = collections.spent()
                t0, cpu0, lua0 = time.perf_counter(), time.thread_time(), lua_cpu[0]
                outcome = run.resume()
                elapsed = time.perf_counter() - t0
                cpu_s = time.thread_time() - cpu0
                gc_wall, gc_cpu = collections.spent()
                # Python's full collections that landed in the resume are the process's.
                elapsed -= gc_wall - gc_wall0
                cpu_s -= gc_cpu - gc_cpu0
                host_s = cpu_s - (lua_cpu[0] - lua0)
                result.elapsed_s += elapsed
                result.resumes.append((outcome, elapsed, cpu_s, host_s,
                                       run.reports_dropped_now))
                late = check_wall(cpu_s if on_cpu else elapsed, budget, margin_s,
                                  None if on_cpu else cpu_s)
                if late:
                    result.violations.append(late)
                if outcome.status != "yielded" or i == MAX_RESUMES - 1:
                    break  # the caller checks the last outcome
                result.violations.extend(check_outcome(outcome))
        except Exception as exc:  # noqa: BLE001
            result.violations.append(_escaped(exc, "running"))
            result.status = "host-exception"
            return None
        finally:
            run.close()
        return outcome

    def _after(self, sb: Sandbox, result: CaseResult) -> None:
        try:
            alive = sb.run("return 'alive'", "=fuzz-alive")
        except Exception as exc:  # noqa: BLE001
            result.violations.append(_escaped(exc, "running 'return alive' after the program"))
            return
        if alive.status != "done" or alive.values != ("alive",):
            result.violations.append(Violation(
                "alive", f"the sandbox no longer runs `return 'alive'`: {alive.status} "
                f"{alive.error or alive.values!r} (replaced {sb.replacements} times)"
            ))
        result.violations.extend(self.reachable(sb))

    def reachable(self, sb: Sandbox) -> list[Violation]:
        """``capability`` violations: host capabilities reachable from the sandbox's mod
        environment, walked from the host side of its runtime."""
        rt = sb._rt
        limit = sb._current_limit
        try:
            rt.set_max_memory(0)  # the walk's own tables must never meet the mod's limit
            found, _visited = rt.execute(self._reach, sb._env, self._wrapped, MAX_REACH_ENTRIES)
            findings = [found[i].decode("utf-8", "replace") for i in range(1, len(found) + 1)]
        except Exception as exc:  # noqa: BLE001
            return [Violation("capability", f"the walk of the environment failed: {exc}")]
        finally:
            rt.set_max_memory(limit, True)
            rt.gccollect()
        return [Violation("capability", f"reachable from the mod: {f}") for f in findings]

    def _sibling_fingerprint(self) -> Any:
        out = self._sibling.run(self._fingerprint, "=fuzz-sibling")
        return out.status, out.values, str(out.error) if out.error else None

    def _check_sibling(self, result: CaseResult) -> None:
        try:
            now = self._sibling_fingerprint()
            sum_ok = self._sibling.run("return 1 + 1", "=fuzz-sibling").values == (2,)
        except Exception as exc:  # noqa: BLE001
            result.violations.append(Violation("sibling", f"the sibling sandbox failed: {exc!r}"))
            return
        if now != self._sibling_print:
            result.violations.append(Violation(
                "sibling", f"the sibling sandbox's environment changed: {_diff(self._sibling_print, now)}"
            ))
        if not sum_ok:
            result.violations.append(Violation("sibling", "the sibling no longer answers 1 + 1"))


# In-process runs that must all end as the first one did before a parity miss counts.
REPEATS_FOR_PARITY = 3


def _canonical(value: Any) -> Any:
    """A value as parity compares it: NaN equal to NaN, tables whatever their traversal
    order (it follows addresses for table and boolean keys, which differ between runtimes)."""
    if isinstance(value, float) and value != value:
        return ("nan",)
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return sorted(([_canonical(k), _canonical(v)] for k, v in value.items()), key=repr)
    return value


def _parity(profile: str, local: Outcome, isolated: Outcome, jit: bool = True,
            ) -> list[Violation]:
    """``isolation-parity``: the isolated run ended as the in-process one did."""
    def shape(o: Outcome, full: bool) -> tuple[Any, ...]:
        e = o.error
        kind = None if e is None else (e.kind, o.budget)
        if not full:
            return (o.status, kind)
        # Messages only for syntax errors: a runtime message may name the first value of a
        # table that cannot cross, and which one comes first follows addresses. With the
        # JIT off, where a trip lands follows the count hook's phase, which the host's own
        # Lua helpers (run more often in a worker) move.
        where = None if e is None or (o.status == "budget" and not jit) else (
            e.message if e.kind == "syntax" else None, e.chunk, e.line)
        return (o.status, kind, where, _canonical(o.values), list(o.reports))

    if (profile == "time" and "budget" in (local.status, isolated.status)) or \
            "time" in (local.budget, isolated.budget):
        return []  # where a wall trip lands is the machine's doing
    full = profile == "steps"
    a, b = shape(local, full), shape(isolated, full)
    if a == b:
        return []
    return [Violation("isolation-parity", f"in process {str(a)[:300]}; isolated {str(b)[:300]}")]


def _diff(before: Any, after: Any) -> str:
    if before[0] != after[0] or before[2] != after[2]:
        return f"status {before[0]} -> {after[0]} {after[2] or ''}".strip()
    b, a = before[1], after[1]
    if b and a and b[0] != a[0]:
        old, new = set(b[0].split()), set(a[0].split())
        return f"globals added {sorted(new - old)[:10]}, removed {sorted(old - new)[:10]}"
    changed = [i for i, (x, y) in enumerate(zip(b, a, strict=False)) if x != y]
    return f"values {changed} differ: {[a[i] for i in changed]!r}"[:400]


def _escaped(exc: BaseException, when: str) -> Violation:
    text = str(exc).splitlines()[0][:300] if str(exc) else ""
    return Violation("host-exception", f"{type(exc).__qualname__} while {when}: {text}")


def _host_s(result: CaseResult) -> float:
    """The host's work around a program's resumes, beyond their runs in Lua (CPU time of
    the host's thread: see ``host-time``)."""
    return sum(host_s for *_, host_s, _ in result.resumes)


def _summary(outcome: Outcome) -> str:
    if outcome.status == "budget":
        return f"budget:{outcome.budget}"
    if outcome.status == "error" and outcome.error is not None:
        return f"error:{outcome.error.kind}"
    return outcome.status
