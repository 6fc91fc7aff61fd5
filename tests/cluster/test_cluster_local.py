"""Sharded games in this process: placement, lockstep, the combined hash against one game,
checkpoints on disk and a rollback with replay."""

from __future__ import annotations

from pathlib import Path

import pytest
from _mods import chatty_mods, inputs

from moonbox.cluster import ClusterError, ModSpec, ShardedGame, entity_digest, place
from moonbox.engine import Game


def run_sharded(shards: int, ticks: int, **options) -> ShardedGame:
    game = ShardedGame(chatty_mods(), shards, seed=11, **options)
    for t in range(1, ticks + 1):
        for name, data in inputs(t):
            game.emit(name, data)
        game.tick()
    return game


def run_one(mods: list[ModSpec], ticks: int) -> Game:
    game = Game(seed=11)
    for m in mods:
        game.load_mod(m.id, m.source)
    for t in range(1, ticks + 1):
        for name, data in inputs(t):
            game.emit(name, data)
        game.tick()
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
    with ShardedGame(quiet, 3, seed=11) as sharded:
        sharded.run(12)
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
    with ShardedGame(twin, 2) as sharded:
        sharded.tick()
        with pytest.raises(ClusterError, match="entity_owner"):
            sharded.combined_hash()


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
