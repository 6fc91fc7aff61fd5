"""Replacing a mod in place and setting its state: what hot reload builds on."""

from __future__ import annotations

import pytest

from moonbox.engine import EngineError, Game, ModLimits

TICKER = 'on("tick", function(t) state_set("seen", (state_get("seen") or 0) + 1) report("{}") end)'


def ids_in_order(game: Game) -> list[str]:
    return [m.id for m in game.mods]


def test_a_replaced_mod_keeps_its_place_in_the_dispatch_order():
    with Game(seed=1) as game:
        for mod_id in ("a", "b", "c"):
            game.load_mod(mod_id, TICKER.format(mod_id))
        game.load_mod("b", TICKER.format("b2"), replacing=True)
        assert ids_in_order(game) == ["a", "b", "c"]
        report = game.tick()
        assert [line for _, line in report.reports] == ["a", "b2", "c"]


def test_replacing_a_mod_that_is_not_loaded_just_loads_it():
    with Game(seed=1) as game:
        game.load_mod("a", TICKER.format("a"), replacing=True)
        assert ids_in_order(game) == ["a"]
        with pytest.raises(EngineError) as info:
            game.load_mod("a", TICKER.format("a"))
        assert info.value.code == "duplicate_mod"


def test_set_state_replaces_a_mods_state_and_the_mod_reads_it():
    with Game(seed=1) as game:
        game.load_mod("a", 'on("tick", function() report(tostring(state_get("n"))) end)')
        game.set_state("a", {"n": 41, "names": ["x", "y"]})
        assert game.mod("a").state == {"n": 41, "names": ["x", "y"]}
        assert [line for _, line in game.tick().reports] == ["41"]


@pytest.mark.parametrize("state", [
    {"f": object()},                      # not plain data
    {1: "number key"},                    # not a string key
    {f"k{i}": i for i in range(300)},     # over max_state_keys (256)
    {"big": "x" * (300 << 10)},           # over max_state_bytes (256 KiB)
])
def test_a_refused_state_changes_nothing(state):
    with Game(seed=1, limits=ModLimits()) as game:
        game.load_mod("a", "")
        game.set_state("a", {"kept": True})
        with pytest.raises(EngineError) as info:
            game.set_state("a", state)
        assert info.value.code == "bad_state"
        assert game.mod("a").state == {"kept": True}


def test_set_state_of_an_unknown_mod():
    with Game(seed=1) as game, pytest.raises(EngineError) as info:
        game.set_state("ghost", {})
    assert info.value.code == "unknown_mod"
