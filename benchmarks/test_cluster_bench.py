"""Sharded games: ticks per second of 2,000 full-handler mods on 1 and 2 shards, in process
and on Ray, and what the coordinator costs per shard per tick.

    pytest benchmarks/test_cluster_bench.py --benchmark-only
    python benchmarks/test_cluster_bench.py [MODS] [TICKS]    # a plain report
    python benchmarks/test_cluster_bench.py --write DIR [MODS]  # the mods as a folder, for
    moonbox cluster DIR --shards 2 --ticks 40 --json            # the same figures per run

The mods are the engine benchmark's ``full`` handler (one ``coreai_world_pos`` and one
``coreai_world_change`` per tick), each spawning its own entity when it loads. The Ray
runs use a one-node Ray instance on loopback with 2 CPUs, each shard an actor of 0.5
CPU. The local backend ticks its shards one after the other in this process: 2 shards
there cost what 1 does, plus the coordinator. No checkpoints are taken.

The coordinator's cost is taken per tick as the tick's wall time less the shards' own
tick time (measured inside each shard; the slowest's on Ray, where they run at once, all
of theirs in process): the calls, their arguments and answers, and forwarding events. Divided by the shards, it is the cost per shard per tick;
the 1-mod runs show it alone.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from moonbox.cluster import LocalBackend, ModSpec, RayBackend, ShardedGame, start_local_ray

FULL = """local me = "e-{id}"
coreai_world_spawn{{prefab = "cube", name = me}}
on("tick", function(t)
  local x = coreai_world_pos(me)
  if x then coreai_world_change(me, {{x = (x + 1) % 100}}) end
end)"""
EMPTY = 'on("tick", function(t) end)'
MODS = 2000
WARMUP_TICKS = 3  # the spawns, and the first call of each handler
ROUNDS = 20


def full_mods(n: int) -> list[ModSpec]:
    return [ModSpec(f"m{i}", FULL.format(id=f"m{i}")) for i in range(n)]


def write_mods(folder: Path, n: int = MODS) -> None:
    """The ``n`` mods as ``folder/m<i>.lua`` files (what ``moonbox cluster`` reads)."""
    folder.mkdir(parents=True, exist_ok=True)
    for m in full_mods(n):
        (folder / f"{m.id}.lua").write_text(m.source)


def make(backend: str, shards: int, mods: list[ModSpec]) -> ShardedGame:
    game = ShardedGame(mods, shards, seed=1,
                       backend=RayBackend() if backend == "ray" else LocalBackend())
    game.run(WARMUP_TICKS)
    return game


@pytest.fixture(scope="module")
def ray_instance() -> Iterator[None]:
    """One local Ray instance for the module (loopback, 2 CPUs), ended with
    ``ray.shutdown()``."""
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray = pytest.importorskip("ray")
    start_local_ray(num_cpus=2)
    yield
    ray.shutdown()


def _backend(request: pytest.FixtureRequest, backend: str) -> None:
    if backend == "ray":
        request.getfixturevalue("ray_instance")


def _extra(benchmark: Any, game: ShardedGame) -> None:
    seen = game.observe()
    benchmark.extra_info.update({
        "shard_ms_per_tick": [s["ms_per_tick"] for s in seen["shards"]],
        "skew_ms": seen["skew_ms"],
        "overhead_ms_per_shard_per_tick": seen["overhead_ms_per_shard_per_tick"]})


@pytest.mark.parametrize("shards", [1, 2])
@pytest.mark.parametrize("backend", ["local", "ray"])
def test_tick_of_2000_full_mods(benchmark: Any, request: pytest.FixtureRequest,
                                backend: str, shards: int) -> None:
    """One game tick of 2,000 full-handler mods split over the shards (ticks/s: 1 / mean)."""
    benchmark.group = f"one tick of {MODS} full-handler mods"
    _backend(request, backend)
    with make(backend, shards, full_mods(MODS)) as game:
        answers = benchmark.pedantic(game.tick, rounds=ROUNDS, iterations=1)
        assert sum(a["calls"] for a in answers.values()) == MODS
        assert not any(a["failures"] for a in answers.values())
        _extra(benchmark, game)


@pytest.mark.parametrize("shards", [1, 2, 4])
@pytest.mark.parametrize("backend", ["local", "ray"])
def test_coordinator_cost(benchmark: Any, request: pytest.FixtureRequest, backend: str,
                          shards: int) -> None:
    """One game tick of shards holding one empty-handler mod each: the coordinator's cost
    and nothing else (divide by the shards: per shard per tick)."""
    benchmark.group = "coordinator: a tick of 1-mod shards"
    _backend(request, backend)
    mods = [ModSpec(f"m{i}", EMPTY) for i in range(shards)]
    with make(backend, shards, mods) as game:
        benchmark.pedantic(game.tick, rounds=200, iterations=1)
        _extra(benchmark, game)


def report(mods: int = MODS, ticks: int = 40) -> None:
    """Print ticks/s of ``mods`` full-handler mods on 1 and 2 shards, local and Ray, and the
    coordinator's cost per shard per tick (each run after its warm-up ticks)."""
    start_local_ray(num_cpus=2)
    import ray

    try:
        for backend in ("local", "ray"):
            for shards in (1, 2):
                with make(backend, shards, full_mods(mods)) as game:
                    first = len(game.tick_wall_ms)
                    own_sum, cpu_sum = [0.0] * shards, [0.0] * shards
                    wall0, cpu0 = time.perf_counter(), time.process_time()
                    for _ in range(ticks):
                        for i, answer in game.tick().items():
                            own_sum[i] += answer["ms"]
                            cpu_sum[i] += answer["cpu_ms"]
                    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
                    own = [round(ms / ticks, 1) for ms in own_sum]
                    own_cpu = [round(ms / ticks, 1) for ms in cpu_sum]
                    over = list(game.overhead_ms)[first:]
                    print(f"{backend:5} {shards} shard(s), {mods} mods, {ticks} ticks: "
                          f"{ticks / wall:6.2f} ticks/s ({wall / ticks * 1000:7.1f} ms per "
                          f"tick; driver CPU {cpu / ticks * 1000:6.1f} ms); shards' own ms "
                          f"per tick {own}, their CPU ms per tick {own_cpu}; coordinator "
                          f"{sum(over) / len(over) / shards:.3f} ms per shard per tick")
        for backend in ("local", "ray"):
            for shards in (1, 2, 4):
                with make(backend, shards, [ModSpec(f"m{i}", EMPTY)
                                            for i in range(shards)]) as game:
                    first = len(game.tick_wall_ms)
                    game.run(500)
                    wall = list(game.tick_wall_ms)[first:]
                    over = list(game.overhead_ms)[first:]
                    print(f"{backend:5} {shards} shard(s) of 1 empty mod: "
                          f"{sum(wall) / len(wall):.3f} ms per tick; coordinator "
                          f"{sum(over) / len(over) / shards:.3f} ms per shard per tick "
                          f"(its own work {sum(list(game.coordinator_ms)[first:]) / len(wall):.4f}"
                          " ms per tick)")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    if sys.argv[1:2] == ["--write"]:
        write_mods(Path(sys.argv[2]), *(int(a) for a in sys.argv[3:4]))
    else:
        report(*(int(a) for a in sys.argv[1:3]))
