"""Fixtures of the isolation tests: sandboxes in worker processes, always closed."""

from __future__ import annotations

import psutil
import pytest

import moonbox
from moonbox.isolation import IsolatedSandbox


@pytest.fixture
def make_isolated():
    """Factory for isolated sandboxes with the default bindings and the test-only hooks."""
    made: list[IsolatedSandbox] = []

    def make(budget: moonbox.Budget | None = None, **kwargs) -> IsolatedSandbox:
        kwargs.setdefault("host_functions", moonbox.default_bindings())
        kwargs.setdefault("_test_hooks", True)
        sb = IsolatedSandbox(budget, **kwargs)
        made.append(sb)
        return sb

    yield make
    for sb in made:
        sb.close()


@pytest.fixture(autouse=True)
def no_workers_left_behind():
    """Every test leaves no child process behind: none running, none a zombie."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert not left, f"processes left behind: {[(p.pid, p.status()) for p in left]}"
