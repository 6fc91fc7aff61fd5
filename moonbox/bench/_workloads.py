"""The workloads of ``moonbox bench`` and what runs each in each mode.

Each workload is a Lua file in ``workloads/`` that takes an iteration count and returns a
checksum. It runs in three modes:

- ``raw``: a plain LuaJIT runtime, JIT on, source uninstrumented (the baseline);
- ``metered``: ``Sandbox(jit=True)``, moonbox's default, source-instrumented metering;
- ``nojit``: ``Sandbox(jit=False)``, JIT off and a count hook.

The pytest-benchmark suite in ``benchmarks/`` reuses the workloads and runners defined here.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal, Protocol

from .._errors import HostError
from ..bindings import Registry, default_bindings
from ..sandbox import Budget, Sandbox
from ._baseline import raw_luajit

__all__ = [
    "BENCH_BUDGET",
    "MODES",
    "QUICK_SCALE",
    "WORKLOADS",
    "Mode",
    "Runner",
    "Workload",
    "bench_functions",
    "make_bare_runner",
    "make_idle_runner",
    "make_runner",
    "new_runtime",
    "workload_source",
]

Mode = Literal["raw", "metered", "nojit"]
MODES: tuple[Mode, ...] = ("raw", "metered", "nojit")

# Large enough never to trip: the benchmark measures metering, not budget trips.
BENCH_BUDGET = Budget(steps=10**15, wall_s=60.0, alloc_bytes=256 << 20, max_memory=256 << 20)


@dataclass(frozen=True, slots=True)
class Workload:
    """One Lua file of ``workloads/``: takes an iteration count, returns a checksum."""

    name: str
    iterations: int
    description: str

    def count(self, scale: float = 1.0) -> int:
        """The iteration count, scaled (``QUICK_SCALE`` for quick runs)."""
        return max(1, int(self.iterations * scale))


# Iterations for a full run: raw LuaJIT takes roughly 5-30 ms on each. Quick runs (and the
# pytest-benchmark suite, which repeats each measurement itself) do a quarter of that.
QUICK_SCALE = 0.25
WORKLOADS: tuple[Workload, ...] = (
    Workload("fib", 100, "calls, recursion"),
    Workload("numeric", 1_000, "float loops"),
    Workload("strings", 50_000, "format, concat, sub"),
    Workload("tables", 300_000, "insert, read, hash"),
    Workload("handler", 5_000, "event handler + add()"),
)


def workload_source(name: str) -> str:
    """The text of ``workloads/<name>.lua``."""
    return resources.files("moonbox.bench").joinpath(f"workloads/{name}.lua").read_text()


def _chunk(name: str) -> str:
    return f"@moonbox/bench/workloads/{name}.lua"


class Runner(Protocol):
    """Runs one workload in one mode; returns the checksum."""

    def __call__(self, *args: Any) -> Any: ...

    def close(self) -> None: ...


class _RawRunner:
    def __init__(self, source: str) -> None:
        self._rt = raw_luajit()
        self._fn = self._rt.compile(source)

    def __call__(self, *args: Any) -> Any:
        return self._fn(*args)

    def close(self) -> None:
        self._fn = self._rt = None


def _bare_add(a: Any, b: Any) -> Any:
    return a + b


_REGISTRY: Registry | None = None


def bench_functions() -> tuple[Any, ...]:
    """The default bindings as a mod gets them: through a registry, mode ``auto``."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = Registry(default_bindings())
    return _REGISTRY.mod("bench").host_functions


class _SandboxRunner:
    def __init__(self, source: str, chunk: str, *, jit: bool) -> None:
        self.sandbox = Sandbox(BENCH_BUDGET, jit=jit, host_functions=bench_functions())
        self._chunk = self.sandbox.load(source, chunk)

    def __call__(self, *args: Any) -> Any:
        return self.sandbox.run(self._chunk, args=args).unwrap()[0]

    def close(self) -> None:
        self.sandbox.close()


def make_runner(workload: Workload | str, mode: Mode) -> Runner:
    """A runner of the workload (or ``workloads/<name>.lua``) in the given mode.

    Raises:
        ScriptError: the workload does not compile.
    """
    name = workload if isinstance(workload, str) else workload.name
    if mode == "raw":
        return _RawRunner(workload_source(name))
    return _SandboxRunner(workload_source(name), _chunk(name), jit=mode == "metered")


def make_bare_runner(name: str) -> Runner:
    """``workloads/<name>.lua`` in raw LuaJIT where ``add`` is a bare lupa callback
    (``lambda a, b: a + b``: no validation, no dispatcher): the baseline of issue 4."""
    runner = _RawRunner(workload_source(name))
    runner._rt.globals()["add"] = _bare_add
    return runner


def new_runtime(mode: Mode) -> Any:
    """A fresh runtime: raw LuaJIT, or a sandbox with the default budget and bindings."""
    if mode == "raw":
        return raw_luajit()
    return Sandbox(host_functions=bench_functions(), jit=mode == "metered")


class _RawIdle:
    def __init__(self) -> None:
        self._rt = raw_luajit()
        self._step = self._rt.eval("coroutine.wrap")(self._rt.compile(workload_source("resume")))
        self.step = self._step

    def __call__(self, *args: Any) -> Any:
        return self._step(*args)

    def close(self) -> None:
        self._step = self._rt = self.step = None


class _SandboxIdle:
    def __init__(self, *, jit: bool) -> None:
        self.sandbox = new_runtime("metered" if jit else "nojit")
        self.run = self.sandbox.start(workload_source("resume"), _chunk("resume"))
        self.step = self.run.resume

    def __call__(self, *args: Any) -> Any:
        outcome = self.run.resume(*args)
        if outcome.status != "yielded":
            raise HostError(f"the idle handler stopped yielding: {outcome}")
        return outcome.status

    def close(self) -> None:
        self.sandbox.close()


def make_idle_runner(mode: Mode) -> Runner:
    """``resume.lua`` (yields forever) in the given mode; each call is one resume from Python.

    In the sandbox modes each resume is a budgeted :meth:`Run.resume` with the default budget.
    """
    return _RawIdle() if mode == "raw" else _SandboxIdle(jit=mode == "metered")
