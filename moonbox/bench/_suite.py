"""``moonbox bench --suite``: the project's benchmark programs, each against raw LuaJIT.

The programs in ``suite/`` are ordinary Lua written for this benchmark: allocation-heavy
trees and objects, nested numeric loops over arrays, a ray tracer, recursion, coroutines,
string building, JSON, graph algorithms, sorting, sieves, interpreters. Each runs for
~50-300 ms in raw LuaJIT on the machine it was sized on, is deterministic, checks its own
result (an ``assert`` fails otherwise) and returns a checksum.

How they are timed:

- every sample runs in a fresh runtime: LuaJIT's trace selection differs between fresh
  runtimes (the same program can take 95 ms in one and 330 ms in the next), so a figure
  from one long-lived runtime says little; creating the runtime and compiling the source
  are not timed, only the run;
- ``raw`` is a plain ``lupa.luajit21.LuaRuntime()`` with the JIT on (see ``_baseline``);
  ``metered`` a :class:`Sandbox` with the JIT on (source-instrumented metering) and
  ``nojit`` one with the JIT off and a count hook, both under :data:`BENCH_BUDGET`: the
  heap cap and the step, allocation and wall budgets in force, each large enough never to
  trip;
- the modes are interleaved in one run: each round samples every program in every mode,
  a program's modes one after the other, their order rotating each round, so that drift of
  a shared machine hits every mode alike;
- the figure per mode is the median of the rounds; the ratio divides medians; its range
  is that of the rounds' own ratios (each round's moonbox sample over the raw sample taken
  next to it);
- every sample must return the raw runtime's checksum, or the benchmark fails.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from .._errors import HostError
from ..sandbox import Sandbox
from ._baseline import raw_luajit
from ._workloads import BENCH_BUDGET, MODES, Mode

__all__ = [
    "PROGRAMS",
    "QUICK_SUITE_ROUNDS",
    "SUITE_ROUNDS",
    "TARGET_SUITE_GEOMEAN",
    "TARGET_SUITE_PROGRAM",
    "Program",
    "SuiteTiming",
    "fresh_runner",
    "measure_suite",
    "program_source",
    "run_suite",
    "suite_report",
]

# Targets of issue 21, against raw LuaJIT with the JIT on.
TARGET_SUITE_GEOMEAN = 1.10
TARGET_SUITE_PROGRAM = 1.5

# Samples per program and mode; a quick run takes fewer.
SUITE_ROUNDS = 7
QUICK_SUITE_ROUNDS = 3


@dataclass(frozen=True, slots=True)
class Program:
    """One file of ``suite/``: its name (the file's stem) and what it exercises (the first
    line of its header comment)."""

    name: str
    description: str


def _suite_files() -> Any:
    return resources.files("moonbox.bench").joinpath("suite")


def program_source(name: str) -> str:
    """The text of ``suite/<name>.lua``."""
    return _suite_files().joinpath(f"{name}.lua").read_text()


def _programs() -> tuple[Program, ...]:
    found = []
    for entry in _suite_files().iterdir():
        if not entry.name.endswith(".lua"):
            continue
        name = entry.name[:-4]
        first = entry.read_text().split("\n", 1)[0]
        found.append(Program(name, first.removeprefix("--").strip()))
    return tuple(sorted(found, key=lambda p: p.name))


PROGRAMS: tuple[Program, ...] = _programs()


class _Raw:
    def __init__(self, source: str) -> None:
        self._rt = raw_luajit()
        self._fn = self._rt.compile(source)

    def __call__(self) -> Any:
        return self._fn()

    def close(self) -> None:
        self._fn = self._rt = None


class _Sandboxed:
    def __init__(self, name: str, source: str, *, jit: bool) -> None:
        self._sandbox = Sandbox(BENCH_BUDGET, jit=jit)
        self._chunk = self._sandbox.load(source, f"@moonbox/bench/suite/{name}.lua")

    def __call__(self) -> Any:
        return self._sandbox.run(self._chunk).unwrap()[0]

    def close(self) -> None:
        self._sandbox.close()


def fresh_runner(name: str, mode: Mode) -> _Raw | _Sandboxed:
    """A new runtime with ``suite/<name>.lua`` compiled in it, ready to run once: calling
    it runs the program and returns its checksum; ``close()`` frees the runtime.

    Raises:
        ScriptError: the program does not compile, or (when called) fails or trips.
    """
    source = program_source(name)
    if mode == "raw":
        return _Raw(source)
    return _Sandboxed(name, source, jit=mode == "metered")


def _sample(name: str, mode: Mode) -> tuple[float, Any]:
    """Seconds of one run of the program in a fresh runtime, and its checksum."""
    runner = fresh_runner(name, mode)
    try:
        t0 = time.perf_counter()
        value = runner()
        return time.perf_counter() - t0, value
    finally:
        runner.close()


@dataclass(frozen=True, slots=True)
class SuiteTiming:
    """Every sample of one program, in seconds, per mode, in round order."""

    program: Program
    checksum: Any
    samples: dict[Mode, list[float]]

    def median(self, mode: Mode) -> float:
        return statistics.median(self.samples[mode])

    def ratio(self, mode: Mode) -> float:
        """The mode's median over raw's."""
        return self.median(mode) / self.median("raw")

    def round_ratios(self, mode: Mode) -> list[float]:
        """Each round's sample of the mode over that round's raw sample."""
        return [m / r for m, r in zip(self.samples[mode], self.samples["raw"], strict=True)]

    def to_dict(self) -> dict[str, Any]:
        modes = [m for m in MODES if m in self.samples]
        row: dict[str, Any] = {
            "name": self.program.name,
            "description": self.program.description,
            "checksum": self.checksum,
        }
        for mode in modes:
            ms = [s * 1e3 for s in self.samples[mode]]
            row[f"{mode}_ms"] = statistics.median(ms)
            row[f"{mode}_range_ms"] = [min(ms), max(ms)]
            row[f"{mode}_samples_ms"] = ms
            if mode != "raw":
                ratios = self.round_ratios(mode)
                row[f"{mode}_ratio"] = self.ratio(mode)
                row[f"{mode}_ratio_range"] = [min(ratios), max(ratios)]
        return row


def measure_suite(rounds: int = SUITE_ROUNDS, modes: Sequence[Mode] = ("raw", "metered"),
                  names: Iterable[str] | None = None,
                  progress: Callable[[str], None] | None = None) -> list[SuiteTiming]:
    """Time the programs (all, or those named) in the given modes, interleaved.

    One warm-up round runs first, untimed: it pins each program's checksum (raw's), which
    every later sample must return.

    Raises:
        HostError: a program returned another checksum than raw LuaJIT's, or a name is not
            a program of the suite.
        ScriptError: a program failed or tripped a budget in the sandbox.
    """
    if "raw" not in modes:
        raise HostError("the suite's ratios need the raw mode")
    known = {p.name: p for p in PROGRAMS}
    chosen = list(PROGRAMS) if names is None else []
    for name in names or ():
        if name not in known:
            raise HostError(f"no program {name!r} in the suite (see moonbox/bench/suite/)")
        chosen.append(known[name])
    checksums: dict[str, Any] = {}
    for program in chosen:
        for mode in modes:
            _, value = _sample(program.name, mode)
            expected = checksums.setdefault(program.name, value)
            if value != expected:
                raise HostError(f"{program.name} returned {value!r} in mode {mode}, "
                                f"raw LuaJIT {expected!r}")
    samples = {p.name: {mode: [] for mode in modes} for p in chosen}
    gc.collect()
    for r in range(rounds):
        order = list(modes[r % len(modes):]) + list(modes[:r % len(modes)])
        for program in chosen:
            if progress is not None:
                progress(f"round {r + 1}/{rounds}: {program.name}")
            for mode in order:
                seconds, value = _sample(program.name, mode)
                if value != checksums[program.name]:
                    raise HostError(f"{program.name} returned {value!r} in mode {mode}, "
                                    f"not {checksums[program.name]!r}")
                samples[program.name][mode].append(seconds)
    return [SuiteTiming(p, checksums[p.name], samples[p.name]) for p in chosen]


def suite_report(timings: list[SuiteTiming], rounds: int,
                 modes: Sequence[Mode]) -> dict[str, Any]:
    """The figures of a measured suite as plain data: rows, geomeans, the worst program
    and the targets."""
    report: dict[str, Any] = {
        "rounds": rounds,
        "modes": list(modes),
        "budget": BENCH_BUDGET.model_dump(),
        "programs": [t.to_dict() for t in timings],
    }
    for mode in modes:
        if mode == "raw":
            continue
        worst = max(timings, key=lambda t: t.ratio(mode))
        report[f"{mode}_geomean"] = statistics.geometric_mean(t.ratio(mode) for t in timings)
        report[f"{mode}_worst"] = {"name": worst.program.name, "ratio": worst.ratio(mode)}
        report[f"{mode}_above_target"] = sorted(
            t.program.name for t in timings if t.ratio(mode) > TARGET_SUITE_PROGRAM)
    if "metered" in modes:
        report["targets"] = [
            {"name": "metered geomean", "value": report["metered_geomean"],
             "limit": TARGET_SUITE_GEOMEAN,
             "met": report["metered_geomean"] <= TARGET_SUITE_GEOMEAN},
            {"name": f"worst program, metered ({report['metered_worst']['name']})",
             "value": report["metered_worst"]["ratio"], "limit": TARGET_SUITE_PROGRAM,
             "met": report["metered_worst"]["ratio"] <= TARGET_SUITE_PROGRAM},
        ]
    return report


def run_suite(rounds: int, modes: Sequence[Mode], names: Iterable[str] | None,
              progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Measure and report (see :func:`measure_suite`, :func:`suite_report`).

    Raises:
        HostError, ScriptError: as :func:`measure_suite`.
    """
    t0 = time.perf_counter()
    timings = measure_suite(rounds, modes, names, progress)
    report = suite_report(timings, rounds, modes)
    report["elapsed_s"] = time.perf_counter() - t0
    return report

