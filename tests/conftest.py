"""Shared fixtures: sandboxes in both metering modes."""

from __future__ import annotations

import pytest

import moonbox
from moonbox import Budget, Sandbox


@pytest.fixture(params=[True, False], ids=["jit", "hook"])
def jit(request: pytest.FixtureRequest) -> bool:
    """Both metering modes: instrumented with the JIT on, and JIT off with a count hook."""
    return request.param


@pytest.fixture
def make_sandbox(jit: bool):
    """Factory for sandboxes with the default bindings, closed at the end of the test."""
    made: list[Sandbox] = []

    def make(budget: Budget | None = None, **kwargs) -> Sandbox:
        kwargs.setdefault("host_functions", moonbox.default_bindings())
        kwargs.setdefault("jit", jit)
        sb = Sandbox(budget, **kwargs)
        made.append(sb)
        return sb

    yield make
    for sb in made:
        sb.close()
