"""The Ray backend: one actor per shard on a one-node Ray instance on loopback, the same
hash as in process, and a SIGKILLed shard brought back from its checkpoint."""

from __future__ import annotations

import os
import signal
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

from moonbox.cluster import LocalBackend, RayBackend, ShardedGame, start_local_ray  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    """One Ray instance for the module: 2 CPUs, no dashboard, loopback only. It is ended
    with ray.shutdown() (never `ray stop`), and every process it started must be gone."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    start_local_ray(num_cpus=2)
    started = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    try:
        yield started
    finally:
        ray.shutdown()
        deadline = time.monotonic() + 20
        alive = started
        while alive and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = [p for p in psutil.Process().children(recursive=True)
                     if p.pid not in before]
        for p in alive:  # what this module started, by pid, and nothing else
            try:
                p.kill()
            except psutil.Error:
                pass
        assert not alive, f"left running: {[(p.pid, p.name()) for p in alive]}"


def local_hash(ticks: int) -> str:
    with ShardedGame(chatty_mods(), 2, seed=11, budget=LOOSE, backend=LocalBackend()) as game:
        play(game, 1, ticks)
        return game.combined_hash()


def test_every_socket_stays_on_loopback(local_ray):
    with ShardedGame(chatty_mods(), 2, seed=11, budget=LOOSE, backend=RayBackend()) as game:
        game.tick()
        pids = {f["pid"] for f in game.figures().values()}
        procs = [psutil.Process(), *psutil.Process().children(recursive=True)]
        assert pids <= {p.pid for p in procs}
        assert_sockets_on_loopback(procs)


def test_ray_and_local_give_the_same_world(local_ray):
    with ShardedGame(chatty_mods(), 2, seed=11, budget=LOOSE, backend=RayBackend()) as game:
        play(game, 1, 20)
        info = game.info()
        assert len({i["pid"] for i in info.values()}) == 2  # one actor per shard
        assert os.getpid() not in {i["pid"] for i in info.values()}
        assert game.combined_hash() == local_hash(20)


def test_a_killed_shard_comes_back_from_its_checkpoint(local_ray, tmp_path: Path):
    want = local_hash(20)
    backend = RayBackend(max_restarts=2)
    with ShardedGame(chatty_mods(), 2, seed=11, budget=LOOSE, backend=backend,
                     checkpoint_dir=tmp_path, checkpoint_every=5) as game:
        play(game, 1, 12)
        old = game.info()[1]["pid"]
        os.kill(old, signal.SIGKILL)
        play(game, 13, 20)
        assert game.tick_count == 20
        [recovery] = game.recoveries
        assert recovery["down"] == [1] and recovery["from_tick"] == 10 and not recovery["lost"]
        info = game.info()[1]
        assert info["pid"] != old and info["restored_from"] == 10
        assert game.figures()[1]["restarts"] == 1
        assert game.combined_hash() == want


def test_a_shard_out_of_restarts_is_lost_and_the_rest_goes_on(local_ray, tmp_path: Path):
    with ShardedGame(chatty_mods(), 2, seed=11, budget=LOOSE,
                     backend=RayBackend(max_restarts=0), checkpoint_dir=tmp_path,
                     checkpoint_every=5) as game:
        play(game, 1, 7)
        os.kill(game.info()[0]["pid"], signal.SIGKILL)
        play(game, 8, 10)
        assert game.live == [1] and game.lost == {0: [m.id for m in game.placed[0]]}
        assert game.tick_count == 10 and game.recoveries[0]["lost"] == [0]
        assert game.figures()[1]["tick"] == 10
