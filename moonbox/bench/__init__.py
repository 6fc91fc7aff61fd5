"""``moonbox bench``: what the sandbox costs, against raw LuaJIT, measured in one run.

Each workload in ``workloads/`` runs in three modes, interleaved round robin (the order
rotates each round) so that drift of a shared machine hits every mode alike:

- ``raw``: a plain LuaJIT runtime, JIT on, source uninstrumented (the baseline);
- ``metered``: ``Sandbox(jit=True)``, moonbox's default, source-instrumented metering;
- ``nojit``: ``Sandbox(jit=False)``, JIT off and a count hook.

After a few warm-up runs, the figure per mode is the median of the rounds (the fastest round
is reported too: on a busy machine some rounds run at half speed); the ratios divide by
``raw``. Every run of every mode must return the same checksum, or the benchmark is
meaningless and fails. The fixed costs (creating a runtime, one Lua→host call, one resume
from Python) are measured the same way, per mode, and so is what process isolation costs
per call round trip.

``moonbox bench --suite`` times the benchmark programs of ``suite/`` instead (see
``_suite``): each sample in a fresh runtime, raw LuaJIT and the sandbox interleaved.
``moonbox bench --engine`` times the engine's budgeted handler calls, 1,000 mods of them,
against raw LuaJIT's floor (see ``_engine``).

The parts, each importing only those listed before it:

- ``_baseline``: the raw LuaJIT runtime the ratios divide by, and the interleaving;
- ``_workloads``: the workloads and their runners, per mode;
- ``_isolation``: the handlers, sandboxes and raw floor of process isolation's cost;
- ``_measure``: the samplers, the measurement as a whole and its targets;
- ``_suite``: the benchmark programs, their runners in fresh runtimes, their measurement;
- ``_engine``: the engine's handler calls against their floor (``moonbox bench --engine``);
- ``_report``: the tables (or JSON) ``moonbox bench`` prints.

The pytest-benchmark suite in ``benchmarks/`` reuses the workloads, programs, runners and
isolation handlers re-exported here.
"""

from __future__ import annotations

from ._baseline import raw_luajit
from ._isolation import (
    EXPECTED,
    HANDLERS,
    ISOLATION_MODES,
    ROUND_TRIPS,
    TARGET_ROUND_TRIP_US,
    IsolationBench,
    RawPipeFloor,
    isolation_costs,
    raw_in_process,
)
from ._measure import WARMUP_RUNS
from ._report import run_bench, run_engine_bench, run_suite_bench
from ._suite import (
    PROGRAMS,
    QUICK_SUITE_ROUNDS,
    SUITE_ROUNDS,
    TARGET_SUITE_GEOMEAN,
    TARGET_SUITE_PROGRAM,
    Program,
    SuiteTiming,
    fresh_runner,
    measure_suite,
    program_source,
    suite_report,
)
from ._workloads import (
    BENCH_BUDGET,
    MODES,
    QUICK_SCALE,
    WORKLOADS,
    Mode,
    Runner,
    Workload,
    bench_functions,
    make_bare_runner,
    make_idle_runner,
    make_runner,
    new_runtime,
    workload_source,
)

__all__ = [
    "BENCH_BUDGET",
    "EXPECTED",
    "HANDLERS",
    "ISOLATION_MODES",
    "IsolationBench",
    "MODES",
    "Mode",
    "PROGRAMS",
    "Program",
    "QUICK_SCALE",
    "QUICK_SUITE_ROUNDS",
    "ROUND_TRIPS",
    "RawPipeFloor",
    "Runner",
    "SUITE_ROUNDS",
    "SuiteTiming",
    "TARGET_ROUND_TRIP_US",
    "TARGET_SUITE_GEOMEAN",
    "TARGET_SUITE_PROGRAM",
    "WARMUP_RUNS",
    "WORKLOADS",
    "Workload",
    "bench_functions",
    "fresh_runner",
    "isolation_costs",
    "make_bare_runner",
    "make_idle_runner",
    "make_runner",
    "measure_suite",
    "new_runtime",
    "program_source",
    "raw_in_process",
    "raw_luajit",
    "run_bench",
    "run_engine_bench",
    "run_suite_bench",
    "suite_report",
    "workload_source",
]
