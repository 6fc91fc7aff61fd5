"""Fixtures of the isolation tests: sandboxes in worker processes, always closed."""

from __future__ import annotations

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
def _no_workers_left(no_workers_left_behind):
    """Every isolation test leaves no child process behind."""
