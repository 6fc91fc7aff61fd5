"""The engine: budgeted handler calls per second, and the cost of a tick with no mods.

    pytest benchmarks/test_engine_bench.py --benchmark-only
    python benchmarks/test_engine_bench.py [MODS] [TICKS] [WARM] # a plain report, CPU time
    moonbox bench --engine                                      # the same, as a table

Each mod handles ``tick`` with a small handler; the variants separate what a call costs:
``empty`` (dispatch only), ``read`` (one ``coreai_world_pos``), ``full`` (that read and one
``coreai_world_change``: the issue's workload). One tick of N mods is N budgeted calls,
then the world applies the N commands. The games, the raw LuaJIT floor and the
measurement are ``moonbox.bench._engine``'s (see there).

Figures are of the settled state: the first ticks after loading run slower (the JIT
compiles the meter's bookkeeping once each runtime has run it some fifty times), so the
report runs WARM ticks (150 by default) before it measures, then measures TICKS ticks in
five blocks and gives the median block with the fastest and slowest; the floor the same way
in the same run.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from moonbox.bench._engine import (
    ENGINE_HANDLERS,
    ENGINE_WARM_TICKS,
    RawFloor,
    make_engine_game,
    measure_engine,
)
from moonbox.engine import Game


@pytest.mark.parametrize("variant", list(ENGINE_HANDLERS))
def test_tick_of_1000_mods(benchmark: Any, variant: str) -> None:
    """One tick: 1,000 budgeted handler calls (divide the time by 1,000 per call)."""
    benchmark.group = "one tick of 1,000 mods"
    game = make_engine_game(1000, variant)
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


@pytest.mark.parametrize("variant", list(ENGINE_HANDLERS))
def test_raw_floor_of_1000_mods(benchmark: Any, variant: str) -> None:
    """The same tick in raw LuaJIT, one runtime per mod: no engine can beat this."""
    benchmark.group = "one tick of 1,000 mods"
    floor = RawFloor(1000, variant)
    assert benchmark.pedantic(floor.tick, rounds=5, iterations=1) == 1000
    assert (floor.positions["e-m0"] > 0) == (variant == "full")


def test_validate_one_change(benchmark: Any) -> None:
    """What validating one command's arguments costs (the floor cannot skip it)."""
    from moonbox.world._commands import ChangeArgs

    benchmark.group = "validation"
    validate = ChangeArgs.__pydantic_validator__.validate_python
    args = {"name": "e-m1", "fields": {"x": 3}}
    assert benchmark(lambda: validate(args)).name == "e-m1"


def report(mods: int = 1000, ticks: int = 20, warm: int = ENGINE_WARM_TICKS) -> None:
    """Print the CPU time per call of each variant and of its floor, settled (CPU time: the
    machine may be shared): the median block of each and the median of the blocks'
    ratios, with their range."""
    figures = measure_engine(mods, ticks, warm)
    per = max(1, ticks // figures["blocks"])
    for h in figures["handlers"]:
        print(f"{h['name']:6} {mods} mods, {warm} ticks warm, {figures['blocks']}x{per} "
              f"measured: moonbox {h['moonbox_us']:5.2f} us/call "
              f"({h['moonbox_range'][0]:.2f}-{h['moonbox_range'][1]:.2f}), raw LuaJIT floor "
              f"{h['floor_us']:5.2f} ({h['floor_range'][0]:.2f}-{h['floor_range'][1]:.2f}), "
              f"ratio {h['ratio']:4.1f}x ({h['ratio_range'][0]:.1f}-{h['ratio_range'][1]:.1f})")
    print(f"validating one change's arguments: {figures['validate_change_us']:.1f} us")
    print(f"no mods: {figures['no_mods_tick_us']:.1f} us per tick")


if __name__ == "__main__":
    report(*(int(a) for a in sys.argv[1:4]))
