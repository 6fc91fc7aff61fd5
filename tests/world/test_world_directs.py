"""The world calls the sandbox's compiled crossing answers itself (``Binding.direct``).

``coreai_world_pos``, ``coreai_world_exists`` and a change of placement
(``coreai_world_change(name, {x = ...})``) have a direct answer: the lane's checks and the
binding's work in one function the crossing calls, with no dispatcher between. Whatever a
mod passes, hostile values included, a game whose calls take it and a game whose calls all
take the dispatcher must answer the mod the same, queue and apply the same commands and
end in the same world; and nothing that observes a call (a hook) may miss one.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moonbox.bindings import Hook, Permissions, Registry
from moonbox.engine import Game
from moonbox.world import World, world_bindings

# Owned by mod a, by mod b, by the host; "gone" never exists.
OWNERS = {"a1": "a", "a2": "a", "b1": "b", "h1": None}
NAMES = [*OWNERS, "gone", "x" * 300, "\xff", ""]

# Each report line is one call's answers: pcall's status, then what it returned.
PRELUDE = """
local function rec(...)
  local parts = {}
  for i = 1, select("#", ...) do parts[#parts + 1] = tostring((select(i, ...))) end
  report(table.concat(parts, " "))
end
"""


def lua(value: Any) -> str:
    """``value`` as a Lua expression."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "(0/0)"
        if math.isinf(value):
            return "math.huge" if value > 0 else "-math.huge"
        return repr(value)
    if isinstance(value, str):
        return '"' + "".join(f"\\{b}" for b in value.encode()) + '"'
    if isinstance(value, dict):
        return "{" + ", ".join(f"[{lua(k)}] = {lua(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e308, 5e-324, 100_000.0, 100_000.0000001]),
    st.integers(-(2**64), 2**64),
    st.integers(-3, 3),
)
values = st.one_of(numbers, st.booleans(), st.sampled_from(["", "a1", "text"]))
keys = st.one_of(st.sampled_from(["x", "y", "z", "rx", "ry", "rz", "scale", "parent",
                                  "properties", "bogus", "X"]),
                 st.integers(1, 3))
names = st.one_of(st.sampled_from(NAMES), numbers, st.booleans())


@st.composite
def calls(draw: Any) -> str:
    kind = draw(st.sampled_from(["pos", "exists", "change", "change", "odd", "transaction"]))
    name = lua(draw(names))
    if kind in ("pos", "exists"):
        return f"coreai_world_{kind}, {name}"
    if kind == "change":
        table = draw(st.dictionaries(keys, values, max_size=4))
        return f"coreai_world_change, {name}, {lua(table)}"
    if kind == "transaction":  # a change inside one joins it, not the queue
        return draw(st.sampled_from(["coreai_world_begin", "coreai_world_commit",
                                     "coreai_world_rollback"]))
    return draw(st.sampled_from([
        "coreai_world_pos", f"coreai_world_pos, {name}, 1", "coreai_world_change",
        f"coreai_world_change, {name}", f"coreai_world_change, {name}, {{x = 1}}, 2",
        f"coreai_world_exists, {name}, {name}",
    ]))


def game_of(body: str, *, direct: bool, **world_options: Any) -> Game:
    """A game over the four entities, with mods a and b running ``body`` each tick; with
    ``direct`` False, every call takes the dispatcher."""
    world = World(**world_options)
    for name, owner in OWNERS.items():
        world.submit("spawn", {"prefab": "cube", "name": name}, owner)
    world.apply()
    game = Game(world, seed=1)
    for mod_id in ("a", "b"):
        game.load_mod(mod_id, PRELUDE + f'on("tick", function(t)\n{body}\nend)')
        if not direct:
            game.mod(mod_id).sandbox._resumer.set_directs(None, None)
    return game


def run(game: Game, ticks: int) -> list[Any]:
    seen = []
    for _ in range(ticks):
        report = game.tick()
        seen.append((report.reports, [r.to_dict() for r in report.results],
                     [str(f) for f in report.failures]))
    seen.append(game.world.content_hash())
    return seen


def directed(game: Game) -> int:
    return sum(m.sandbox._resumer.directed for m in game.mods)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(calls(), min_size=1, max_size=8))
def test_the_direct_answers_are_the_dispatchers(made: list[str]) -> None:
    body = "\n".join(f"rec(pcall({call}))" for call in made)
    games = [game_of(body, direct=direct) for direct in (True, False)]
    try:
        seen = [run(game, 3) for game in games]
        assert seen[0] == seen[1]
        assert directed(games[1]) == 0
    finally:
        for game in games:
            game.close()


def test_the_common_calls_take_the_direct_way() -> None:
    body = ('local x = coreai_world_pos("a1")\n'
            'rec(x, coreai_world_exists("b1"), coreai_world_change("a1", {x = x + 1}))')
    with game_of(body, direct=True) as game:
        game.tick()  # the first calls refresh each mod's view of the registry
        before = directed(game)
        reports = game.tick().reports
        assert directed(game) - before == 2 * 3  # two mods, three calls each
        # (Mod b's change of a1 is refused: a owns it.)
        assert [line.split()[:2] for _, line in reports] == [["1", "true"], ["1", "true"]]
        assert game.world.position("a1") == (2.0, 0.0, 0.0)


def test_a_refused_direct_change_is_refused_as_any_other() -> None:
    # Mod b moves a1, which a owns: queued (the change's id), refused when applied.
    body = 'rec(coreai_world_change("a1", {x = 5}))'
    with game_of(body, direct=True) as game:
        game.tick()
        before = directed(game)
        results = game.tick().results
        assert directed(game) - before == 2
        assert [(r.mod, r.status, r.reason) for r in results] == [
            ("a", "applied", None), ("b", "refused", "not_owner")]


def test_a_full_queue_is_explained_by_the_full_path() -> None:
    body = "\n".join(['rec(pcall(coreai_world_change, "a1", {x = 1}))'] * 4)
    seen = []
    for direct in (True, False):
        with game_of(body, direct=direct, max_pending_per_mod=2) as game:
            seen.append(run(game, 2))
    assert seen[0] == seen[1]
    lines = [line for _, line in seen[0][0][0]]
    assert lines[2].startswith("false") and "[queue_full]" in lines[2]


def test_a_hook_added_later_sees_every_call() -> None:
    body = 'rec(coreai_world_pos("a1"), coreai_world_change("a1", {y = 1}))'
    with game_of(body, direct=True) as game:
        game.tick()
        game.tick()
        seen: list[str] = []
        game.registry.add_hook(Hook("audit", pre_call=lambda info: seen.append(
            info.binding.name), match="coreai_world_*"))
        before = directed(game)
        game.tick()
        assert seen == ["coreai_world_pos", "coreai_world_change"] * 2
        assert directed(game) == before


def test_a_removed_binding_is_unavailable_at_once() -> None:
    body = 'rec(pcall(coreai_world_pos, "a1"))'
    with game_of(body, direct=True) as game:
        game.tick()
        assert [line for _, line in game.tick().reports] == ["true 0 0 0"] * 2
        game.registry.unregister("coreai_world_pos")
        lines = [line for _, line in game.tick().reports]
        assert len(lines) == 2 and all(
            line.startswith("false") and "[unavailable]" in line for line in lines)


def test_recorded_calls_are_all_recorded() -> None:
    body = 'rec(coreai_world_pos("a1"), coreai_world_change("a1", {z = 2}))'
    with game_of(body, direct=True) as game:
        game.tick()
        game.tick()
        game.registry.record_calls(10)
        before = directed(game)
        game.tick()
        assert directed(game) == before
        for mod in game.mods:
            assert [r.binding for r in mod.api.calls] == [
                "coreai_world_pos", "coreai_world_change", "report"]


def test_a_world_put_in_place_of_the_games_is_the_one_read() -> None:
    body = 'local x, y, z = coreai_world_pos("a1")\nrec(x, y, z, coreai_world_exists("a2"))'
    with game_of(body, direct=True) as game:
        game.tick()
        assert [line for _, line in game.tick().reports] == ["0 0 0 true"] * 2
        world = World()
        world.submit("spawn", {"prefab": "cube", "name": "a1", "x": 7}, "a")
        world.apply()
        game.world = world
        before = directed(game)
        assert [line for _, line in game.tick().reports] == ["7 0 0 false"] * 2
        assert directed(game) - before == 4


def test_a_change_inside_a_transaction_joins_it() -> None:
    # Rolled back on odd ticks, committed on even ones: a change the direct answer queued
    # past the transaction would apply on every tick.
    body = """coreai_world_begin()
rec(coreai_world_change("a1", {x = t}), coreai_world_change("a2", {x = t, y = 1}))
if t % 2 == 1 then rec(coreai_world_rollback()) else rec(coreai_world_commit()) end"""
    seen = []
    for direct in (True, False):
        with game_of(body, direct=direct) as game:
            seen.append(run(game, 4))
            assert game.world.position("a1") == (4.0, 0.0, 0.0)
            game.tick()
            assert game.world.position("a1") == (4.0, 0.0, 0.0)  # tick 5: rolled back
    assert seen[0] == seen[1]


def test_a_registry_changed_during_the_answer_declines_it() -> None:
    # The world's getter removes the binding while the direct answer runs (as another
    # thread could): the answer is the full path's, which finds the binding gone.
    world = World()
    world.submit("spawn", {"prefab": "cube", "name": "a1", "x": 3}, "m")
    world.apply()
    remove = []

    def current() -> World:
        if remove:
            registry.unregister(remove.pop())
        return world

    registry = Registry(world_bindings(current))
    api = registry.mod("m", Permissions(mode="full"))
    with api.sandbox() as sb:
        assert sb.run('return coreai_world_pos("a1")').values == (3.0, 0.0, 0.0)
        assert sb.run('return coreai_world_pos("a1")').values == (3.0, 0.0, 0.0)
        assert sb._resumer.directed == 1  # the first call refreshed the registry's view
        for name, call in (("coreai_world_exists", 'coreai_world_exists("a1")'),
                           ("coreai_world_change", 'coreai_world_change("a1", {x = 1})'),
                           ("coreai_world_pos", 'coreai_world_pos("a1")')):
            sb.run(f"return {call}")  # served once, then the binding goes while it runs
            remove.append(name)
            out = sb.run(f"return pcall(function() return {call} end)")
            assert out.values[0] is False and "[unavailable]" in out.values[1], out.values
        # The change served before its binding went is queued; the refused one is not.
        assert [c.id for c in world.pending] == [2]
    registry.close()
