"""Fixed costs per mode: creating a runtime, one Lua→host call, one resume from Python."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from moonbox import Sandbox
from moonbox._bench import MODES, Mode, Runner, new_runtime

CALLS = 1_000


def _create_and_close(mode: Mode) -> None:
    runtime = new_runtime(mode)
    if isinstance(runtime, Sandbox):
        runtime.close()


@pytest.mark.parametrize("mode", MODES)
def test_create_runtime(benchmark: Any, mode: Mode) -> None:
    """A raw LuaJIT runtime, or a sandbox with the default budget and bindings (and close)."""
    benchmark.group = "create a runtime"
    benchmark(_create_and_close, mode)


@pytest.mark.parametrize("call", [False, True], ids=["empty-loop", "add-loop"])
@pytest.mark.parametrize("mode", MODES)
def test_binding_call(benchmark: Any, runners: Callable[..., Runner], mode: Mode,
                      call: bool) -> None:
    """A loop of CALLS iterations, with or without a call to ``add``: the difference / CALLS
    is the cost of one call (in the sandbox: the binding dispatcher and its validation)."""
    benchmark.group = f"{CALLS} iterations, with and without add()"
    run = runners("binding_loop", mode)
    run(CALLS, call)
    assert benchmark(run, CALLS, call) == CALLS


@pytest.mark.parametrize("mode", MODES)
def test_resume(benchmark: Any, runners: Callable[..., Runner], mode: Mode) -> None:
    """One resume from Python of a handler that yields at once (budgeted in the sandbox)."""
    benchmark.group = "resume a yielding handler"
    resume = runners("resume", mode, idle=True)
    resume()
    benchmark(resume)
