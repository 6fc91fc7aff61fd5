"""Process isolation: the cost of one call round trip against the in-process sandbox.

    pytest benchmarks/test_isolation_bench.py --benchmark-only
    python benchmarks/test_isolation_bench.py [SECONDS]     # a plain table of medians

Three handlers: a trivial one (``return 1``), one issuing 10 binding calls (``add``) and one
issuing 10 world commands (``coreai_world_set_color``, validated and queued by the host's
world), each run as a loaded chunk of a sandbox; and, through the engine, a mod's ``tick``
handler, trivial or issuing the same 10 world commands, one tick at a time.

In a worker every call is one round trip, and so is every binding call it makes: the
overhead per round trip is (isolated - in process) / (1 + binding calls). Target: at most
30 µs. The handlers, the sandboxes that run them and the raw floor live in
``moonbox.bench``, which ``moonbox bench`` measures the target with.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest

from moonbox import Budget
from moonbox.bench import (
    EXPECTED,
    HANDLERS,
    ISOLATION_MODES,
    ROUND_TRIPS,
    IsolationBench,
    RawPipeFloor,
    raw_in_process,
)
from moonbox.engine import Game
from moonbox.isolation import WorkerPool

MOD_HANDLERS = {
    "trivial": 'on("tick", function(t) end)',
    "10-world-commands": """on("tick", function(t)
  for i = 1, 10 do coreai_world_set_color("lamp", i / 10, 0, 0) end
end)""",
}
BUDGET = Budget(steps=200_000, wall_s=5.0)  # loose: the machine may be shared


def _game(isolation: str, handler: str) -> Game:
    game = Game(seed=1, budget=BUDGET, isolation=isolation)  # type: ignore[arg-type]
    game.world.submit("spawn", {"prefab": "cube", "name": "lamp"}, "bench")
    game.world.apply()
    game.load_mod("bench", MOD_HANDLERS[handler])
    game.tick()  # the first call starts the dispatcher
    return game


@pytest.fixture(params=ISOLATION_MODES)
def bench(request: pytest.FixtureRequest) -> Iterator[IsolationBench]:
    b = IsolationBench(request.param)
    yield b
    b.close()


@pytest.mark.parametrize("handler", sorted(HANDLERS))
def test_handler_call(benchmark: Any, bench: IsolationBench, handler: str) -> None:
    """One call of a loaded handler chunk, to its end."""
    benchmark.group = f"one call of the {handler} handler"
    call = bench.handler(handler)
    assert call().values == (EXPECTED[handler],)
    outcome = benchmark(call)
    assert outcome.values == (EXPECTED[handler],)


@pytest.mark.parametrize("isolation", ["none", "process"])
@pytest.mark.parametrize("handler", sorted(MOD_HANDLERS))
def test_engine_tick(benchmark: Any, isolation: str, handler: str) -> None:
    """One tick of a game with one mod: one handler call (and the world's apply)."""
    benchmark.group = f"one tick, one mod, {handler} handler"
    game = _game(isolation, handler)
    try:
        report = benchmark(game.tick)
        assert report.calls == 1 and not report.failures
    finally:
        game.close()


def test_raw_pipe_floor(benchmark: Any) -> None:
    """One round trip to a raw worker: the floor under any process isolation here."""
    benchmark.group = "one call of the trivial handler"
    floor = RawPipeFloor()
    try:
        assert benchmark(floor.call) == 1
    finally:
        floor.close()


@contextmanager
def _crashed_game(spare_workers: int) -> Iterator[Game]:
    """A game whose mod ``bad`` has just crashed its worker (SIGSEGV), the other mod on
    the other worker: its next tick is the one that waits for a fresh worker."""
    with WorkerPool(2, spare_workers=spare_workers, _test_hooks=True) as pool, \
            Game(seed=1, budget=BUDGET, isolation="process", pool=pool) as game:
        game.load_mod("good", 'on("tick", function(t) end)')
        game.load_mod("bad", 'on("tick", function(t) if t == 3 then test_segfault() end end)')
        time.sleep(1.5)  # a game that has run for a moment: the spare has booted
        for _ in range(3):
            game.tick()
        yield game


def _tick_after_crash(game: Game) -> None:
    report = game.tick()
    assert not report.failures and report.calls == 2


def tick_after_crash_ms(spare_workers: int) -> float:
    """The wall time of the tick after a crash: how long the game stalls for the fresh
    worker."""
    with _crashed_game(spare_workers) as game:
        t0 = time.perf_counter()
        _tick_after_crash(game)
        return (time.perf_counter() - t0) * 1e3


@pytest.mark.parametrize("spare_workers", [0, 1])
def test_tick_after_a_crash(benchmark: Any, spare_workers: int) -> None:
    """The tick after a worker crash (only that tick is timed): with a spare, the fresh
    worker is already booted."""
    benchmark.group = "the tick after a crash"
    with ExitStack() as stack:

        def setup() -> tuple[tuple[Game], dict[str, Any]]:
            return (stack.enter_context(_crashed_game(spare_workers)),), {}

        benchmark.pedantic(_tick_after_crash, setup=setup, rounds=2)


# A game that ticks at 60 Hz calls each mod once per tick: between calls, the worker has
# gone to sleep (it busy-waits for the next request for a window only) and so have the
# caches, in process too.
IDLE_S = 1 / 60


@pytest.mark.parametrize("mode", ["in-process", "isolated-no-state"])
def test_call_after_idle(benchmark: Any, mode: str) -> None:
    """One call of the trivial handler after 1/60 s of nothing (only the call is timed)."""
    benchmark.group = "one trivial call after 1/60 s idle"
    b = IsolationBench(mode)
    try:
        call = b.handler("trivial")
        benchmark.pedantic(call, setup=lambda: time.sleep(IDLE_S), rounds=30)
    finally:
        b.close()


def after_idle_us(mode: str, calls: int = 100) -> float:
    """The median of single trivial calls, each after :data:`IDLE_S` of nothing."""
    b = IsolationBench(mode)
    try:
        call = b.handler("trivial")
        for _ in range(50):
            call()
        samples = []
        for _ in range(calls):
            time.sleep(IDLE_S)
            t0 = time.perf_counter()
            call()
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples) * 1e6
    finally:
        b.close()


def _median_us(fn: Callable[[], Any], seconds: float) -> float:
    for _ in range(200):
        fn()
    samples = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        for _ in range(20):
            fn()
        samples.append((time.perf_counter() - t0) / 20)
    return statistics.median(samples) * 1e6


def report(seconds: float = 2.0) -> None:
    """Print medians and the overhead per round trip, each mode measured in this run."""
    print(f"{'handler':<24}{'in process':>12}{'isolated':>12}{'no state':>12}"
          f"{'per round trip':>16}")
    for name in HANDLERS:
        medians = {}
        for mode in ISOLATION_MODES:
            b = IsolationBench(mode)
            try:
                medians[mode] = _median_us(b.handler(name), seconds)
            finally:
                b.close()
        overhead = (medians["isolated-no-state"] - medians["in-process"]) / ROUND_TRIPS[name]
        print(f"{name:<24}{medians['in-process']:>10.1f}us{medians['isolated']:>10.1f}us"
              f"{medians['isolated-no-state']:>10.1f}us{overhead:>14.1f}us")
    for name in MOD_HANDLERS:
        ticks = {}
        for isolation in ("none", "process"):
            game = _game(isolation, name)
            try:
                ticks[isolation] = _median_us(game.tick, seconds)
            finally:
                game.close()
        overhead = (ticks["process"] - ticks["none"]) / ROUND_TRIPS[name]
        print(f"{'engine tick, ' + name:<24}{ticks['none']:>10.1f}us{ticks['process']:>10.1f}us"
              f"{'':>12}{overhead:>14.1f}us")
    floor = RawPipeFloor()
    try:
        isolated = _median_us(floor.call, seconds)
    finally:
        floor.close()
    raw = _median_us(raw_in_process(), seconds)
    print(f"{'raw floor (no sandbox)':<24}{raw:>10.1f}us{isolated:>10.1f}us{'':>12}"
          f"{isolated - raw:>14.1f}us")
    idle = {mode: after_idle_us(mode) for mode in ("in-process", "isolated-no-state")}
    print(f"{'trivial, after 1/60 s idle':<24}{idle['in-process']:>10.1f}us{'':>12}"
          f"{idle['isolated-no-state']:>10.1f}us"
          f"{idle['isolated-no-state'] - idle['in-process']:>14.1f}us")
    print(f"the tick after a crash: {tick_after_crash_ms(1):.0f} ms with a spare worker, "
          f"{tick_after_crash_ms(0):.0f} ms without")


if __name__ == "__main__":
    report(float(sys.argv[1]) if len(sys.argv) > 1 else 2.0)
