"""Each workload in the three modes: raw LuaJIT, metered sandbox, no-jit sandbox.

Compare within a group (one group per workload): ``--benchmark-group-by=group``, the default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from moonbox.bench import MODES, QUICK_SCALE, WARMUP_RUNS, WORKLOADS, Mode, Runner, Workload


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.name)
def test_workload(benchmark: Any, runners: Callable[..., Runner],
                  expected: Callable[[Workload], Any], workload: Workload, mode: Mode) -> None:
    benchmark.group = f"workload {workload.name}"
    run = runners(workload, mode)
    n = workload.count(QUICK_SCALE)
    for _ in range(WARMUP_RUNS):  # the JIT settles outside the measurement
        run(n)
    result = benchmark.pedantic(run, args=(n,), rounds=7, iterations=1)
    assert result == expected(workload)
