"""Mod packages in an isolated game: reloads dry-run in a worker of their own, a version that
crashes its worker is refused like any other, and `moonbox dev --isolate` shows the workers."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from mod_folders import write_mod

from moonbox.cli import cli
from moonbox.engine import Game
from moonbox.isolation import WorkerPool
from moonbox.mods import ModHost
from moonbox.mods._dev import DevSession, describe_workers, render

V1 = """
local n = state_get("n") or 0
every(1, function() n = n + 1; state_set("n", n); report("v1 " .. n) end)
"""
V2 = """
every(1, function() state_set("n", (state_get("n") or 0) + 10); report("v2") end)
function on_reload(old) state_set("migrated_from", old.n) end
"""


pytestmark = pytest.mark.usefixtures("no_workers_left_behind")


def _lines(game, ticks):
    return [line for _ in range(ticks) for _, line in game.tick().reports]


def test_reloads_dry_run_in_a_worker_and_carry_state(mods_dir):
    folder = write_mod(mods_dir, "w", V1)
    with WorkerPool(2, _test_hooks=True) as pool, \
            Game(isolation="process", pool=pool) as game:
        host = ModHost(game, mods_dir)
        try:
            assert host.load_all()[0].ok
            live_pids = set(pool.pids)
            assert _lines(game, 3) == ["v1 1", "v1 2", "v1 3"]
            # A version that crashes its worker at load: refused in its dry run; the live
            # version and the live workers never notice.
            (folder / "main.lua").write_text('test_segfault()\n' + V2)
            refused = host.reload_folder("w")
            assert not refused.ok and "crashed" in refused.error and "SIGSEGV" in refused.error
            assert host.mods["w"].status == "failed_reload"
            assert set(pool.pids) == live_pids
            assert _lines(game, 1) == ["v1 4"]
            (folder / "main.lua").write_text(V2)
            assert host.reload_folder("w").ok
            assert _lines(game, 1) == ["v2"]
            assert game.mod("w").state == {"n": 14, "migrated_from": 4}
            assert host._dry_pool is not None and host._dry_pool.pids
        finally:
            host.close()
        assert host._dry_pool is None


def test_dev_isolate_prints_the_workers(mods_dir):
    write_mod(mods_dir, "hello", 'every(2, function(t) report("hi " .. t) end)')
    result = CliRunner().invoke(cli, ["dev", str(mods_dir), "--isolate", "--workers", "1",
                                      "--worker-memory", "768MB", "--ticks", "4",
                                      "--tps", "500", "--no-store"])
    assert result.exit_code == 0, result.output
    assert "hi 4" in result.output
    (line,) = [x for x in result.output.splitlines() if x.startswith("worker ")]
    assert "rss " in line and "MiB" in line and "mods hello" in line and "respawns 0" in line


def test_dev_isolation_options_are_checked(mods_dir):
    write_mod(mods_dir, "hello", 'every(2, function(t) report("hi " .. t) end)')
    runner = CliRunner()
    result = runner.invoke(cli, ["dev", str(mods_dir), "--once", "--no-store", "--workers", "2"])
    assert result.exit_code == 2 and "need --isolate" in result.output
    result = runner.invoke(cli, ["dev", str(mods_dir), "--once", "--no-store", "--isolate",
                                 "--game", "moonbox.world:World"])
    assert result.exit_code == 2 and "--isolate" in result.output
    result = runner.invoke(cli, ["dev", str(mods_dir), "--once", "--no-store", "--isolate",
                                 "--worker-memory", "lots"])
    assert result.exit_code == 2


def test_the_live_view_shows_each_mods_worker(mods_dir):
    from rich.console import Console

    write_mod(mods_dir, "alpha", 'every(1, function() report("a") end)')
    write_mod(mods_dir, "beta", 'every(1, function() end)')
    with Game(isolation="process", workers=1) as game:
        host = ModHost(game, mods_dir)
        session = DevSession(host, tick_s=0.0, watch=False)
        try:
            session.start()
            session.run(ticks=2)
            console = Console(record=True, width=160)
            console.print(render(session))
            text = console.export_text()
            (worker_line, spare_line) = describe_workers(game)
            spares = game.pool.spare_pids
        finally:
            session.close()
    header = next(line for line in text.splitlines() if "restores" in line)
    assert all(column in header for column in ("worker", "rss", "cpu"))
    pid = str(game.mod("alpha").stats.worker.pid)
    rows = [line for line in text.splitlines() if "alpha" in line or "beta" in line]
    assert sum(pid in row and "MiB" in row for row in rows) >= 2
    assert "workers" in text and "mods alpha, beta" in text
    assert worker_line.startswith(f"worker {pid}: rss ")
    assert spare_line.startswith(f"spare {spares[0]}: booted")
