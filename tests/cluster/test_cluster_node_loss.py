"""A lost machine: two Ray nodes on loopback, one of them killed whole (its raylet and its
workers, by pid) while the game runs. The shard that may restart comes back on the other
node from its checkpoint; the shard whose restarts are used up is reported lost; the rest
of the game goes on, and its world is the one an uninterrupted game of the same mods
makes.

Both nodes listen on 127.0.0.1. Nodes on 127.0.0.2 and 127.0.0.3 are not rewritten by
Ray either, but then its servers (the GCS, each raylet, each worker) listen on every
interface: on 127.0.0.1 they listen on loopback alone, which the test checks.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest
from _mods import LOOSE, assert_sockets_on_loopback, chatty_mods, play

# Ray decides whether its servers may leave loopback when it is first imported.
os.environ["RAY_AUTH_MODE"] = "token"
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
ray = pytest.importorskip("ray", reason="the Ray backend needs ray: pip install -e '.[dev]' "
                                        "(or 'moonbox[ray]')")

from ray.cluster_utils import Cluster  # noqa: E402
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

from moonbox.cluster import (  # noqa: E402
    ClusterError,
    LocalBackend,
    ModSpec,
    RayBackend,
    ShardedGame,
)

# A node is declared dead after about 3 missed checks of 0.5 s (Ray's defaults: ~13 s).
# Loose enough that a loaded machine does not lose the head node by mistake.
HEALTH_CHECKS = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                 "health_check_timeout_ms": 1000, "health_check_failure_threshold": 3}


def started_by_this_test(before: set[int]) -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.pid not in before]


@pytest.fixture
def two_nodes():
    """A head node and a second node, each with its own raylet, both on 127.0.0.1; the
    driver joins the head. Torn down by pid (``Cluster.shutdown`` ends the processes it
    started; never ``ray stop``), and every process the test saw must be gone."""
    if ray.is_initialized():
        pytest.skip("a Ray instance of this process is running")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    seen: dict[int, psutil.Process] = {}
    # No exit hooks: with them Ray would leave its SIGTERM handler and atexit hook in this
    # process after the test; the test ends what it started itself.
    cluster = Cluster(initialize_head=True, shutdown_at_exit=False, head_node_args={
        "num_cpus": 2, "include_dashboard": False, "_system_config": HEALTH_CHECKS})
    try:
        second = cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)

        def track() -> list[psutil.Process]:
            procs = started_by_this_test(before)
            seen.update((p.pid, p) for p in procs)
            return procs

        yield cluster, second, track
        track()
    finally:
        ray.shutdown()
        cluster.shutdown()
        deadline = time.monotonic() + 20
        alive = list(seen.values())
        while alive and time.monotonic() < deadline:
            alive = [p for p in alive if p.is_running()
                     and p.status() != psutil.STATUS_ZOMBIE]
            time.sleep(0.2)
        for p in alive:  # what this test started, by pid, and nothing else
            try:
                p.kill()
            except psutil.Error:
                pass
    assert not alive, f"left running: {[(p.pid, p.name()) for p in alive]}"


def quiet(mods: list[ModSpec]) -> list[ModSpec]:
    """Mods that hear the others but tell no one: their loss changes no other shard."""
    return [ModSpec(f"q{m.id}", m.source.replace('emit("ping"', 'emit("pong"')
                    .replace('"ball', '"qball')) for m in mods]


def test_a_lost_node_is_survived(two_nodes, tmp_path: Path):
    cluster, second, track = two_nodes
    chatty, silent = chatty_mods(4), quiet(chatty_mods(2))
    # Shard 0 on the head, shards 1 and 2 on the second node. Shard 1 may restart (on the
    # head, once its node is gone: the affinity is soft); shard 2 may not.
    placement = {"m0": 0, "m1": 0, "m2": 1, "m3": 1, "qm0": 2, "qm1": 2}
    head_id = cluster.head_node.node_id
    on = {i: NodeAffinitySchedulingStrategy(node, soft=True)
          for i, node in ((0, head_id), (1, second.node_id), (2, second.node_id))}
    backend = RayBackend(max_restarts=2, shard_options={
        0: {"scheduling_strategy": on[0]}, 1: {"scheduling_strategy": on[1]},
        2: {"scheduling_strategy": on[2], "max_restarts": 0}})
    raylet = psutil.Process(second.all_processes["raylet"][0].process.pid)
    with ShardedGame(chatty + silent, 3, seed=11, budget=LOOSE, backend=backend,
                     placement=placement, checkpoint_dir=tmp_path / "cp", checkpoint_every=5,
                     restart_timeout_s=30) as game:
        play(game, 1, 12)
        pids = {i: f["pid"] for i, f in game.figures().items()}
        on_second = {p.pid for p in raylet.children(recursive=True)}
        assert pids[0] not in on_second and {pids[1], pids[2]} <= on_second

        assert_sockets_on_loopback([psutil.Process(), *track()])

        # The machine goes: its raylet and every process under it, at once.
        victims = [raylet, *raylet.children(recursive=True)]
        for p in victims:
            p.kill()
        play(game, 13, 20)

        assert game.tick_count == 20 and game.live == [0, 1]
        assert game.lost == {2: ["qm0", "qm1"]}
        [recovery] = game.recoveries
        assert recovery["down"] == [1, 2] and recovery["from_tick"] == 10
        assert recovery["lost"] == [2]
        info = game.info()
        assert info[1]["restored_from"] == 10 and info[1]["pid"] != pids[1]
        head_raylet = psutil.Process(cluster.head_node.all_processes["raylet"][0].process.pid)
        assert info[1]["pid"] in {p.pid for p in head_raylet.children(recursive=True)}
        assert game.figures()[1]["restarts"] == 1
        lost_hash = game.combined_hash()
        track()

    # The same mods but the lost shard's, never interrupted: the same world.
    with ShardedGame(chatty, 2, seed=11, budget=LOOSE, backend=LocalBackend(),
                     placement={k: v for k, v in placement.items() if v < 2}) as want:
        play(want, 1, 20)
        assert lost_hash == want.combined_hash()


def test_shard_options_cannot_make_ray_retry_calls():
    with pytest.raises(ClusterError, match="config"):
        RayBackend(shard_options={1: {"max_task_retries": 2}})
