"""Shared fixtures: sandboxes in both metering modes, the arena example, no stray workers."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import psutil
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


ARENA = Path(__file__).parents[1] / "examples" / "arena"


@pytest.fixture
def arena_example():
    """examples/arena/arena.py, imported as a module."""
    spec = importlib.util.spec_from_file_location("arena_example", ARENA / "arena.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def no_workers_left_behind():
    """The test leaves no child process behind: none running, none a zombie. (Modules that
    start workers use it for every test: ``pytestmark = pytest.mark.usefixtures(...)``.)"""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert not left, f"processes left behind: {[(p.pid, p.status()) for p in left]}"


_SCRIPTED_BOOT = '''
import os, sys, time
from moonbox.isolation._protocol import FrameReader, FrameWriter
r = FrameReader(int(sys.argv[1]))
w = FrameWriter(int(sys.argv[2]))
w.send(["ready", os.getpid()])
while True:
    try:
        req = r.read()
    except Exception:
        sys.exit(0)
    op = req[0]
    if op in ("run", "resume"):
{script}
    elif op == "load":
        w.send(["ok", 0])
    elif op != "drop_fns":
        w.send(["ok"])
'''


@pytest.fixture
def scripted_worker(monkeypatch):
    """Workers started after ``script(code)`` are a scripted, hostile process instead of
    moonbox's worker: they answer every request ok, except ``run`` and ``resume``, which run
    ``code`` (Python, with ``w`` the frame writer, ``r`` the reader, ``req`` the request)."""
    import textwrap

    from moonbox.isolation import _process

    def script(code: str) -> None:
        body = textwrap.indent(textwrap.dedent(code).strip("\n"), " " * 8)
        monkeypatch.setattr(_process, "_BOOT", _SCRIPTED_BOOT.format(script=body))

    return script
