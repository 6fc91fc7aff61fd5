"""The game thread's side: what is kept of each tick and how it is summed up (no server)."""

from __future__ import annotations

import os

import pytest

from moonbox.cluster import LocalBackend, ModSpec, ShardedGame, ShardsDown
from moonbox.dashboard import _recorder
from moonbox.dashboard._recorder import MAX_LOG_PER_TICK, Recorder
from moonbox.engine import Game, TickReport

NEEDS_SERVER = False  # the recorder runs without the dashboard's packages


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def game():
    with Game(seed=1) as g:
        yield g


def test_tick_health_percentiles_and_budget(game):
    clock = Clock()
    rec = Recorder(game, tick_budget_s=0.008, clock=clock)
    for ms in range(1, 11):  # ticks of 1..10 ms, one a second
        clock.now += 1
        rec.record(TickReport(ms), ms / 1000)
    rec.maybe_publish(force=True)
    health = rec.published.summary["health"]
    assert (health["p50_ms"], health["p90_ms"], health["max_ms"]) == (5, 9, 10)
    assert health["over_budget"] == 2 and health["ticks"] == 10 and health["budget_ms"] == 8
    assert health["last_ms"] == 10
    assert sum(p["ticks"] for p in health["series"]) == 10
    # a minute later the percentiles forget them; the chart keeps them for its minutes
    clock.now += 61
    rec.record(TickReport(11), 0.002)
    rec.maybe_publish(force=True)
    health = rec.published.summary["health"]
    assert (health["ticks"], health["p90_ms"]) == (1, 2)
    assert sum(p["ticks"] for p in health["series"]) == 11
    clock.now += _recorder.HISTORY_S + 10
    rec.record(TickReport(12), 0.001)
    rec.maybe_publish(force=True)
    assert sum(p["ticks"] for p in rec.published.summary["health"]["series"]) == 1


def test_without_elapsed_a_tick_costs_what_its_calls_cost(game):
    game.load_mod("m", "every(1, function() end)")
    rec = Recorder(game)
    before = game.mod("m").stats.wall_s
    report = game.tick()
    rec.record(report, None)
    spent = game.mod("m").stats.wall_s - before
    assert rec.published.summary["tick"] == 0  # not published yet
    rec.maybe_publish(force=True)
    assert rec.published.summary["health"]["last_ms"] == pytest.approx(spent * 1000, abs=1e-3)


def test_cost_per_tick_is_counted_over_the_window_and_sorted(game):
    game.load_mod("cheap", "every(1, function() end)")
    game.load_mod("busy", "every(1, function() for i = 1, 1000 do end end)")
    game.load_mod("idle", "")
    clock = Clock()
    rec = Recorder(game, clock=clock)
    for _ in range(10):
        clock.now += 0.5
        rec.record(game.tick(), None)
        rec.maybe_publish(force=True)
    cost = rec.published.summary["cost"]
    # Sorted by time first: which of busy and cheap took longer is up to the machine's load,
    # so the test checks the order, and that idle (which never runs) comes last.
    keys = [(r["ms_per_tick"], r["steps_per_tick"]) for r in cost]
    assert keys == sorted(keys, reverse=True)
    assert cost[-1]["mod"] == "idle"
    (busy,) = [r for r in cost if r["mod"] == "busy"]
    assert busy["calls_per_tick"] == 1.0 and busy["steps_per_tick"] > 1000
    assert cost[-1]["calls_per_tick"] == 0.0 and cost[-1]["steps_per_tick"] == 0.0


def test_the_log_keeps_a_bounded_share_of_each_tick(game):
    game.load_mod("chatty", "every(1, function() for i = 1, 300 do report('line ' .. i) end end)")
    rec = Recorder(game)
    rec.record(game.tick(), None)
    entries = rec.log_since(0, limit=1000)
    assert len(entries) == MAX_LOG_PER_TICK + 1
    assert entries[-1]["kind"] == "dashboard" and "100 more entries" in entries[-1]["message"]
    assert [e["seq"] for e in entries] == list(range(1, len(entries) + 1))
    assert rec.log_since(entries[-2]["seq"]) == entries[-1:]
    assert rec.log_since(0, kind="report", limit=3)[-1]["message"] == f"line {MAX_LOG_PER_TICK}"


def test_errors_are_grouped_and_their_source_found(game):
    source = "on('tick', function(t)\n  error('bad ' .. (t % 2))\nend)\n"
    game.load_mod("m", source)
    looked_up = []

    def sources(chunk):
        looked_up.append(chunk)
        return source

    rec = Recorder(game, sources=sources)
    for _ in range(4):
        rec.record(game.tick(), None)
    rec.maybe_publish(force=True)
    groups = rec.published.errors
    assert [g["count"] for g in groups] == [2, 2]  # 'bad 0' and 'bad 1'
    assert {g["message"] for g in groups} == {"bad 0", "bad 1"}
    assert groups[0]["source"]["lines"][1] == {"line": 2, "text": "  error('bad ' .. (t % 2))"}
    assert looked_up == ["@mods/m/main.lua"] * 2  # once per group


def test_a_failing_source_lookup_leaves_the_detail_without_lines(game):
    game.load_mod("m", "on('tick', function() error('x') end)")

    def sources(chunk):
        raise OSError("gone")

    rec = Recorder(game, sources=sources)
    rec.record(game.tick(), None)
    rec.maybe_publish(force=True)
    assert rec.published.errors[0]["source"] is None


def test_error_groups_are_bounded(game, monkeypatch):
    monkeypatch.setattr(_recorder, "MAX_ERROR_GROUPS", 3)
    game.load_mod("m", "on('tick', function(t) error('tick ' .. t) end)")
    rec = Recorder(game)
    for _ in range(5):
        rec.record(game.tick(), None)
    rec.maybe_publish(force=True)
    assert [g["message"] for g in rec.published.errors] == ["tick 5", "tick 4", "tick 3"]


def test_the_world_view_is_capped(game, monkeypatch):
    monkeypatch.setattr(_recorder, "MAX_ENTITIES", 4)
    game.load_mod("m", "for i = 1, 10 do coreai_world_spawn{prefab = 'cube', x = i} end")
    rec = Recorder(game)
    rec.record(game.tick(), None)
    rec.maybe_publish(force=True)
    world = rec.published.world
    assert (world["count"], world["shown"], len(world["entities"])) == (10, 4, 4)
    assert [e["x"] for e in world["entities"]] == [1, 2, 3, 4]


def test_published_views_are_not_changed_by_later_ticks(game):
    game.load_mod("m", "on('tick', function() error('x') end)")
    rec = Recorder(game)
    rec.record(game.tick(), None)
    rec.maybe_publish(force=True)
    first = rec.published
    count = first.errors[0]["count"]
    for _ in range(3):
        rec.record(game.tick(), None)
    rec.maybe_publish(force=True)
    assert first.errors[0]["count"] == count and rec.published.errors[0]["count"] == 4
    assert first.summary["tick"] == 1 and rec.published.version > first.version


class LosingBackend(LocalBackend):
    """In process, but shard 1 dies at tick ``dies_at`` and never comes back (as a Ray
    actor out of restarts)."""

    def __init__(self, dies_at: int) -> None:
        super().__init__()
        self.dies_at = dies_at

    def call(self, method, args):
        if method == "tick" and 1 in args and self._shards[1].game.tick_count + 1 >= \
                self.dies_at:
            results = super().call(method, {i: a for i, a in args.items() if i != 1})
            raise ShardsDown([1], results)
        return super().call(method, args)

    def wait_up(self, index, timeout_s):
        return index != 1


def test_shards_are_shown_as_workers_are(game, tmp_path):
    clock = Clock()
    mods = [ModSpec(f"m{k}", f'coreai_world_spawn{{prefab = "cube", name = "b{k}"}}\n'
                             'on("tick", function(t) end)') for k in range(3)]
    sharded = ShardedGame(mods, 2, seed=1, backend=LosingBackend(dies_at=4),
                          checkpoint_dir=tmp_path / "cp", checkpoint_every=2)
    try:
        rec = Recorder(game, shards=sharded, clock=clock)
        assert rec.published.summary["shards"]["shards"][0]["tick"] == 0
        for _ in range(3):
            sharded.tick()
            rec.record(game.tick(), 0.001)
        clock.now += _recorder.SLOW_INTERVAL_S  # shard figures are read once a second
        rec.maybe_publish(force=True)
        shards = rec.published.summary["shards"]
        assert shards["sharded"] is True and shards["backend"] == "local"
        assert shards["tick"] == 3 and shards["checkpoints"] == 2
        assert shards["last_checkpoint"]["tick"] == 2 and shards["last_checkpoint"]["bytes"] > 0
        assert [s["shard"] for s in shards["shards"]] == [0, 1]
        first = shards["shards"][0]
        assert first["status"] == "running" and first["mod_ids"] == ["m0", "m2"]
        assert first["tick"] == 3 and first["ms_max"] >= first["ms_per_tick"] > 0
        assert first["restarts"] == 0 and first["pid"] == os.getpid()
        assert shards["skew_max_ms"] >= shards["skew_ms"] >= 0
        assert shards["overhead_ms_per_shard_per_tick"] >= 0
        sharded.tick()  # shard 1 dies: lost, the game goes back to tick 2 and on without it
        clock.now += _recorder.SLOW_INTERVAL_S
        rec.maybe_publish(force=True)
        shards = rec.published.summary["shards"]
        assert shards["lost"] == {"1": ["m1"]} and shards["tick"] == 4
        assert shards["shards"][1] == {"shard": 1, "status": "lost", "pid": None, "mods": 1,
                                       "mod_ids": ["m1"]}
        [recovery] = shards["recoveries"]
        assert recovery["down"] == [1] and recovery["from_tick"] == 2 and recovery["lost"] == [1]
        assert shards["shards"][0]["restored_from"] == 2
    finally:
        sharded.close()


def test_a_game_not_sharded_has_no_shards(game):
    rec = Recorder(game)
    assert rec.published.summary["shards"] == {"sharded": False, "shards": []}
