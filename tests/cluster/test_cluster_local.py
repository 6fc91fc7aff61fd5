"""Sharded games in this process: placement, lockstep, the combined hash against one game,
checkpoints on disk and a rollback with replay."""

from __future__ import annotations

from pathlib import Path

import pytest
from _mods import LOOSE, chatty_mods, inputs

from moonbox import Budget
from moonbox.cluster import ClusterError, ModSpec, ShardedGame, entity_digest, place
from moonbox.engine import Game


def run_sharded(shards: int, ticks: int, mods: list[ModSpec] | None = None,
                **options) -> ShardedGame:
    game = ShardedGame(mods or chatty_mods(), shards, seed=11, budget=LOOSE, **options)
    for t in range(1, ticks + 1):
        for name, data in inputs(t):
            game.emit(name, data)
        answers = game.tick()
        assert not any(a["failures"] for a in answers.values()), answers  # mods that run
    return game


def run_one(mods: list[ModSpec], ticks: int) -> Game:
    game = Game(seed=11, budget=LOOSE)
    for m in mods:
        game.load_mod(m.id, m.source)
    for t in range(1, ticks + 1):
        for name, data in inputs(t):
            game.emit(name, data)
        report = game.tick()
        assert not report.failures, report.failures
    return game


def test_placement_keeps_importers_together_and_balances():
    mods = [ModSpec("a", ""), ModSpec("b", "", imports=("c",)), ModSpec("c", ""),
            ModSpec("d", ""), ModSpec("e", "", imports=("a",))]
    placed = place(mods, 2)
    where = {m.id: i for i, group in enumerate(placed) for m in group}
    assert where["b"] == where["c"] and where["a"] == where["e"]
    assert sorted(len(g) for g in placed) == [2, 3]
    with pytest.raises(ClusterError, match="placement"):
        place(mods, 2, {"a": 0, "b": 0, "c": 1, "d": 0, "e": 0})
    with pytest.raises(ClusterError, match="placement"):
        place(mods, 2, {"a": 0})
    assert [m.id for m in place(mods, 2, {"a": 1, "b": 0, "c": 0, "d": 1, "e": 1})[1]] == \
        ["a", "d", "e"]


def test_one_shard_is_one_game():
    with run_sharded(1, 15) as sharded:
        one = run_one(chatty_mods(), 15)
        assert sharded.world_hashes()[0] == one.world.content_hash()
        one.close()


def test_shards_without_crossing_match_one_game_each():
    # Mods that hear no one: every shard's world is the unsharded game of its mods, and the
    # combined hash is the unsharded game of all of them.
    quiet = [ModSpec(m.id, m.source.replace('emit("ping"', 'emit("pong"')) for m in chatty_mods()]
    with run_sharded(3, 12, quiet) as sharded:
        for i, group in enumerate(sharded.placed):
            alone = run_one(group, 12)
            assert sharded.world_hashes()[i] == alone.world.content_hash()
            alone.close()
        whole = run_one(quiet, 12)
        assert sharded.combined_hash() == entity_digest(
            [e.to_dict() for e in whole.world.entities()])
        whole.close()


def test_events_cross_shards_on_the_next_tick():
    # Counting is order-free, so the sharded game's world is the one game's exactly.
    one = run_one(chatty_mods(), 20)
    want = entity_digest([e.to_dict() for e in one.world.entities()])
    one.close()
    for shards in (2, 3, 4):
        with run_sharded(shards, 20) as sharded:
            assert sharded.combined_hash() == want, shards


def test_an_entity_has_one_owning_shard():
    twin = [ModSpec(f"t{k}", 'coreai_world_spawn{prefab = "cube", name = "same"}')
            for k in range(2)]
    with ShardedGame(twin, 2, budget=LOOSE) as sharded:
        sharded.tick()
        with pytest.raises(ClusterError, match="entity_owner"):
            sharded.combined_hash()


def test_the_budget_given_holds_on_every_shard():
    # A handler that never ends trips on steps under whatever budget its shard runs: the
    # steps it spent are that budget's, on whichever shard it lives.
    from moonbox.cluster import LocalBackend

    spin = 'on("tick", function() while true do end end)'
    mods = [ModSpec(f"s{k}", spin) for k in range(2)]
    for steps in (1_000, 50_000):
        backend = LocalBackend()
        with ShardedGame(mods, 2, backend=backend,
                         budget=Budget(steps=steps, wall_s=30)) as game:
            answers = game.tick()
            assert [a["failures"] for a in answers.values()] == [1, 1]
            spent = [shard.game.mod(m.id).stats for shard in backend._shards
                     for m in shard.mods]
            assert len(spent) == 2
            for stats in spent:
                # (with the main chunk's and the dispatcher's start: some 150 steps)
                assert stats.trips == 1 and steps <= stats.steps < steps + 1_000


def test_checkpoints_are_files_and_a_rollback_replays_to_the_same_world(tmp_path: Path):
    with run_sharded(2, 23) as plain:
        want = plain.combined_hash()
    cp = tmp_path / "cp"
    with run_sharded(2, 23, checkpoint_dir=cp, checkpoint_every=5) as game:
        assert [c["tick"] for c in game.checkpoints] == [0, 5, 10, 15, 20]
        assert sorted(p.name for p in (cp / "shard-0").iterdir()) == [
            "tick-0000000010.snap", "tick-0000000015.snap", "tick-0000000020.snap"]
        assert not list(cp.rglob(".*.tmp"))
        game._recover([])  # every shard back to tick 20, the host's events replayed
        assert game.tick_count == 23 and game.recoveries[0]["from_tick"] == 20
        assert game.combined_hash() == want
        game.run(3)
        assert game.tick_count == 26
    with pytest.raises(ClusterError, match="not empty"):
        ShardedGame(chatty_mods(), 2, checkpoint_dir=cp)


def test_observe_reports_tick_time_skew_and_checkpoints(tmp_path: Path):
    cp = tmp_path / "cp"
    with run_sharded(2, 10, checkpoint_dir=cp, checkpoint_every=5) as game:
        answers = game.tick()
        own = [a["ms"] for a in answers.values()]
        assert game.skew_ms[-1] == pytest.approx(max(own) - min(own))
        assert game.overhead_ms[-1] == pytest.approx(max(0.0, game.tick_wall_ms[-1] - sum(own)))
        doc = game.observe()
        assert doc["backend"] == "local" and doc["tick"] == 11
        for shard in doc["shards"]:
            assert shard["ticks_run"] == 11 and shard["mods"] == 2 and shard["restarts"] == 0
            assert 0 < shard["ms_per_tick"] <= shard["ms_max"]
        assert len(game.skew_ms) == len(game.tick_wall_ms) == len(game.coordinator_ms) == 11
        assert doc["skew_max_ms"] >= doc["skew_ms"] >= 0
        assert doc["overhead_ms_per_shard_per_tick"] == pytest.approx(
            doc["overhead_ms_per_tick"] / 2, abs=1e-4)
        last = doc["last_checkpoint"]
        assert [c["tick"] for c in doc["checkpoints"]] == [0, 5, 10] and last["tick"] == 10
        assert last["bytes"] == sum(p.stat().st_size for p in cp.glob("shard-*/tick-0000000010.snap"))
        assert last["ms"] > 0 and not doc["lost"] and not doc["recoveries"]


def test_the_per_tick_series_keep_the_newest_ticks(monkeypatch):
    from moonbox.cluster import _game

    monkeypatch.setattr(_game, "SERIES_TICKS", 5)
    with run_sharded(2, 8) as game:
        assert len(game.skew_ms) == len(game.overhead_ms) == len(game.coordinator_ms) == 5
        assert [s["ticks_run"] for s in game.observe()["shards"]] == [8, 8]
