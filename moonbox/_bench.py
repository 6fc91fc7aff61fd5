"""``moonbox bench``: what the sandbox costs, against raw LuaJIT, measured in one run.

Each workload in ``_bench_workloads/`` runs in three modes, interleaved round robin (the
order rotates each round) so that drift of a shared machine hits every mode alike:

- ``raw``: a plain LuaJIT runtime, JIT on, source uninstrumented (the baseline);
- ``metered``: ``Sandbox(jit=True)``, moonbox's default, source-instrumented metering;
- ``nojit``: ``Sandbox(jit=False)``, JIT off and a count hook.

After a few warm-up runs, the figure per mode is the median of the rounds (the fastest round
is reported too: on a busy machine some rounds run at half speed); the ratios divide by
``raw``. Every run of every mode must return the same checksum, or the benchmark is
meaningless and fails. The fixed costs (creating a runtime, one Lua→host call, one resume
from Python) are measured the same way, per mode.

The pytest-benchmark suite in ``benchmarks/`` reuses the workloads and runners defined here.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from importlib import metadata, resources
from typing import Any, Literal, Protocol, TypeVar

from rich.console import Console
from rich.table import Table

from ._bench_isolation import TARGET_ROUND_TRIP_US, isolation_costs
from ._errors import HostError, MoonboxError
from .bindings import Registry, default_bindings
from .bindings import add as add_binding
from .isolation._protocol import compiled_wire
from .sandbox import Budget, HostCall, Sandbox

__all__ = [
    "BENCH_BUDGET",
    "MODES",
    "QUICK_SCALE",
    "WARMUP_RUNS",
    "WORKLOADS",
    "Mode",
    "Runner",
    "Workload",
    "bench_functions",
    "make_bare_runner",
    "make_idle_runner",
    "make_runner",
    "new_runtime",
    "raw_luajit",
    "run_bench",
    "workload_source",
]

K = TypeVar("K")
Mode = Literal["raw", "metered", "nojit"]
MODES: tuple[Mode, ...] = ("raw", "metered", "nojit")
MODE_HEADERS = ("raw", "metered", "no-jit")

# Large enough never to trip: the benchmark measures metering, not budget trips.
BENCH_BUDGET = Budget(steps=10**15, wall_s=60.0, alloc_bytes=256 << 20, max_memory=256 << 20)

# Runs before measuring: fib's trace tree takes three runs to settle (the first runs are
# up to twice as fast as the steady state, in every mode).
WARMUP_RUNS = 3

# Targets of issue 2.
TARGET_GEOMEAN = 1.3
TARGET_WORKLOAD = 1.8
TARGET_CREATE_US = 1000.0
TARGET_RESUME_US = 5.0
# Target of issue 4: a Lua→binding→Lua round trip against a bare lupa callback.
TARGET_BINDING_RATIO = 3.0


@dataclass(frozen=True, slots=True)
class Workload:
    """One Lua file of ``_bench_workloads/``: takes an iteration count, returns a checksum."""

    name: str
    iterations: int
    description: str

    def count(self, scale: float = 1.0) -> int:
        """The iteration count, scaled (``QUICK_SCALE`` for quick runs)."""
        return max(1, int(self.iterations * scale))


# Iterations for a full run: raw LuaJIT takes roughly 5-30 ms on each. Quick runs (and the
# pytest-benchmark suite, which repeats each measurement itself) do a quarter of that.
QUICK_SCALE = 0.25
WORKLOADS: tuple[Workload, ...] = (
    Workload("fib", 100, "calls, recursion"),
    Workload("numeric", 1_000, "float loops"),
    Workload("strings", 50_000, "format, concat, sub"),
    Workload("tables", 300_000, "insert, read, hash"),
    Workload("handler", 5_000, "event handler + add()"),
)


def workload_source(name: str) -> str:
    """The text of ``_bench_workloads/<name>.lua``."""
    return resources.files("moonbox").joinpath(f"_bench_workloads/{name}.lua").read_text()


def _chunk(name: str) -> str:
    return f"@moonbox/_bench_workloads/{name}.lua"


_RAW_CALL = HostCall(None, None, "add")  # type: ignore[arg-type]


def _raw_add(*args: Any) -> Any:
    # The same binding, validation included, called as a bare Python function: the handler's
    # ratio then measures what the sandbox adds (metering, dispatch, marshalling), not what
    # the binding itself costs.
    return add_binding(_RAW_CALL, args)[0]


def raw_luajit() -> Any:
    """A plain LuaJIT runtime with the JIT on and ``add`` as the bare binding function.

    This is the measurement baseline, NOT a sandbox: lupa's defaults, no instrumentation, no
    budget. It is the one import of lupa outside :mod:`moonbox.sandbox`, on purpose and
    lazily, so that the rest of moonbox never touches an unhardened runtime.
    """
    from lupa import luajit21

    rt = luajit21.LuaRuntime()
    rt.globals()["add"] = _raw_add
    return rt


class Runner(Protocol):
    """Runs one workload in one mode; returns the checksum."""

    def __call__(self, *args: Any) -> Any: ...

    def close(self) -> None: ...


class _RawRunner:
    def __init__(self, source: str) -> None:
        self._rt = raw_luajit()
        self._fn = self._rt.compile(source)

    def __call__(self, *args: Any) -> Any:
        return self._fn(*args)

    def close(self) -> None:
        self._fn = self._rt = None


def _bare_add(a: Any, b: Any) -> Any:
    return a + b




_REGISTRY: Registry | None = None


def bench_functions() -> tuple[Any, ...]:
    """The default bindings as a mod gets them: through a registry, mode ``auto``."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = Registry(default_bindings())
    return _REGISTRY.mod("bench").host_functions


class _SandboxRunner:
    def __init__(self, source: str, chunk: str, *, jit: bool) -> None:
        self.sandbox = Sandbox(BENCH_BUDGET, jit=jit, host_functions=bench_functions())
        self._chunk = self.sandbox.load(source, chunk)

    def __call__(self, *args: Any) -> Any:
        return self.sandbox.run(self._chunk, args=args).unwrap()[0]

    def close(self) -> None:
        self.sandbox.close()


def make_runner(workload: Workload | str, mode: Mode) -> Runner:
    """A runner of the workload (or ``_bench_workloads/<name>.lua``) in the given mode.

    Raises:
        ScriptError: the workload does not compile.
    """
    name = workload if isinstance(workload, str) else workload.name
    if mode == "raw":
        return _RawRunner(workload_source(name))
    return _SandboxRunner(workload_source(name), _chunk(name), jit=mode == "metered")


def make_bare_runner(name: str) -> Runner:
    """``_bench_workloads/<name>.lua`` in raw LuaJIT where ``add`` is a bare lupa callback
    (``lambda a, b: a + b``: no validation, no dispatcher): the baseline of issue 4."""
    runner = _RawRunner(workload_source(name))
    runner._rt.globals()["add"] = _bare_add
    return runner


def new_runtime(mode: Mode) -> Any:
    """A fresh runtime: raw LuaJIT, or a sandbox with the default budget and bindings."""
    if mode == "raw":
        return raw_luajit()
    return Sandbox(host_functions=bench_functions(), jit=mode == "metered")


class _RawIdle:
    def __init__(self) -> None:
        self._rt = raw_luajit()
        self._step = self._rt.eval("coroutine.wrap")(self._rt.compile(workload_source("resume")))
        self.step = self._step

    def __call__(self, *args: Any) -> Any:
        return self._step(*args)

    def close(self) -> None:
        self._step = self._rt = self.step = None


class _SandboxIdle:
    def __init__(self, *, jit: bool) -> None:
        self.sandbox = new_runtime("metered" if jit else "nojit")
        self.run = self.sandbox.start(workload_source("resume"), _chunk("resume"))
        self.step = self.run.resume

    def __call__(self, *args: Any) -> Any:
        outcome = self.run.resume(*args)
        if outcome.status != "yielded":
            raise HostError(f"the idle handler stopped yielding: {outcome}")
        return outcome.status

    def close(self) -> None:
        self.sandbox.close()


def make_idle_runner(mode: Mode) -> Runner:
    """``resume.lua`` (yields forever) in the given mode; each call is one resume from Python.

    In the sandbox modes each resume is a budgeted :meth:`Run.resume` with the default budget.
    """
    return _RawIdle() if mode == "raw" else _SandboxIdle(jit=mode == "metered")


# -- measuring ------------------------------------------------------------------------------


def _interleaved(samplers: dict[K, Callable[[], float]], rounds: int) -> dict[K, list[float]]:
    """Call every sampler once per round, in an order that rotates each round; the results
    of each sampler."""
    keys = list(samplers)
    samples: dict[K, list[float]] = {key: [] for key in keys}
    for r in range(rounds):
        shift = r % len(keys)
        for key in keys[shift:] + keys[:shift]:
            samples[key].append(samplers[key]())
    return samples


def _opened(stack: ExitStack, runner: Runner) -> Runner:
    stack.callback(runner.close)
    return runner


@dataclass(frozen=True, slots=True)
class _Timing:
    workload: Workload
    iterations: int
    checksum: Any
    seconds: dict[Mode, float]  # median per mode
    best: dict[Mode, float]  # minimum per mode: what a run costs when no one else runs

    def ratio(self, mode: Mode) -> float:
        return self.seconds[mode] / self.seconds["raw"]

    def best_ratio(self, mode: Mode) -> float:
        return self.best[mode] / self.best["raw"]


def _run_sampler(runner: Runner, n: int, checksum: Any, what: str) -> Callable[[], float]:
    def sample() -> float:
        t0 = time.perf_counter()
        value = runner(n)
        seconds = time.perf_counter() - t0
        if value != checksum:
            raise HostError(f"{what} returned {value!r}, not {checksum!r}")
        return seconds

    return sample


def _time_workloads(stack: ExitStack, scale: float, rounds: int) -> list[_Timing]:
    samplers: dict[tuple[str, Mode], Callable[[], float]] = {}
    checksums: dict[str, Any] = {}
    for w in WORKLOADS:
        n = w.count(scale)
        runners = {mode: _opened(stack, make_runner(w, mode)) for mode in MODES}
        # The warm-up runs also pin the checksum all modes must return.
        results: dict[Mode, Any] = {}
        for mode, run in runners.items():
            for _ in range(WARMUP_RUNS):
                results[mode] = run(n)
        if len(set(results.values())) != 1:
            raise HostError(f"workload {w.name}: the modes disagree on the checksum: {results}")
        checksums[w.name] = results["raw"]
        for mode, run in runners.items():
            samplers[w.name, mode] = _run_sampler(run, n, results["raw"],
                                                  f"workload {w.name} in mode {mode}")
    samples = _interleaved(samplers, rounds)
    return [
        _Timing(w, w.count(scale), checksums[w.name],
                {mode: statistics.median(samples[w.name, mode]) for mode in MODES},
                {mode: min(samples[w.name, mode]) for mode in MODES})
        for w in WORKLOADS
    ]


def _create_sampler(mode: Mode, batch: int) -> Callable[[], float]:
    """Seconds to create one runtime (see :func:`new_runtime`), mean of a batch."""

    def sample() -> float:
        total = 0.0
        for _ in range(batch):
            t0 = time.perf_counter()
            runtime = new_runtime(mode)
            total += time.perf_counter() - t0
            if isinstance(runtime, Sandbox):
                runtime.close()
        return total / batch

    return sample


def _call_sampler(loop: Runner, calls: int) -> Callable[[], float]:
    """Seconds of one Lua→host call of ``add``: the loop with calls minus the loop without."""

    def sample() -> float:
        t0 = time.perf_counter()
        loop(calls, True)
        t1 = time.perf_counter()
        loop(calls, False)
        return ((t1 - t0) - (time.perf_counter() - t1)) / calls

    return sample


def _resume_sampler(idle: Runner, resumes: int) -> Callable[[], float]:
    """Seconds of one resume from Python of a handler that yields at once, mean of a batch."""

    # The resume itself, as a game loop calls it: Run.resume (or the raw coroutine's step)
    # bound once, not through the runner's checking wrapper.
    step = getattr(idle, "step", idle)

    def sample() -> float:
        t0 = time.perf_counter()
        for _ in range(resumes):
            step()
        elapsed = time.perf_counter() - t0
        idle()  # the runner checks that the handler still yields
        return elapsed / resumes

    return sample


COSTS = ("create_us", "binding_call_us", "resume_us")


def _fixed_costs(stack: ExitStack, quick: bool, rounds: int) -> dict[str, dict[Mode, float]]:
    calls = 2_000 if quick else 5_000
    samplers: dict[tuple[str, Mode], Callable[[], float]] = {}
    for mode in MODES:
        loop = _opened(stack, make_runner("binding_loop", mode))
        loop(calls, True)
        idle = _opened(stack, make_idle_runner(mode))
        idle()
        samplers["create_us", mode] = _create_sampler(mode, 10)
        samplers["binding_call_us", mode] = _call_sampler(loop, calls)
        samplers["resume_us", mode] = _resume_sampler(idle, 1_000)
    bare = _opened(stack, make_bare_runner("binding_loop"))
    bare(calls, True)
    samplers["bare_callback_us", "raw"] = _call_sampler(bare, calls)
    samples = _interleaved(samplers, rounds)
    costs = {cost: {mode: statistics.median(samples[cost, mode]) * 1e6 for mode in MODES}
             for cost in COSTS}
    costs["bare_callback_us"] = {"raw": statistics.median(samples["bare_callback_us", "raw"]) * 1e6}
    return costs


TRIP_WALL_S = 0.1
TARGET_TRIP_MARGIN_MS = 50.0
# Loops that spin until the time budget trips: the overshoot past wall_s is the margin.
TRIP_LOOPS = {
    "empty loop": "while true do end",
    "allocating loop": "local t = {} while true do t[#t % 64 + 1] = {} end",
    "call-heavy loop": "local function f(x) return x + 1 end local n = 0 while true do n = f(n) end",
}


def _trip_margins(quick: bool) -> dict[str, dict[str, float]]:
    """Milliseconds past ``wall_s`` at which a time trip lands, per loop and mode."""
    repeats = 3 if quick else 8
    budget = Budget(steps=10**15, wall_s=TRIP_WALL_S, max_memory=64 << 20)
    margins: dict[str, dict[str, float]] = {}
    for mode in ("metered", "nojit"):
        worst: list[float] = []
        for name, src in TRIP_LOOPS.items():
            for _ in range(repeats):
                with Sandbox(budget, jit=mode == "metered") as sb:
                    t0 = time.perf_counter()
                    outcome = sb.run(src, "=trip")
                    elapsed = time.perf_counter() - t0
                if outcome.budget != "time":
                    raise HostError(f"{name} ({mode}) ended with {outcome.status}, not a time trip")
                worst.append((elapsed - TRIP_WALL_S) * 1e3)
        margins[mode] = {"median_ms": statistics.median(worst), "max_ms": max(worst)}
    return margins


@dataclass(frozen=True, slots=True)
class _Target:
    name: str
    value: float
    limit: float
    unit: str

    @property
    def met(self) -> bool:
        return self.value <= self.limit


def _measure(quick: bool) -> dict[str, Any]:
    scale, rounds = (QUICK_SCALE, 11) if quick else (1.0, 25)
    t_start = time.perf_counter()
    gc.collect()
    with ExitStack() as stack:
        timings = _time_workloads(stack, scale, rounds)
    gc.collect()
    with ExitStack() as stack:
        costs = _fixed_costs(stack, quick, rounds)
    margins = _trip_margins(quick)
    gc.collect()
    isolation = isolation_costs(rounds, 100 if quick else 300)
    geomean = {mode: statistics.geometric_mean(t.ratio(mode) for t in timings)
               for mode in ("metered", "nojit")}
    best_geomean = statistics.geometric_mean(t.best_ratio("metered") for t in timings)
    worst = max(timings, key=lambda t: t.ratio("metered"))
    targets = [
        _Target("metered geomean", geomean["metered"], TARGET_GEOMEAN, "x"),
        _Target(f"worst workload, metered ({worst.workload.name})", worst.ratio("metered"),
                TARGET_WORKLOAD, "x"),
        _Target("sandbox creation", costs["create_us"]["metered"], TARGET_CREATE_US, "µs"),
        _Target("one budgeted resume", costs["resume_us"]["metered"], TARGET_RESUME_US, "µs"),
        _Target("add() round trip / bare lupa callback",
                costs["binding_call_us"]["metered"] / costs["bare_callback_us"]["raw"],
                TARGET_BINDING_RATIO, "x"),
        _Target("time trip past wall_s (worst, metered)", margins["metered"]["max_ms"],
                TARGET_TRIP_MARGIN_MS, "ms"),
        *(_Target(f"process isolation per round trip ({name})",
                  isolation[name]["per_round_trip_us"], TARGET_ROUND_TRIP_US, "µs")
          for name in ("trivial", "10-world-commands")),
    ]
    return {
        "quick": quick,
        "rounds": rounds,
        "environment": _environment(),
        "workloads": [
            {
                "name": t.workload.name,
                "description": t.workload.description,
                "iterations": t.iterations,
                "checksum": t.checksum,
                **{f"{mode}_ms": t.seconds[mode] * 1e3 for mode in MODES},
                **{f"{mode}_min_ms": t.best[mode] * 1e3 for mode in MODES},
                "metered_ratio": t.ratio("metered"),
                "nojit_ratio": t.ratio("nojit"),
                "metered_ratio_min": t.best_ratio("metered"),
            }
            for t in timings
        ],
        "geomean": {"metered_ratio": geomean["metered"], "nojit_ratio": geomean["nojit"],
                    "metered_ratio_min": best_geomean},
        "costs": costs,
        "trip_margins": margins,
        "isolation": isolation,
        "targets": [
            {"name": t.name, "value": t.value, "limit": t.limit, "unit": t.unit, "met": t.met}
            for t in targets
        ],
        "elapsed_s": time.perf_counter() - t_start,
    }


def _environment() -> dict[str, Any]:
    rt = raw_luajit()
    return {
        "python": platform.python_version(),
        "lupa": metadata.version("lupa"),
        "luajit": rt.eval("jit.version"),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        # How isolated sandboxes wait for and read each other's frames (see
        # moonbox/isolation/_wire.c): "python" where the compiled module was not built.
        "isolation_wire": "compiled" if compiled_wire() else "python",
    }


# -- reporting ------------------------------------------------------------------------------


def _verdict(met: bool) -> str:
    return "[green]PASS[/]" if met else "[red]MISS[/]"


def _render(report: dict[str, Any], console: Console) -> None:
    env = report["environment"]
    console.print(
        f"[bold]moonbox bench[/]{' --quick' if report['quick'] else ''}: "
        f"median of {report['rounds']} interleaved rounds, {env['luajit']}, lupa {env['lupa']}, "
        f"Python {env['python']}, {env['cpus']} CPUs, {report['elapsed_s']:.0f} s"
    )
    table = Table(title="Workloads: ms per run, and ratio to raw LuaJIT (JIT on)")
    for header in ("workload", *MODE_HEADERS, "metered/raw", "no-jit/raw",
                   f"≤{TARGET_WORKLOAD}x"):
        table.add_column(header, justify="left" if header == "workload" else "right",
                         no_wrap=True)
    for w in report["workloads"]:
        table.add_row(
            w["name"],
            f"{w['raw_ms']:.1f}", f"{w['metered_ms']:.1f}", f"{w['nojit_ms']:.1f}",
            f"{w['metered_ratio']:.2f}x", f"{w['nojit_ratio']:.2f}x",
            _verdict(w["metered_ratio"] <= TARGET_WORKLOAD),
        )
    geo = report["geomean"]
    table.add_section()
    table.add_row("geomean", "", "", "", f"{geo['metered_ratio']:.2f}x",
                  f"{geo['nojit_ratio']:.2f}x", "")
    table.caption = ("geomean: all workloads. raw LuaJIT calls the same add binding, "
                     "validation included, as a bare Python function")
    console.print(table)
    best = ", ".join(f"{w['name']} {w['metered_ratio_min']:.2f}x" for w in report["workloads"])
    console.print(f"[dim]metered/raw from the fastest round of each (less sensitive to other "
                  f"load): {best}; geomean {geo['metered_ratio_min']:.2f}x[/]")

    costs = report["costs"]
    fixed = Table(title="Fixed costs, µs (metered and no-jit: moonbox's sandbox)")
    for header in ("what", *MODE_HEADERS):
        fixed.add_column(header, justify="left" if header == "what" else "right", no_wrap=True)
    labels = ("create a runtime", "call add() from Lua", "resume a yielding handler")
    for key, label in zip(COSTS, labels, strict=True):
        fixed.add_row(label, *(f"{costs[key][m]:.2f}" for m in MODES))
    fixed.caption = (f"a bare lupa callback (no validation): "
                     f"{costs['bare_callback_us']['raw']:.2f} µs per call")
    console.print(fixed)
    trips = ", ".join(f"{mode} median {m['median_ms']:.1f} ms, worst {m['max_ms']:.1f} ms"
                      for mode, m in report["trip_margins"].items())
    console.print(f"Time trips past wall_s={TRIP_WALL_S:g} s ({', '.join(TRIP_LOOPS)}): {trips}")

    iso = Table(title="Process isolation: µs per call (in a worker: no state snapshot)")
    for header in ("handler", "in process", "in a worker", "round trips", "per round trip"):
        iso.add_column(header, justify="left" if header == "handler" else "right", no_wrap=True)
    for name, m in report["isolation"].items():
        iso.add_row(name, f"{m['in_process_us']:.1f}", f"{m['isolated_us']:.1f}",
                    str(m["round_trips"]), f"{m['per_round_trip_us']:.1f}")
    wire = ("compiled" if env["isolation_wire"] == "compiled"
            else "in Python (the compiled module is not built here)")
    contended = ", ".join(f"{name} {m['contended_samples']}/{m['samples']}"
                          for name, m in report["isolation"].items() if "samples" in m)
    iso.caption = (f"each side's wait and reads: {wire}; samples that found the CPUs "
                   f"contended, when both sides sleep instead of busy-waiting and a round trip "
                   f"costs several times more: {contended}; raw floor: a raw LuaJIT function "
                   "in a worker process, plain frames over pipes, nothing checked")
    console.print(iso)

    targets = Table(title="Targets")
    for header in ("target", "measured", "limit", ""):
        targets.add_column(header, justify="left" if header == "target" else "right")
    for t in report["targets"]:
        fmt = "{:.2f}" if t["unit"] == "x" else "{:.1f}"  # µs and ms: one decimal
        targets.add_row(t["name"], fmt.format(t["value"]) + " " + t["unit"],
                        f"≤ {t['limit']:g} {t['unit']}", _verdict(t["met"]))
    console.print(targets)
    console.print("[dim]Shared machines are noisy: a MISS is reported, never an error.[/]")


def run_bench(console: Console, *, quick: bool, as_json: bool) -> int:
    """Measure, then print a table (or one JSON object). Returns the exit status.

    0 whatever the targets say (timings on shared machines are noisy); 1 if the benchmark
    itself failed (a workload errored or the modes disagreed on a checksum).
    """
    try:
        if as_json:
            report = _measure(quick)
        else:
            with console.status("measuring: raw LuaJIT, metered and no-jit, interleaved; "
                                "then process isolation..."):
                report = _measure(quick)
    except MoonboxError as exc:
        Console(stderr=True, highlight=False).print(f"[bold red]bench failed:[/] {exc}")
        return 1
    if as_json:
        console.out(json.dumps(report, ensure_ascii=False), highlight=False)
    else:
        _render(report, console)
    return 0
