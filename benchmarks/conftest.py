"""Fixtures of the pytest-benchmark suite (run: ``pytest benchmarks/ --benchmark-only``).

The suite is not part of the unit tests (``testpaths`` is ``tests/``). It measures the same
workloads and modes as ``moonbox bench``, with the runners of :mod:`moonbox.bench`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from moonbox.bench import QUICK_SCALE, Mode, Runner, Workload, make_idle_runner, make_runner


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
