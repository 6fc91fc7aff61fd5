"""The example game: four mods play, the glitch is quarantined, the rest never notice."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ARENA = Path(__file__).parents[2] / "examples" / "arena"


def _arena_module():
    spec = importlib.util.spec_from_file_location("arena_example", ARENA / "arena.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_arena_plays_and_quarantines_the_glitch(capsys):
    arena = _arena_module()
    with arena.play(ticks=40, seed=1) as game:
        glitch = game.mod("glitch")
        assert glitch.quarantine.kind == "trips" and glitch.stats.trips == 3
        assert glitch.stats.commands_refused == 3  # moving another mod's player
        for mod in game.mods:
            if mod.id != "glitch":
                assert mod.quarantine is None and mod.stats.errors == mod.stats.trips == 0
        assert game.mod("scoreboard").state["scores"]
        first = game.world.content_hash()
    with arena.play(ticks=40, seed=1) as game:
        assert game.world.content_hash() == first
    out = capsys.readouterr().out
    assert "QUARANTINED glitch" in out and "scoreboard: tick 40" in out
