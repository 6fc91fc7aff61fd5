"""Fixtures of the isolation tests: sandboxes in worker processes, always closed."""

from __future__ import annotations

import pytest

import moonbox
from moonbox.isolation import IsolatedSandbox, _protocol


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


class _Preemptions:
    """A stand-in for ``resource.getrusage``: the involuntary context switches so far.
    (The tests put stand-ins under both of the reader's figures: the machine's own would
    make them depend on its load.)"""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, who: int) -> object:
        return type("Usage", (), {"ru_nivcsw": self.count})()


@pytest.fixture
def calm(monkeypatch) -> _Preemptions:
    """The reader's scheduler figures say the CPUs are calm, whatever the machine's load:
    a reader busy-waits whenever its window allows, until a test moves the preemptions."""
    preemptions = _Preemptions()
    monkeypatch.setattr(_protocol.resource, "getrusage", preemptions)
    monkeypatch.setattr(_protocol, "_runqueue_wait_ns", lambda path: 0)
    return preemptions
