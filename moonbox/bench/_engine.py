"""``moonbox bench --engine``: the engine's budgeted handler calls against the floor under
any engine with one runtime per mod, measured in one run.

Each of N mods handles ``tick`` with a small handler; the variants separate what a call
costs: ``empty`` (dispatch only), ``read`` (one ``coreai_world_pos``), ``full`` (that read
and one ``coreai_world_change``: a server's commonest call). One tick of N mods is N
budgeted calls, then the world applies the N commands.

The floor is raw LuaJIT (no sandbox, no meter, no validation): one runtime per mod, the
same handler behind a coroutine, the world a dict and the two calls bare Python
callbacks, the changes applied after the tick. What keeps it above a single runtime is
that every call lands in a runtime the CPU caches no longer hold; moonbox pays that too.

Figures are of the settled state: the first ticks after loading run slower (each runtime's
JIT compiles what runs often in it), so WARM ticks run first. Then five blocks of ticks,
each of moonbox's followed by one of the floor's, so that a change in the machine's load
falls on both: CPU time per call (the machine may be shared), the median block of each,
and the median of the blocks' ratios with their range. Both sides must leave the world the
same (each ``full`` call moves its entity by one), or the measurement fails.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .._errors import HostError
from ..sandbox import Budget
from ._baseline import raw_luajit

__all__ = [
    "ENGINE_BUDGET",
    "ENGINE_HANDLERS",
    "ENGINE_TARGETS",
    "ENGINE_WARM_TICKS",
    "RawFloor",
    "cpu_us_per_call",
    "make_engine_game",
    "measure_engine",
]

ENGINE_BUDGET = Budget(steps=200_000, wall_s=5.0, alloc_bytes="4MB", max_memory="32MB")
"""Each call's budget: steps bound it; the wall budget is loose because the machine may be
shared, and a host pause (a garbage collection, being descheduled) lands inside whichever
call runs."""

ENGINE_HANDLERS = {
    "empty": 'on("tick", function(t) end)',
    "read": 'local me = "e-" .. MOD\non("tick", function(t) local x = coreai_world_pos(me) end)',
    "full": """local me = "e-" .. MOD
on("tick", function(t)
  local x = coreai_world_pos(me)
  if x then coreai_world_change(me, {x = (x + 1) % 100}) end
end)""",
}

ENGINE_TARGETS = {"empty": 2.0, "read": 2.5, "full": 3.0}
"""Each handler's target: moonbox's CPU time per call over the floor's, at most."""

ENGINE_WARM_TICKS = 150
"""Ticks run before measuring: past them the per-call cost has settled."""

BLOCKS = 5

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


def make_engine_game(mods: int, variant: str) -> Any:
    """A game of ``mods`` mods, each owning an entity and handling ``tick`` as
    ``variant`` does; its first tick has run (it starts each mod's dispatcher)."""
    from ..engine import Game

    game = Game(seed=1, budget=ENGINE_BUDGET)
    for i in range(mods):
        game.world.submit("spawn", {"prefab": "cube", "name": f"e-m{i}"}, f"m{i}")
    game.world.apply()
    for i in range(mods):
        game.load_mod(f"m{i}", f'local MOD = "m{i}"\n' + ENGINE_HANDLERS[variant])
    game.tick()
    return game


class RawFloor:
    """``mods`` raw LuaJIT runtimes, each handling ``tick`` as ``variant`` does."""

    def __init__(self, mods: int, variant: str = "full") -> None:
        self.positions = {f"e-m{i}": 0 for i in range(mods)}
        self.pending: list[tuple[str, Any]] = []
        self.runtimes = [raw_luajit() for _ in range(mods)]
        self.steps = []
        for i, rt in enumerate(self.runtimes):
            step = rt.execute(_RAW_MOD % _RAW_HANDLERS[variant], self.positions.get,
                              self._change, f"e-m{i}")
            step()  # to the first yield
            self.steps.append(step)
        self.tick()  # as the game's first tick

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


def cpu_us_per_call(fn: Callable[[], int], ticks: int) -> float:
    """CPU µs per call over ``ticks`` calls of ``fn``, which returns the calls it made."""
    calls, cpu0 = 0, time.process_time()
    for _ in range(ticks):
        calls += fn()
    return (time.process_time() - cpu0) / calls * 1e6


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def _measure_variant(variant: str, mods: int, ticks: int, warm: int) -> dict[str, Any]:
    game = make_engine_game(mods, variant)
    floor = RawFloor(mods, variant)
    try:
        def tick() -> int:
            report = game.tick()
            if report.failures:
                raise HostError(f"the {variant} handler failed: {report.failures[0]}")
            return report.calls  # type: ignore[no-any-return]

        for _ in range(warm):
            tick()
            floor.tick()
        per = max(1, ticks // BLOCKS)
        pairs = [(cpu_us_per_call(tick, per), cpu_us_per_call(floor.tick, per))
                 for _ in range(BLOCKS)]
        ours = {f"e-m{i}": game.world.position(f"e-m{i}")[0] for i in range(mods)}
        if ours != floor.positions:
            raise HostError(f"the {variant} handler left another world than the floor's")
    finally:
        game.close()
    ratios = [a / b for a, b in pairs]
    ratio = _median(ratios)
    return {
        "name": variant,
        "moonbox_us": _median([a for a, _ in pairs]),
        "moonbox_range": [min(a for a, _ in pairs), max(a for a, _ in pairs)],
        "floor_us": _median([b for _, b in pairs]),
        "floor_range": [min(b for _, b in pairs), max(b for _, b in pairs)],
        "ratio": ratio,
        "ratio_range": [min(ratios), max(ratios)],
        "target": ENGINE_TARGETS[variant],
        "met": ratio <= ENGINE_TARGETS[variant],
    }


def measure_engine(mods: int = 1000, ticks: int = 20, warm: int = ENGINE_WARM_TICKS,
                   progress: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """Measure each handler and its floor, then the validation of one change's arguments
    and a tick with no mods. Raises HostError if a handler failed or the two sides left
    different worlds."""
    from ..engine import Game
    from ..world._commands import ChangeArgs

    started = time.perf_counter()
    handlers = []
    for variant in ENGINE_HANDLERS:
        if progress is not None:
            progress(f"measuring the {variant} handler: {mods} mods, {warm} ticks warm...")
        handlers.append(_measure_variant(variant, mods, ticks, warm))
    validate = ChangeArgs.__pydantic_validator__.validate_python
    args = {"name": "e-m1", "fields": {"x": 3}}
    validate_us = cpu_us_per_call(lambda: validate(args) and 1, 20_000)
    with Game() as game:
        no_mods_us = cpu_us_per_call(lambda: game.tick() and 1, 20_000)
    return {
        "mods": mods, "ticks": ticks, "warm": warm, "blocks": BLOCKS,
        "handlers": handlers, "validate_change_us": validate_us, "no_mods_tick_us": no_mods_us,
        "elapsed_s": time.perf_counter() - started,
    }
