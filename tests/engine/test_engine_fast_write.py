"""The fast path of ``coreai_world_change``: it must give exactly what the full path gives.

A change call that nothing observes (no hook, approval or preparation on the binding) is
checked by a checker compiled from ``ChangeArgs`` and queued with no model built
(``World.submit_placement``); anything the checker cannot vouch for, and every call of a
binding something observes, takes the registry's full path. Two games run the same mods
with the same calls, one of them with a hook on the binding that only watches (so every
call takes the full path): the mods must see the same return values and errors, the
world the same commands, results and refusal events, and end the same.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moonbox import Budget
from moonbox.bindings import Hook
from moonbox.engine import Game
from moonbox.world import World

OWNED = {"a1": "a", "a2": "a", "b1": "b"}

# Lua expressions: numbers as Lua makes them (integers, NaN, infinities, past 2^63),
# and values no coordinate takes.
NUMBERS = ["0", "1", "-3", "2.5", "-0.0", "1e6", "100000", "0/0", "1/0", "-1/0", "2^63",
           "2^64", "-2^63", "1e308", "5e-324", "123456789012"]
OTHERS = ['"7"', "true", "{}", '""', '"a1"', '"gone"', "{1}"]
KEYS = ["x", "y", "z", "rx", "ry", "rz", "scale", "parent", "properties", "bogus"]
NAMES = ['"a1"', '"a2"', '"b1"', '"h1"', '"gone"', "5", 'string.rep("n", 300)', "nil",
         "{}"]


@st.composite
def tables(draw: Any) -> str:
    pairs = []
    for key in draw(st.lists(st.sampled_from(KEYS), max_size=3, unique=True)):
        if key == "properties":
            value = draw(st.sampled_from(["{}", "{hp = 3}", "1"]))
        elif key == "parent":
            value = draw(st.sampled_from(['""', '"a1"', '"b1"', '"gone"', "1"]))
        else:
            value = draw(st.sampled_from(NUMBERS + OTHERS) if draw(st.booleans())
                         else st.sampled_from(NUMBERS))
        pairs.append(f"{key} = {value}")
    if draw(st.integers(0, 9)) == 0:
        pairs.append(draw(st.sampled_from(["1", '[2] = 3', "[true] = 1"])))
    return "{" + ", ".join(pairs) + "}"


@st.composite
def calls(draw: Any) -> str:
    kind = draw(st.integers(0, 19))
    if kind == 0:
        return "coreai_world_begin()"
    if kind == 1:
        return "coreai_world_commit()"
    if kind == 2:
        return 'coreai_world_destroy("a2")'
    if kind == 3:
        return 'coreai_world_spawn{prefab = "cube", name = "a2"}'
    name = draw(st.sampled_from(NAMES) if draw(st.booleans()) else st.sampled_from(NAMES[:3]))
    return f"coreai_world_change({name}, {draw(tables())})"


def _mod(lines: list[str]) -> str:
    # Each call under pcall: its return value or its error, as a report line.
    body = "\n".join(f"  show(pcall(function() return {line} end))" for line in lines)
    return f"""
local function show(ok, a, b) report(tostring(ok) .. " " .. tostring(a) .. " " .. tostring(b)) end
on("world:refused", function(d) report("refused " .. d.id .. " " .. d.reason .. " " .. d.message) end)
on("tick", function(t)
{body}
end)
"""


def _game(watched: bool, mods: dict[str, list[str]], seen: list[str]) -> Game:
    # A loose wall budget: a trip that the machine's load decides would differ between
    # the two games.
    game = Game(seed=3, budget=Budget(steps=1_000_000, wall_s=60.0))
    if watched:
        game.registry.add_hook(Hook("watch", pre_call=lambda info: seen.append(info.mod),
                                    match="coreai_world_change"))
    for name, owner in OWNED.items():
        game.world.submit("spawn", {"prefab": "cube", "name": name}, owner)
    game.world.submit("spawn", {"prefab": "cube", "name": "h1"})
    game.world.apply()
    for mod_id, lines in mods.items():
        game.load_mod(mod_id, _mod(lines))
    return game


def _run(watched: bool, mods: dict[str, list[str]], ticks: int) -> tuple[list[Any], Game, int]:
    seen: list[str] = []
    game = _game(watched, mods, seen)
    fast = 0
    world = game.world
    submit_placement = world.submit_placement

    def counted(name: str, fields: dict[str, float], mod: str | None = None) -> int | None:
        nonlocal fast
        command_id = submit_placement(name, fields, mod)
        fast += command_id is not None
        return command_id

    world.submit_placement = counted  # type: ignore[method-assign]
    out: list[Any] = []
    for _ in range(ticks):
        before = [(c.id, c.mod, c.kind, c.args) for c in world.pending]
        report = game.tick()
        out.append((before, report.reports, [f.error.message for f in report.failures],
                    [r.to_dict() for r in report.results], report.events))
        out.append(world.snapshot(pending=True))
    out.append(world.content_hash())
    # The fast path: the lane's (submit_placement) or the crossing's direct answer, which
    # queues as submit_placement does (tests/world/test_world_directs.py).
    fast += sum(mod.sandbox._resumer.directed for mod in game.mods)
    assert not watched or fast == 0  # a watched binding never takes the fast path
    return out, game, fast


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=st.lists(calls(), min_size=1, max_size=6), b=st.lists(calls(), max_size=4),
       ticks=st.integers(1, 3))
def test_the_fast_path_gives_what_the_full_path_gives(a: list[str], b: list[str],
                                                       ticks: int) -> None:
    mods = {"a": a, "b": b}
    fast, fast_game, _ = _run(False, mods, ticks)
    full, full_game, _ = _run(True, mods, ticks)
    try:
        assert fast == full
    finally:
        fast_game.close()
        full_game.close()


def test_the_fast_path_is_taken_and_a_watched_binding_keeps_the_full_path() -> None:
    mods = {"a": ['coreai_world_change("a1", {x = 1, y = 2})',
                  'coreai_world_change("b1", {z = 0/0})',
                  'coreai_world_change("a1", {parent = ""})']}
    fast, fast_game, taken = _run(False, mods, 3)
    seen: list[str] = []
    full_game = _game(True, mods, seen)
    try:
        for _ in range(3):
            full_game.tick()
        # Two of the three calls a tick take the fast path (the parent change declines
        # to the full path), but for the very first call of the binding: it reads the
        # registry through the full path.
        assert taken == 5
        assert len(seen) == 9  # the hook saw every call
        assert fast_game.world.get("a1").x == 1.0  # type: ignore[union-attr]
        lines = [line for tick in fast[:-1:2] for _, line in tick[1]]
        assert any(line.startswith("refused") and "not_owner" in line for line in lines)
    finally:
        fast_game.close()
        full_game.close()


def test_a_placement_queued_fast_looks_like_the_model_it_stands_for() -> None:
    fast, full = World(), World()
    for world in (fast, full):
        world.submit("spawn", {"prefab": "cube", "name": "a1"}, "a")
        world.apply()
    assert fast.submit_placement("a1", {"y": 2.0, "x": 1.0}, "a") == 2
    assert full.submit("change", {"name": "a1", "fields": {"x": 1.0, "y": 2.0}}, "a").id == 2
    assert fast.pending == full.pending
    assert fast.snapshot(pending=True) == full.snapshot(pending=True)
    assert World.load(fast.snapshot(pending=True)).pending == full.pending
    # Declined, nothing queued: a field other than placement, none, an open transaction.
    assert fast.submit_placement("a1", {"parent": ""}, "a") is None  # type: ignore[dict-item]
    assert fast.submit_placement("a1", {}, "a") is None
    fast.begin("a")
    assert fast.submit_placement("a1", {"x": 1.0}, "a") is None
    fast.rollback("a")
    assert len(fast.pending) == 1
    assert [r.to_dict() for r in fast.apply()] == [r.to_dict() for r in full.apply()]
    assert fast.content_hash() == full.content_hash()


def test_a_table_with_two_problems_reports_the_same_one_in_every_run() -> None:
    # A Lua table's key order follows the runtime's string hash, seeded per runtime: the
    # error named must not depend on it (a seeded game replays its reports).
    mods = {"a": ['coreai_world_begin()'],
            "b": ['coreai_world_change("a1", {bogus = 1, [2] = 3})',
                  'coreai_world_change("a1", {zz = 1, bogus = 2, qq = 3, [7] = 1})']}
    seen = set()
    for watched in (False, True) * 4:
        out, game, _ = _run(watched, mods, 1)
        game.close()
        seen.add(tuple(line for _, line in out[0][1]))
    assert len(seen) == 1, seen
    lines = next(iter(seen))
    assert any("fields.2: Keys should be strings" in line for line in lines), lines
