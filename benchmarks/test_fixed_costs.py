"""Fixed costs per mode: creating a runtime, one Lua→host call, one resume from Python."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from moonbox import Sandbox
from moonbox.bench import MODES, Mode, Runner, make_bare_runner, new_runtime

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


@pytest.mark.parametrize("call", [False, True], ids=["empty-loop", "add-loop"])
def test_bare_callback(benchmark: Any, call: bool) -> None:
    """The same loops in raw LuaJIT where ``add`` is a bare lupa callback (no validation):
    the baseline of the binding round trip (target: the metered add-loop minus the
    empty loop, per call, at most 3x this one's)."""
    benchmark.group = f"{CALLS} iterations, with and without add()"
    run = make_bare_runner("binding_loop")
    try:
        run(CALLS, call)
        assert benchmark(run, CALLS, call) == CALLS
    finally:
        run.close()


@pytest.mark.parametrize("mode", MODES)
def test_resume(benchmark: Any, runners: Callable[..., Runner], mode: Mode) -> None:
    """One resume from Python of a handler that yields at once (budgeted in the sandbox)."""
    benchmark.group = "resume a yielding handler"
    resume = runners("resume", mode, idle=True)
    resume()
    benchmark(resume)
