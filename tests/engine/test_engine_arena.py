"""The example game: four mods play, the glitch is quarantined, the rest never notice."""

from __future__ import annotations


def test_the_arena_plays_and_quarantines_the_glitch(capsys, arena_example):
    arena = arena_example
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
