"""Fixtures of the pytest-benchmark suite (run: ``pytest benchmarks/ --benchmark-only``).

The suite is not part of the unit tests (``testpaths`` is ``tests/``). It measures the same
workloads and modes as ``moonbox bench``, with the runners of :mod:`moonbox.bench`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from moonbox.bench import (
    QUICK_SCALE,
    TARGET_SUITE_GEOMEAN,
    TARGET_SUITE_PROGRAM,
    Mode,
    Runner,
    Workload,
    make_idle_runner,
    make_runner,
)


@pytest.fixture
def runners() -> Iterator[Callable[..., Runner]]:
    """A factory of runners (``make_runner`` or ``make_idle_runner``), closed after the test."""
    made: list[Runner] = []

    def make(workload: Workload | str, mode: Mode, *, idle: bool = False) -> Runner:
        runner = make_idle_runner(mode) if idle else make_runner(workload, mode)
        made.append(runner)
        return runner

    yield make
    for runner in made:
        runner.close()


@pytest.fixture(scope="session")
def expected() -> Callable[[Workload], Any]:
    """The checksum of a workload at ``count(QUICK_SCALE)``, from raw LuaJIT, computed once."""
    cache: dict[str, Any] = {}

    def checksum(workload: Workload) -> Any:
        if workload.name not in cache:
            runner = make_runner(workload, "raw")
            try:
                cache[workload.name] = runner(workload.count(QUICK_SCALE))
            finally:
                runner.close()
        return cache[workload.name]

    return checksum


# Medians (seconds) of the suite's benchmarks in this session, by (program, mode): the
# metered ones' ratios to raw are reported at the end (see test_suite_bench.py).
_SUITE_MEDIANS: dict[tuple[str, Mode], float] = {}


@pytest.fixture(scope="session")
def suite_medians() -> dict[tuple[str, Mode], float]:
    return _SUITE_MEDIANS


def pytest_terminal_summary(terminalreporter: Any) -> None:
    ratios = {name: median / _SUITE_MEDIANS[name, "raw"]
              for (name, mode), median in sorted(_SUITE_MEDIANS.items())
              if mode == "metered" and (name, "raw") in _SUITE_MEDIANS}
    if not ratios:
        return
    write = terminalreporter.write_line
    terminalreporter.section("benchmark suite: metered / raw LuaJIT (medians, this session)")
    for name, ratio in ratios.items():
        mark = "" if ratio <= TARGET_SUITE_PROGRAM else f"  (above {TARGET_SUITE_PROGRAM:g}x)"
        write(f"{name:<20} {_SUITE_MEDIANS[name, 'raw'] * 1e3:8.1f} ms "
              f"{_SUITE_MEDIANS[name, 'metered'] * 1e3:8.1f} ms {ratio:6.2f}x{mark}")
    worst = max(ratios, key=ratios.__getitem__)
    write(f"geomean {statistics.geometric_mean(ratios.values()):.2f}x "
          f"(target {TARGET_SUITE_GEOMEAN:g}x); worst {worst} {ratios[worst]:.2f}x "
          f"(target {TARGET_SUITE_PROGRAM:g}x)")
