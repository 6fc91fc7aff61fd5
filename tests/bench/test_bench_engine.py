"""``moonbox bench --engine``: the games and the floor do the same work, the measurement
refuses a floor that did other work, and the command prints its table or JSON. Nothing
here is timed (the figures are the benchmark's: benchmarks/ and moonbox bench)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from moonbox.bench import _engine
from moonbox.bench._engine import ENGINE_HANDLERS, ENGINE_TARGETS, RawFloor, make_engine_game
from moonbox.cli import cli


@pytest.mark.parametrize("variant", list(ENGINE_HANDLERS))
def test_the_game_and_its_floor_leave_the_same_world(variant):
    game, floor = make_engine_game(6, variant), RawFloor(6, variant)
    try:
        for _ in range(4):
            report = game.tick()
            assert report.calls == floor.tick() == 6 and not report.failures
        ours = {f"e-m{i}": game.world.position(f"e-m{i}")[0] for i in range(6)}
        assert ours == floor.positions
        assert set(ours.values()) == ({5} if variant == "full" else {0})
    finally:
        game.close()


def test_the_measurement_gives_each_handler_against_its_target():
    report = _engine.measure_engine(mods=4, ticks=5, warm=2)
    assert [h["name"] for h in report["handlers"]] == ["empty", "read", "full"]
    for h in report["handlers"]:
        assert h["target"] == ENGINE_TARGETS[h["name"]]
        assert h["met"] == (h["ratio"] <= h["target"])
        for key in ("moonbox", "floor", "ratio"):
            low, high = h[f"{key}_range"]
            assert 0 < low <= high
        assert h["moonbox_range"][0] <= h["moonbox_us"] <= h["moonbox_range"][1]
    assert report["validate_change_us"] > 0 and report["no_mods_tick_us"] > 0


def test_a_floor_that_did_other_work_fails_the_measurement(monkeypatch):
    from moonbox import HostError

    monkeypatch.setattr(RawFloor, "_change", lambda self, name, fields: None)
    with pytest.raises(HostError, match="full handler left another world"):
        _engine.measure_engine(mods=3, ticks=5, warm=1)


def test_the_command_prints_the_table_or_json(monkeypatch):
    real = _engine.measure_engine
    monkeypatch.setattr(_engine, "measure_engine",
                        lambda mods, ticks, warm, progress=None: real(3, 5, 1, progress))
    out = CliRunner().invoke(cli, ["bench", "--engine", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert [h["name"] for h in doc["handlers"]] == ["empty", "read", "full"]
    assert doc["quick"] is False and doc["environment"]["cpus"] >= 1
    out = CliRunner().invoke(cli, ["bench", "--engine", "--quick"])
    assert out.exit_code == 0, out.output
    assert "moonbox bench --engine" in out.output and "full" in out.output
    assert CliRunner().invoke(cli, ["bench", "--engine", "--suite"]).exit_code == 2
