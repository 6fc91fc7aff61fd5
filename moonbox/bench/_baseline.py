"""What every figure of ``moonbox bench`` is measured against, and how: a raw LuaJIT
runtime (the floor the ratios divide by), and samplers interleaved round robin so that
drift of a shared machine hits every mode alike.

The workloads' raw mode and the process-isolation floor both stand on these; this module
imports nothing else of the benchmark.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..bindings import add as add_binding
from ..sandbox import HostCall

__all__ = ["interleaved", "raw_luajit"]

K = TypeVar("K")

_RAW_CALL = HostCall(None, None, "add")  # type: ignore[arg-type]


def _raw_add(*args: Any) -> Any:
    # The same binding, validation included, called as a bare Python function: the handler's
    # ratio then measures what the sandbox adds (metering, dispatch, marshalling), not what
    # the binding itself costs.
    return add_binding(_RAW_CALL, args)[0]


def raw_luajit() -> Any:
    """A plain LuaJIT runtime with the JIT on and ``add`` as the bare binding function.

    This is the measurement baseline, NOT a sandbox: lupa's defaults, no instrumentation, no
    budget. It is the one import of lupa outside :mod:`moonbox.sandbox`, on purpose and
    lazily, so that the rest of moonbox never touches an unhardened runtime.
    """
    from lupa import luajit21

    rt = luajit21.LuaRuntime()
    rt.globals()["add"] = _raw_add
    return rt


def interleaved(samplers: dict[K, Callable[[], float]], rounds: int) -> dict[K, list[float]]:
    """Call every sampler once per round, in an order that rotates each round; the results
    of each sampler."""
    keys = list(samplers)
    samples: dict[K, list[float]] = {key: [] for key in keys}
    for r in range(rounds):
        shift = r % len(keys)
        for key in keys[shift:] + keys[:shift]:
            samples[key].append(samplers[key]())
    return samples
