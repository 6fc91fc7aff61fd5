"""The benchmark suite (``moonbox/bench/suite/``): each program in raw LuaJIT and in the
sandbox, every round in a fresh runtime.

    pytest benchmarks/test_suite_bench.py --benchmark-only

One group per program: ``raw`` (a plain LuaJIT runtime, JIT on) and ``metered`` (a sandbox
under the benchmark budget: the heap cap and the step, allocation and wall budgets in
force). pytest-benchmark's setup makes each round's runtime and compiles the program,
untimed; only the run is timed. Each metered benchmark's ``extra_info`` holds its median's
ratio to the raw median measured in this same session, and the session ends with the table
of ratios, their geomean and the worst program. ``moonbox bench --suite`` measures the same
runners with the modes interleaved round by round, which a shared machine's drift hits
less.
"""

from __future__ import annotations

from typing import Any

import pytest

from moonbox.bench import PROGRAMS, Mode, Program, fresh_runner

ROUNDS = 5


def _run(runner: Any) -> Any:
    return runner()


def _close(runner: Any) -> None:
    runner.close()


@pytest.mark.parametrize("mode", ("raw", "metered"))
@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_program(benchmark: Any, suite_medians: dict[tuple[str, Mode], float],
                 program: Program, mode: Mode) -> None:
    benchmark.group = f"suite {program.name}"
    checksum = _raw_checksum(program.name)

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (fresh_runner(program.name, mode),), {}

    result = benchmark.pedantic(_run, setup=setup, teardown=_close, rounds=ROUNDS,
                                iterations=1)
    assert result == checksum
    stats = getattr(benchmark, "stats", None)
    if stats is None:  # --benchmark-disable: nothing was timed
        return
    suite_medians[program.name, mode] = stats.stats.median
    raw = suite_medians.get((program.name, "raw"))
    if mode != "raw" and raw:
        benchmark.extra_info["ratio_to_raw"] = round(stats.stats.median / raw, 3)


_CHECKSUMS: dict[str, Any] = {}


def _raw_checksum(name: str) -> Any:
    """The program's checksum in raw LuaJIT, computed once per session."""
    if name not in _CHECKSUMS:
        runner = fresh_runner(name, "raw")
        try:
            _CHECKSUMS[name] = runner()
        finally:
            runner.close()
    return _CHECKSUMS[name]
