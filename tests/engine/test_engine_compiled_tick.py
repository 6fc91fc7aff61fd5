"""The compiled tick (``_tick.c``) against the engine's Python tick: the same games, tick
for tick, give the same reports, world, stats and quarantines.

The compiled tick calls a steady mod's one ``tick`` handler itself and hands every other
mod, and every call that ends otherwise than plainly, to the engine's Python; these tests
run games whose mods change between the two ways every few ticks (failures, trips, waits,
timers, events, reports, a second handler, exports, growing heaps) and compare each tick
of the two."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moonbox import Budget
from moonbox.engine import Game, _dispatch

COMPILED_TICK = _dispatch._compiled_tick
pytestmark = pytest.mark.skipif(COMPILED_TICK is None,
                                reason="the compiled tick was not built here")

# What a mod's tick handler may do, each on its own rhythm (every k-th tick, k = 2..5):
# the Lua that does it, inside `on("tick", function(t) ... end)`.
BEHAVIOURS = {
    "nothing": "",
    "read": "local x = coreai_world_pos(me)",
    "change": "local x = coreai_world_pos(me)\n"
              "if x then coreai_world_change(me, {x = (x + 1) % 100}) end",
    "report": "if t % K == 0 then report('tick ' .. t) end",
    "fail": "if t % K == 0 then error('boom at ' .. t) end",
    "trip": "if t % K == 0 then while true do end end",
    "wait": "if t % K == 0 then wait(1) end",
    "timer": "if t % K == 0 then after(1, function() report('timer') end) end",
    "emit": "if t % K == 0 then emit('ping', t) end",
    "grow": "hold = hold or {}\nhold[#hold + 1] = string.rep('x', 200 * K)",
    "yield": "if t % K == 0 then coroutine.yield(1) end",
    "second": "if t == K and not second then second = true\n"
              "  on('tick', function() end) end",
    "cancel": "if t % K == 0 and handle then cancel(handle) handle = nil end",
    "export": "if t % K == 0 then local f = import('m0', 'f') if f then f(t) end end",
    "listen": "",
    "every": "",
}

# What a behaviour sets up as the mod loads.
PROLOGUES = {
    "listen": "on('ping', function(data) end)",
    "every": "every(K + 1, function() end)",
    "cancel": "handle = every(K + 1, function() end)",
}

SOURCE = """local me = "e-" .. MOD
local K = %d
export("f", function(x) return x end)
%s
on("tick", function(t)
%s
end)
"""


def make(mods: list[tuple[str, int]]) -> Game:
    game = Game(seed=3, budget=Budget(steps=50_000, wall_s=5.0, alloc_bytes="1MB",
                                      max_memory="32MB"))
    for i, _ in enumerate(mods):
        game.world.submit("spawn", {"prefab": "cube", "name": f"e-m{i}"}, f"m{i}")
    game.world.apply()
    for i, (behaviour, k) in enumerate(mods):
        source = f'local MOD = "m{i}"\n' + SOURCE % (k, PROLOGUES.get(behaviour, ""),
                                                     BEHAVIOURS[behaviour])
        game.load_mod(f"m{i}", source)
    return game


def summary(report: Any) -> Any:
    return (report.tick, report.calls,
            [(f.mod, f.handler, f.where, f.error.kind, str(f.error)) for f in report.failures],
            [(r.id, r.mod, r.kind, r.status, r.reason, r.message) for r in report.results],
            [(e.name, e.source, e.data) for e in report.events],
            list(report.quarantined), list(report.reports), dict(report.reports_dropped))


def stats(game: Game) -> Any:
    # (The heap's peak is the runtime's own: two runtimes of one source may differ in it.)
    return [(m.id, m.stats.calls, m.stats.steps, m.stats.errors, m.stats.trips,
             m.stats.memory_peak_bytes > 0, m.quarantine and m.quarantine.kind,
             len(m.tasks), len(m.timers)) for m in game.mods]


def run_both(mods: list[tuple[str, int]], ticks: int, monkeypatch: Any) -> list[int]:
    """Runs the game both ways; the calls the compiled tick made itself, per tick."""
    made: list[int] = []

    def counting(*args: Any) -> Any:
        calls = COMPILED_TICK(*args)
        made.append(calls)
        return calls

    monkeypatch.setattr(_dispatch, "_compiled_tick", counting)
    fast = make(mods)
    monkeypatch.setattr(_dispatch, "_compiled_tick", None)
    slow = make(mods)
    try:
        for _ in range(ticks):
            monkeypatch.setattr(_dispatch, "_compiled_tick", counting)
            a = fast.tick()
            monkeypatch.setattr(_dispatch, "_compiled_tick", None)
            b = slow.tick()
            assert summary(a) == summary(b)
            assert stats(fast) == stats(slow)
            assert fast.world.content_hash() == slow.world.content_hash()
    finally:
        fast.close()
        slow.close()
    return made


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(mods=st.lists(st.tuples(st.sampled_from(sorted(BEHAVIOURS)), st.integers(2, 5)),
                     min_size=1, max_size=6),
       ticks=st.integers(1, 12))
def test_the_compiled_tick_is_the_python_tick(mods, ticks, monkeypatch):
    run_both(mods, ticks, monkeypatch)


def test_steady_mods_are_called_by_the_compiled_tick(monkeypatch):
    made = run_both([("nothing", 2), ("change", 2), ("read", 3)], 6, monkeypatch)
    # The first tick starts each dispatcher; from then on every call is the loop's own
    # (the timer of `every` makes a mod unsteady on the ticks it is due).
    assert made[0] == 0 and sum(made[1:]) > 0


def test_every_behaviour_takes_its_turn(monkeypatch):
    run_both([(b, 2) for b in sorted(BEHAVIOURS)], 8, monkeypatch)
