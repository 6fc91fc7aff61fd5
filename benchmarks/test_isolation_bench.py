"""Process isolation: the cost of one call round trip against the in-process sandbox.

Two handlers: a trivial one (``return 1``) and one issuing 10 binding calls (``add``), each
run as a loaded chunk. In a worker, every binding call is one more round trip to the host.
Per-call overhead = isolated time - in-process time (target: at most 30 µs per round trip).
Run: ``pytest benchmarks/test_isolation_bench.py --benchmark-only``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import moonbox
from moonbox import Sandbox
from moonbox.isolation import IsolatedSandbox

HANDLERS = {
    "trivial": "return 1",
    "10-bindings": "local s = 0 for i = 1, 10 do s = add(s, i) end return s",
}
EXPECTED = {"trivial": 1, "10-bindings": 55}


@pytest.fixture(params=["in-process", "isolated", "isolated-no-state"])
def sandbox(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "in-process":
        sb: Any = Sandbox(host_functions=moonbox.default_bindings())
    else:
        state = None if request.param == "isolated-no-state" else "state"
        sb = IsolatedSandbox(host_functions=moonbox.default_bindings(), state_global=state)
    sb.mode = request.param
    yield sb
    sb.close()


@pytest.mark.parametrize("handler", sorted(HANDLERS))
def test_handler_call(benchmark: Any, sandbox: Any, handler: str) -> None:
    """One call of a loaded handler chunk, to its end."""
    benchmark.group = f"one call of the {handler} handler"
    chunk = sandbox.load(HANDLERS[handler], f"=({handler})")
    assert sandbox.run(chunk).values == (EXPECTED[handler],)
    outcome = benchmark(sandbox.run, chunk)
    assert outcome.values == (EXPECTED[handler],)
