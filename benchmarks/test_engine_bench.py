"""The engine: budgeted handler calls per second, and the cost of a tick with no mods.

    pytest benchmarks/test_engine_bench.py --benchmark-only
    python benchmarks/test_engine_bench.py [MODS] [TICKS] [WARM] # a plain report, CPU time

Each mod handles ``tick`` with a small handler; the variants separate what a call costs:
``empty`` (dispatch only), ``read`` (one ``coreai_world_pos``), ``full`` (that read and one
``coreai_world_change``: the issue's workload). One tick of N mods is N budgeted calls,
then the world applies the N commands.

Figures are of the settled state: the first ticks after loading run slower (the JIT
compiles the meter's bookkeeping once each runtime has run it some fifty times), so the
report runs WARM ticks (150 by default) before it measures, then measures TICKS ticks in
five blocks and gives the median block with the fastest and slowest; the floor the same way
in the same run.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from moonbox import Budget
from moonbox.engine import Game

# Steps bound each call; the wall budget is loose because the machine may be shared, and a
# host pause (a garbage collection, being descheduled) lands inside whichever call runs.
BUDGET = Budget(steps=200_000, wall_s=5.0, alloc_bytes="4MB", max_memory="32MB")

HANDLERS = {
    "empty": 'on("tick", function(t) end)',
    "read": 'local me = "e-" .. MOD\non("tick", function(t) local x = coreai_world_pos(me) end)',
    "full": """local me = "e-" .. MOD
on("tick", function(t)
  local x = coreai_world_pos(me)
  if x then coreai_world_change(me, {x = (x + 1) % 100}) end
end)""",
}


WARM_TICKS = 150
"""Ticks run before measuring: past them the per-call cost has settled."""


def make_game(mods: int, variant: str) -> Game:
    game = Game(seed=1, budget=BUDGET)
    for i in range(mods):
        game.world.submit("spawn", {"prefab": "cube", "name": f"e-m{i}"}, f"m{i}")
    game.world.apply()
    for i in range(mods):
        game.load_mod(f"m{i}", f'local MOD = "m{i}"\n' + HANDLERS[variant])
    game.tick()  # first calls start each dispatcher
    return game


@pytest.mark.parametrize("variant", list(HANDLERS))
def test_tick_of_1000_mods(benchmark: Any, variant: str) -> None:
    """One tick: 1,000 budgeted handler calls (divide the time by 1,000 per call)."""
    benchmark.group = "one tick of 1,000 mods"
    game = make_game(1000, variant)
    try:
        report = benchmark.pedantic(game.tick, rounds=5, iterations=1)
        assert report.calls == 1000 and not report.failures
    finally:
        game.close()


def test_tick_with_no_mods(benchmark: Any) -> None:
    """The engine's own cost per tick: no mods, an empty world."""
    benchmark.group = "engine overhead"
    with Game() as game:
        benchmark(game.tick)


# The floor under any engine with one runtime per mod: raw LuaJIT (no sandbox, no meter,
# no validation), one runtime per mod, the same handler as "full" behind a coroutine, the
# world a dict and the two calls bare Python callbacks. What separates it from a single
# runtime is that every call lands in a runtime the CPU caches no longer hold. Its parts
# are floors of their own: "empty" is the resume alone, "read" adds the read.
_RAW_HANDLERS = {
    "empty": "",
    "read": "local x = pos(me)",
    "full": "local x = pos(me)\n  if x then change(me, {x = (x + 1) % 100}) end",
}
_RAW_MOD = """local pos, change, me = ...
local function handler(t)
  %s
end
return coroutine.wrap(function()
  while true do handler(coroutine.yield()) end
end)"""


class RawFloor:
    """``mods`` raw LuaJIT runtimes, each handling ``tick`` as ``variant`` does."""

    def __init__(self, mods: int, variant: str = "full") -> None:
        from moonbox.bench import raw_luajit

        self.positions = {f"e-m{i}": 0 for i in range(mods)}
        self.pending: list[tuple[str, Any]] = []
        self.runtimes = [raw_luajit() for _ in range(mods)]
        self.steps = []
        for i, rt in enumerate(self.runtimes):
            step = rt.execute(_RAW_MOD % _RAW_HANDLERS[variant], self.positions.get,
                              self._change, f"e-m{i}")
            step()  # to the first yield
            self.steps.append(step)

    def _change(self, name: Any, fields: Any) -> None:
        self.pending.append((name, fields["x"]))

    def tick(self, t: int = 0) -> int:
        for step in self.steps:
            step(t)
        for name, x in self.pending:
            self.positions[name] = x
        calls = len(self.steps)
        self.pending.clear()
        return calls


@pytest.mark.parametrize("variant", list(_RAW_HANDLERS))
def test_raw_floor_of_1000_mods(benchmark: Any, variant: str) -> None:
    """The same tick in raw LuaJIT, one runtime per mod: no engine can beat this."""
    benchmark.group = "one tick of 1,000 mods"
    floor = RawFloor(1000, variant)
    assert benchmark.pedantic(floor.tick, rounds=5, iterations=1) == 1000
    assert (floor.positions["e-m0"] > 0) == (variant == "full")


def _validate_change() -> Callable[[], Any]:
    """The validation alone of one ``coreai_world_change(me, {x = ...})``'s arguments: the
    pydantic model every command is checked against before the world queues it."""
    from moonbox.world._commands import ChangeArgs

    validate = ChangeArgs.__pydantic_validator__.validate_python
    args = {"name": "e-m1", "fields": {"x": 3}}
    return lambda: validate(args)


def test_validate_one_change(benchmark: Any) -> None:
    """What validating one command's arguments costs (the floor cannot skip it)."""
    benchmark.group = "validation"
    assert benchmark(_validate_change()).name == "e-m1"


def _cpu_us_per_call(fn: Callable[[], int], ticks: int) -> float:
    calls, cpu0 = 0, time.process_time()
    for _ in range(ticks):
        calls += fn()
    return (time.process_time() - cpu0) / calls * 1e6


def report(mods: int = 1000, ticks: int = 20, warm: int = WARM_TICKS) -> None:
    """Print the CPU time per call of each variant and of its floor, settled (CPU time: the
    machine may be shared): five blocks of ticks, each of moonbox's followed by one of the
    floor's, so a change in the machine's load falls on both; the median block of each and
    the median of the blocks' ratios, with their range."""
    blocks = 5
    per = max(1, ticks // blocks)
    for variant in HANDLERS:
        game = make_game(mods, variant)
        floor = RawFloor(mods, variant)
        try:
            for _ in range(warm):
                game.tick()
                floor.tick()

            def tick(game: Game = game) -> int:
                r = game.tick()
                assert not r.failures, r.failures[0]
                return r.calls

            pairs = [(_cpu_us_per_call(tick, per), _cpu_us_per_call(floor.tick, per))
                     for _ in range(blocks)]
        finally:
            game.close()
        ours = sorted(p[0] for p in pairs)
        raw = sorted(p[1] for p in pairs)
        ratios = sorted(p[0] / p[1] for p in pairs)
        print(f"{variant:6} {mods} mods, {warm} ticks warm, {blocks}x{per} measured: moonbox "
              f"{ours[2]:5.2f} us/call ({ours[0]:.2f}-{ours[-1]:.2f}), raw LuaJIT floor "
              f"{raw[2]:5.2f} ({raw[0]:.2f}-{raw[-1]:.2f}), ratio {ratios[2]:4.1f}x "
              f"({ratios[0]:.1f}-{ratios[-1]:.1f})")
    validate, n = _validate_change(), 20_000
    us = _cpu_us_per_call(lambda: validate() and 1, n)
    print(f"validating one change's arguments: {us:.1f} us")
    with Game() as game:
        n = 20_000
        cpu0 = time.process_time()
        for _ in range(n):
            game.tick()
        print(f"no mods: {(time.process_time() - cpu0) / n * 1e6:.1f} us per tick")


if __name__ == "__main__":
    report(*(int(a) for a in sys.argv[1:4]))
