"""Process isolation: the cost of one call round trip against the in-process sandbox.

    pytest benchmarks/test_isolation_bench.py --benchmark-only
    python benchmarks/test_isolation_bench.py [SECONDS]     # a plain table of medians

Three handlers: a trivial one (``return 1``), one issuing 10 binding calls (``add``) and one
issuing 10 world commands (``coreai_world_set_color``, validated and queued by the host's
world), each run as a loaded chunk of a sandbox; and, through the engine, a mod's ``tick``
handler, trivial or issuing the same 10 world commands, one tick at a time.

In a worker every call is one round trip, and so is every binding call it makes: the
overhead per round trip is (isolated - in process) / (1 + binding calls). Target: at most
30 µs.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import moonbox
from moonbox import Budget, Registry
from moonbox.engine import Game
from moonbox.isolation import IsolatedSandbox
from moonbox.world import World, world_bindings

HANDLERS = {
    "trivial": "return 1",
    "10-bindings": "local s = 0 for i = 1, 10 do s = add(s, i) end return s",
    "10-world-commands": ("for i = 1, 10 do coreai_world_set_color('lamp', i / 10, 0, 0) end "
                          "return 10"),
}
EXPECTED = {"trivial": 1, "10-bindings": 55, "10-world-commands": 10}
ROUND_TRIPS = {"trivial": 1, "10-bindings": 11, "10-world-commands": 11}
MODES = ("in-process", "isolated", "isolated-no-state")

MOD_HANDLERS = {
    "trivial": 'on("tick", function(t) end)',
    "10-world-commands": """on("tick", function(t)
  for i = 1, 10 do coreai_world_set_color("lamp", i / 10, 0, 0) end
end)""",
}
BUDGET = Budget(steps=200_000, wall_s=5.0)  # loose: the machine may be shared


class _Bench:
    """A sandbox with the default bindings and the world bindings over a world of its own
    (one entity, ``lamp``, owned by the mod); ``call`` runs a loaded handler once and drops
    the commands it queued."""

    def __init__(self, mode: str) -> None:
        self.world = World()
        self.world.submit("spawn", {"prefab": "cube", "name": "lamp"}, "bench")
        self.world.apply()
        self.registry = Registry([*moonbox.default_bindings(), *world_bindings(self.world)])
        self.api = self.registry.mod("bench")
        self.sandbox: Any
        if mode == "in-process":
            self.sandbox = self.api.sandbox()
        else:
            state = None if mode == "isolated-no-state" else "state"
            self.sandbox = IsolatedSandbox(host_functions=self.api.host_functions,
                                           state_global=state)

    def handler(self, name: str) -> Callable[[], Any]:
        chunk = self.sandbox.load(HANDLERS[name], f"=({name})")
        run, discard = self.sandbox.run, self.world.discard

        def call() -> Any:
            outcome = run(chunk)
            discard("bench", 0)
            return outcome

        return call

    def close(self) -> None:
        self.sandbox.close()
        self.api.close()
        self.registry.close()


def _game(isolation: str, handler: str) -> Game:
    game = Game(seed=1, budget=BUDGET, isolation=isolation)  # type: ignore[arg-type]
    game.world.submit("spawn", {"prefab": "cube", "name": "lamp"}, "bench")
    game.world.apply()
    game.load_mod("bench", MOD_HANDLERS[handler])
    game.tick()  # the first call starts the dispatcher
    return game


@pytest.fixture(params=MODES)
def bench(request: pytest.FixtureRequest) -> Iterator[_Bench]:
    b = _Bench(request.param)
    yield b
    b.close()


@pytest.mark.parametrize("handler", sorted(HANDLERS))
def test_handler_call(benchmark: Any, bench: _Bench, handler: str) -> None:
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
        for mode in MODES:
            b = _Bench(mode)
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


if __name__ == "__main__":
    report(float(sys.argv[1]) if len(sys.argv) > 1 else 2.0)
