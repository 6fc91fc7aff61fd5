"""The watcher and `moonbox dev`: saves become reloads, bursts become one; a damaged
versions store is read-only for the session."""

from __future__ import annotations

import random
import time

from click.testing import CliRunner
from mod_folders import write_mod
from rich.console import Console

from moonbox.cli import cli
from moonbox.engine import Game
from moonbox.mods import ModHost
from moonbox.mods._dev import DevSession, render
from moonbox.store import Store


def _wait(session, predicate, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        session.step()
        if predicate():
            return True
    return False


def test_a_save_is_swapped_in_and_a_burst_is_one_reload(mods_dir):
    folder = write_mod(mods_dir, "w", 'every(1, function() report("v0") end)')
    with Game() as game:
        host = ModHost(game, mods_dir)
        session = DevSession(host, tick_s=0.01, debounce_ms=300, step_ms=30)
        try:
            assert all(r.ok for r in session.start())
            for i in range(1, 11):  # an editor writing in a burst, some writes half-done
                text = f'every(1, function() report("v{i}") end)'
                (folder / "main.lua").write_text(text[: len(text) // 2] if i % 2 else text)
            assert _wait(session, lambda: any(line == "v10" for _, _, line in session.reports))
            live = [r for r in session.results[1:] if r.ok and not r.unchanged]
            assert 1 <= len(live) <= 3  # grouped, not one reload per write
            assert host.mods["w"].status == "running"
            # A broken save: refused, the old version goes on ticking.
            (folder / "main.lua").write_text("every(1, function(\n")
            assert _wait(session, lambda: host.mods["w"].status == "failed_reload")
            assert "mods/w/main.lua:" in host.errors[-1]
            n = len(session.reports)
            assert _wait(session, lambda: len(session.reports) > n)
            assert session.reports[-1][2] == "v10"
        finally:
            session.close()


def test_dev_once_and_ticks(mods_dir, tmp_path):
    write_mod(mods_dir, "hello", 'every(2, function(t) report("hi " .. t) end)')
    runner = CliRunner()
    store = tmp_path / "v.db"
    result = runner.invoke(cli, ["dev", str(mods_dir), "--once", "--store", str(store)])
    assert result.exit_code == 0, result.output
    assert "hello: live" in result.output
    result = runner.invoke(cli, ["dev", str(mods_dir), "--ticks", "4", "--tps", "500",
                                 "--store", str(store)])
    assert result.exit_code == 0, result.output
    assert "hello: unchanged" in result.output and "hi 4" in result.output


def test_dev_reports_a_broken_mod_and_exits_1(mods_dir):
    write_mod(mods_dir, "bad", "local x = \n")
    result = CliRunner().invoke(cli, ["dev", str(mods_dir), "--once", "--no-store"])
    assert result.exit_code == 1
    assert "mods/bad/main.lua:" in result.output and "refused" in result.output


def test_dev_game_factory_errors_are_usage_errors(mods_dir):
    result = CliRunner().invoke(cli, ["dev", str(mods_dir), "--once", "--no-store",
                                      "--game", "no_such_module_here:make"])
    assert result.exit_code == 2


def test_the_live_view_shows_each_mods_status_stats_and_latest_errors(mods_dir):
    from rich.console import Console

    from moonbox.mods._dev import render

    write_mod(mods_dir, "good", 'every(1, function() report("tick") end)')
    folder = write_mod(mods_dir, "flaky", 'every(1, function() end)')
    with Game() as game:
        host = ModHost(game, mods_dir)
        session = DevSession(host, tick_s=0.0, watch=False)
        session.start()
        session.run(ticks=3)
        (folder / "main.lua").write_text("every(1, function(")  # a broken save
        host.reload_folder("flaky")
        console = Console(record=True, width=140)
        console.print(render(session))
        text = console.export_text()
    assert "moonbox dev" in text and "tick 3" in text
    rows = {line.split()[1]: line for line in text.splitlines()
            if line.strip().startswith("│") and len(line.split()) > 3}
    assert "running" in rows["good"] and "1.0.0" in rows["good"]
    assert "failed reload" in rows["flaky"]
    assert "flaky" in text.split("latest errors")[1] and "main.lua:1" in text
    assert "good: tick" in text


def test_dev_init_copies_the_example_mods_and_runs_them(tmp_path):
    mods_dir = tmp_path / "my-mods"
    result = CliRunner().invoke(cli, ["dev", str(mods_dir), "--init", "--ticks", "12",
                                      "--tps", "500", "--no-store"])
    assert result.exit_code == 1, result.output  # 1: a mod (the glitch) did not load
    assert "copied the example mods" in result.output
    assert "scoreboard: tick 10: ann 1" in result.output
    assert "glitch: refused" in result.output  # its dry run trips: it never goes live
    assert (mods_dir / "players" / "mod.toml").is_file()
    again = CliRunner().invoke(cli, ["dev", str(mods_dir), "--init", "--once", "--no-store"])
    assert again.exit_code == 2 and "new or empty directory" in again.output
    missing = CliRunner().invoke(cli, ["dev", str(tmp_path / "nowhere"), "--once"])
    assert missing.exit_code == 2 and "no such directory" in missing.output


# --- a damaged versions store -------------------------------------------------------------

def _store_files(path):
    """The store file and its WAL (an empty or absent WAL alike)."""
    return [p.read_bytes() if p.exists() else b"" for p in (path, path.with_name(path.name + "-wal"))]


def _damage_page_holding(path, marker: bytes) -> None:
    """Overwrite, with seeded random bytes, the page of ``path`` that holds ``marker``."""
    raw = path.read_bytes()
    assert raw.count(marker) == 1
    page = raw.index(marker) // 4096 * 4096
    with open(path, "r+b") as f:
        f.seek(page)
        f.write(random.Random(0).randbytes(4096))


def test_dev_starts_on_a_damaged_store_read_only_and_writes_nothing(mods_dir, tmp_path):
    write_mod(mods_dir, "hello", 'every(2, function(t) report("hello " .. t) end) -- MARK-1')
    write_mod(mods_dir, "other", 'every(2, function(t) report("other " .. t) end)')
    store = tmp_path / "v.db"
    runner = CliRunner()
    assert runner.invoke(cli, ["dev", str(mods_dir), "--once", "--store", str(store)]).exit_code == 0
    _damage_page_holding(store, b"MARK-1")
    write_mod(mods_dir, "other", 'every(2, function(t) report("other v2 " .. t) end)')
    before = _store_files(store)
    result = runner.invoke(cli, ["dev", str(mods_dir), "--ticks", "2", "--tps", "500",
                                 "--store", str(store)])
    assert result.exit_code == 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    text = " ".join(result.output.split())  # the console wraps long lines
    assert f"versions store {store} is damaged" in text
    assert "read-only for this session" in text and "nothing is recorded" in text
    assert f"to recover: moonbox versions export FILE --store {store}" in text
    assert "hello: live" in text and "other: live" in text  # from disk
    assert "other v2 2" in text
    assert _store_files(store) == before


def test_dev_runs_without_a_store_it_cannot_open(mods_dir, tmp_path):
    write_mod(mods_dir, "hello", 'every(2, function(t) report("hi " .. t) end)')
    store = tmp_path / "v.db"
    store.write_text("not a store\n" * 100)
    result = CliRunner().invoke(cli, ["dev", str(mods_dir), "--once", "--store", str(store)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "not an SQLite database" in text and "running without a versions store" in text
    assert "hello: live" in text
    assert store.read_text() == "not a store\n" * 100


def test_the_host_records_nothing_once_the_store_turns_out_damaged(mods_dir, tmp_path):
    """Damage the open check cannot see (content changed under its hash) shows at the
    first read of it: the mod loads from disk, the record is skipped, the error says so."""
    write_mod(mods_dir, "w", 'every(1, function() report("v1") end) -- MARK-2')
    db = tmp_path / "v.db"
    with Store(db) as store, Game() as game:
        assert ModHost(game, mods_dir, store=store).load_all()[0].ok
    raw = db.read_bytes()
    with open(db, "r+b") as f:
        f.seek(raw.index(b"MARK-2"))
        f.write(b"XARK")
    before = _store_files(db)
    with Store(db) as store, Game() as game:
        assert store.corruption is None
        host = ModHost(game, mods_dir, store=store)
        results = host.load_all()
        assert store.read_only
        assert not results[0].ok and "could not restore" in results[0].error  # the restore
        assert results[-1].ok and host.mods["w"].status == "running"  # then from disk
        write_mod(mods_dir, "w", 'every(1, function() report("v2") end)')
        assert host.reload_folder("w").ok  # a new version: live, not recorded
        session = DevSession(host, tick_s=0.0, watch=False)
        console = Console(record=True, width=200)
        console.print(render(session))
        view = console.export_text()
    assert _store_files(db) == before
    assert "versions store" in view and "read-only for this session" in view
