"""Deterministic mode: the same seed, mods and inputs replay to the same world hash."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from moonbox.engine import Game

WANDERER = """
local me = MOD .. "-walker"
local n = 0
on("tick", function(t)
  if t == 1 then
    coreai_world_spawn{prefab = "sphere", name = me, x = math.random(-50, 50)}
    return
  end
  local x, y, z = coreai_world_pos(me)
  if x then
    coreai_world_change(me, {x = x + math.random(-3, 3), z = z + math.random() * 2 - 1})
  end
  if math.random() < 0.2 then
    n = n + 1
    coreai_world_spawn{prefab = "cube", name = me .. "-drop-" .. n, x = math.random(0, 99)}
  end
end)
on("poke", function(data)
  coreai_world_spawn{prefab = "marker", name = me .. "-poke-" .. data.id, y = data.y}
end)
"""


def play(seed: int, mods: int, ticks: int, pokes: list[tuple[int, int]]) -> str:
    with Game(seed=seed) as game:
        for i in range(mods):
            game.load_mod(f"m{i}", f'local MOD = "m{i}"\n' + WANDERER)
        pokes_by_tick: dict[int, list[int]] = {}
        for tick, y in pokes:
            pokes_by_tick.setdefault(tick % ticks, []).append(y)
        for t in range(ticks):
            for k, y in enumerate(pokes_by_tick.get(t, [])):
                game.emit("poke", {"id": f"{t}-{k}", "y": y})
            game.tick()
        return game.world.content_hash()


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**31), mods=st.integers(1, 3), ticks=st.integers(1, 12),
       pokes=st.lists(st.tuples(st.integers(0, 20), st.integers(-9, 9)), max_size=5))
def test_same_seed_and_inputs_same_hash(seed, mods, ticks, pokes):
    assert play(seed, mods, ticks, pokes) == play(seed, mods, ticks, pokes)


def test_different_seeds_differ():
    assert play(1, 2, 6, []) != play(2, 2, 6, [])


def test_random_is_per_mod(make_game):
    game = make_game(seed=3)
    for name in ("a", "b"):
        game.load_mod(name, 'on("tick", function() report(tostring(math.random(1, 1e9))) end)')
    a, b = [line for _, line in game.tick().reports]
    assert a != b


# pairs over string keys follows each runtime's string hash seed, which differs between
# runtimes: a mod acting in that order would replay differently without the fixed order.
PAIRS_ORDER = """
local t = {}
for i = 1, 20 do t["k" .. i] = i end
on("tick", function()
  local order = {}
  for k in pairs(t) do order[#order + 1] = k end
  coreai_world_spawn{prefab = "cube", name = table.concat(order, ","):sub(1, 60)}
end)
"""


def _pairs_world(**options) -> tuple[str, str]:
    with Game(**options) as game:
        game.load_mod("m", PAIRS_ORDER)
        game.tick()
        game.tick()
        [name] = game.world.find("k")
        return name, game.world.content_hash()


def test_pairs_order_replays():
    runs = {_pairs_world(seed=5) for _ in range(4)}
    assert len(runs) == 1
    [(name, _)] = runs
    assert name.startswith("k1,k10,k11,")  # strings sorted


def test_pairs_order_replays_isolated():
    runs = {_pairs_world(seed=5, isolation="process", workers=1) for _ in range(3)}
    assert len(runs) == 1
    assert runs == {_pairs_world(seed=5)}
