"""A pool: many mods on a bounded number of workers, one bad mod costs the others nothing."""

from __future__ import annotations

import psutil
import pytest

import moonbox
from moonbox import Budget, ConfigError, SandboxClosed
from moonbox.isolation import WorkerPool

COUNTER = "state = state or {n = 0} state.n = state.n + 1 return state.n"


@pytest.fixture
def pool():
    with WorkerPool(2, _test_hooks=True) as p:
        yield p


def test_mods_share_a_bounded_number_of_workers(pool):
    mods = [pool.sandbox(f"mod{i}", host_functions=moonbox.default_bindings()) for i in range(6)]
    assert len(pool.pids) == 2
    assert sorted(len(s.mods) for s in pool.stats()) == [3, 3]
    for i, sb in enumerate(mods):
        assert sb.run(f"state = {{id = {i}}} return add({i}, 1)").values == (i + 1,)
    for i, sb in enumerate(mods):  # each mod its own runtime, even on a shared worker
        assert sb.run("return state.id").values == (i,)
    assert pool.worker_of("mod0").pid == mods[0].pid
    with pytest.raises(ConfigError):
        pool.sandbox("mod0")


def test_a_pool_under_load_with_one_bad_mod(pool):
    good = [pool.sandbox(f"good{i}") for i in range(5)]
    bad = pool.sandbox("bad", Budget(wall_s=0.1), wall_margin_s=1.0)
    chunks = [sb.load(COUNTER, f"@mods/good{i}/main.lua") for i, sb in enumerate(good)]
    bad_things = ["test_abort()", "test_sleep(30)", "test_segfault()", "while true do end"]
    for round_ in range(1, 9):
        for sb, chunk in zip(good, chunks, strict=True):
            assert sb.run(chunk).values == (round_,), sb.mod_id
        outcome = bad.run(bad_things[round_ % len(bad_things)], "@mods/bad/main.lua")
        assert not outcome.ok
        assert outcome.error.chunk == "@mods/bad/main.lua"
    assert sum(s.respawns for s in pool.stats()) == 6  # abort, hang, segfault, twice each
    assert len(pool.pids) == 2
    assert any(sb.restores for sb in good)  # mods pinned with the bad one were restored


def test_closing_the_pool_stops_every_worker(pool):
    sb = pool.sandbox("m")
    pids = pool.pids
    pool.close()
    assert all(not psutil.pid_exists(pid) for pid in pids)
    with pytest.raises(SandboxClosed):
        pool.sandbox("other")
    sb.close()


def test_a_closed_mod_leaves_its_worker_to_the_others(pool):
    a = pool.sandbox("a")
    b = pool.sandbox("b")
    c = pool.sandbox("c")  # on a's worker
    assert c.pid == a.pid
    a.close()
    assert c.run("return 1").values == (1,)
    assert "a" not in pool.worker_of("c").mods
    b.close()
    c.close()
