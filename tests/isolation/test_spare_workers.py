"""Spare workers: a pool keeps a process booted, so a lost worker is replaced by one that
has finished starting instead of a call (and a game's tick) waiting for a process start."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from moonbox import ConfigError, SandboxClosed
from moonbox.engine import Game
from moonbox.isolation import WorkerPool


def _wait_ready(pool: WorkerPool) -> None:
    """Until each spare has sent its ready frame (waiting is not needed for correctness:
    adopting a spare still booting waits for it; it makes the tests' pids exact)."""
    import select

    for boot in pool._spares._spares:
        poller = select.poll()
        poller.register(boot.pipes.read_fd, select.POLLIN)
        assert poller.poll(30_000), "a spare never became ready"


def test_a_pool_starts_nothing_before_its_first_mod():
    before = {p.pid for p in psutil.Process().children()}
    with WorkerPool(2) as pool:
        assert pool.pids == () and pool.spare_pids == ()
        assert {p.pid for p in psutil.Process().children()} == before


def test_the_first_worker_starts_one_spare_beside_it():
    with WorkerPool(2) as pool:
        sb = pool.sandbox("a")
        assert len(pool.pids) == 1 and len(pool.spare_pids) == 1
        assert set(pool.pids).isdisjoint(pool.spare_pids)
        assert sb.run("return 1").values == (1,)
        spare = pool.spare_pids[0]
        pool.sandbox("b")  # the second worker takes the spare over; another boots
        assert spare in pool.pids and len(pool.spare_pids) == 1
        assert spare not in pool.spare_pids


@pytest.mark.parametrize("hook", ["test_segfault()", "test_abort()"])
def test_a_lost_worker_is_replaced_by_the_spare(hook):
    with WorkerPool(1, _test_hooks=True) as pool:
        sb = pool.sandbox("m")
        assert sb.run("state = 41 return 1").values == (1,)
        lost = sb.pid
        _wait_ready(pool)
        [spare] = pool.spare_pids
        out = sb.run(hook)
        assert out.status == "error" and out.error.kind == "crashed"
        assert sb.pid == spare  # the spare took over in the call that lost the worker
        assert not psutil.pid_exists(lost)
        assert sb.run("return state + 1").values == (42,)  # restored from the snapshot
        assert len(pool.spare_pids) == 1 and spare not in pool.spare_pids


def _kill_and_wait(pid: int) -> None:
    """SIGKILL a child process and wait until it is dead: a zombie, or already reaped (the
    pool may notice the death and reap it first)."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        assert time.monotonic() < deadline, "the killed process never died"
        time.sleep(0.01)


def test_a_spare_that_died_waiting_is_not_adopted():
    with WorkerPool(1, _test_hooks=True) as pool:
        sb = pool.sandbox("m")
        _wait_ready(pool)
        [spare] = pool.spare_pids
        _kill_and_wait(spare)
        assert sb.run("test_abort()").error.kind == "crashed"
        assert sb.pid not in (None, spare)
        assert not psutil.pid_exists(spare)  # reaped: no zombie left
        assert sb.run("return 2").values == (2,)


def test_a_spare_that_dies_before_it_is_ready_is_replaced_by_a_fresh_process(monkeypatch, caplog):
    with WorkerPool(1, _test_hooks=True) as pool:
        sb = pool.sandbox("m")
        spares = pool._spares
        spares._spares.pop().discard()
        spares._fill()  # a spare just started: it cannot have said ready yet
        [boot] = spares._spares
        # Killed before it said ready, and past take()'s check that it is alive: its
        # adoption fails, and a process started then takes over.
        monkeypatch.setattr(boot.proc, "poll", lambda: None)
        _kill_and_wait(boot.proc.pid)
        assert sb.run("test_abort()").error.kind == "crashed"
        assert sb.pid not in (None, boot.proc.pid)
        assert "a spare worker could not take over" in caplog.text
        assert sb.run("return 3").values == (3,)
        monkeypatch.undo()
    assert not psutil.pid_exists(boot.proc.pid)


def test_no_spares_when_asked_for_none():
    with WorkerPool(1, spare_workers=0, _test_hooks=True) as pool:
        sb = pool.sandbox("m")
        assert pool.spare_pids == ()
        first = sb.pid
        assert sb.run("test_abort()").error.kind == "crashed"
        assert sb.pid not in (None, first)
        assert pool.spare_pids == ()


def test_closing_the_pool_kills_and_reaps_the_spares():
    pool = WorkerPool(1)
    pool.sandbox("m")
    spares = pool.spare_pids
    assert spares
    pool.close()
    assert all(not psutil.pid_exists(pid) for pid in spares)
    assert pool.spare_pids == ()
    with pytest.raises(SandboxClosed):
        pool._spares.take()


def test_a_negative_spare_count_is_refused():
    with pytest.raises(ConfigError):
        WorkerPool(1, spare_workers=-1)


def test_a_game_goes_on_with_the_spare_after_a_crash():
    """The tick after a crash is served by the spare: no process starts in that tick."""
    with WorkerPool(1, _test_hooks=True) as pool, Game(seed=1, isolation="process",
                                                        pool=pool) as game:
        game.load_mod("good", 'on("tick", function(t) report(t) end)')
        game.load_mod("bad", 'on("tick", function(t) if t == 2 then test_segfault() end end)')
        game.tick()
        _wait_ready(pool)
        [spare] = pool.spare_pids
        crashed = game.tick()
        assert [f.mod for f in crashed.failures] == ["bad"]
        after = game.tick()
        assert not after.failures
        assert pool.pids == (spare,)
        assert [line for mod, line in after.reports if mod == "good"] == ["3"]


def test_a_spare_is_still_handed_over_when_the_next_one_cannot_start(monkeypatch, caplog):
    from moonbox.isolation import _process

    with WorkerPool(1, _test_hooks=True) as pool:
        sb = pool.sandbox("m")
        _wait_ready(pool)
        [spare] = pool.spare_pids

        def no_process(*args, **kwargs):
            raise BlockingIOError(11, "Resource temporarily unavailable")

        monkeypatch.setattr(_process.subprocess, "Popen", no_process)
        assert sb.run("test_abort()").error.kind == "crashed"
        assert sb.pid == spare  # the spare took over; the one to follow it could not start
        assert "a spare worker could not be started" in caplog.text
        assert pool.spare_pids == ()
        monkeypatch.undo()
        assert sb.run("return 5").values == (5,)


def test_a_spare_booted_with_an_older_boot_script_is_not_adopted(monkeypatch):
    from moonbox.isolation import _process

    with WorkerPool(1, _test_hooks=True) as pool:
        sb = pool.sandbox("m")
        _wait_ready(pool)
        [spare] = pool.spare_pids
        monkeypatch.setattr(_process, "_BOOT", _process._BOOT + "# changed\n")
        assert sb.run("test_abort()").error.kind == "crashed"
        assert sb.pid not in (None, spare)
        assert not psutil.pid_exists(spare)
        assert sb.run("return 6").values == (6,)


def test_spares_stop_booting_after_failures_in_a_row_until_a_worker_starts_again():
    from moonbox.isolation._process import SpareWorkers

    spares = SpareWorkers(1, memory_limit_bytes=0)
    try:
        first = spares.take()
        assert first is None and len(spares.pids) == 1  # none yet; one boots now
        for _ in range(SpareWorkers.MAX_BOOT_FAILURES):
            boot = spares.take()
            assert boot is not None
            boot.discard()
            spares.failed()
        last = spares.take()  # booted before the last failure was known
        assert last is not None and spares.pids == ()  # no more booted ahead
        last.discard()
        spares.failed()
        assert spares.take() is None and spares.pids == ()
        spares.succeeded()  # a worker started after all
        assert spares.take() is None and len(spares.pids) == 1
    finally:
        spares.close()


def test_a_worker_closed_while_it_starts_reaps_its_process(monkeypatch):
    from moonbox.isolation._process import WorkerProcess

    worker = WorkerProcess(memory_limit_bytes=0)
    receive = WorkerProcess.receive

    def closed_meanwhile(self, deadline):
        self._closed = True  # another thread closed it while the process started
        return receive(self, deadline)

    monkeypatch.setattr(WorkerProcess, "receive", closed_meanwhile)
    proc = None
    try:
        worker._closed = False
        with pytest.raises(SandboxClosed):
            worker.respawn()
        proc = worker._proc
        assert worker.down and proc.poll() is not None  # reaped, not left running
    finally:
        monkeypatch.undo()
        worker.close()


def test_a_game_sets_its_own_pools_spares():
    with Game(isolation="process", workers=1, spare_workers=0) as game:
        game.load_mod("m", 'on("tick", function() end)')
        assert game.pool.spare_pids == ()
    with Game(isolation="process", workers=1) as game:
        game.load_mod("m", 'on("tick", function() end)')
        assert len(game.pool.spare_pids) == 1
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError):
            Game(isolation="process", spare_workers=bad)
    with pytest.raises(ConfigError):
        Game(spare_workers=1)  # an option of isolation="process"
    with WorkerPool(1) as pool, pytest.raises(ConfigError):
        Game(isolation="process", pool=pool, spare_workers=0)  # the pool has its own
