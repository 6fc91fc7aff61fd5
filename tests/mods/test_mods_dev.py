"""The watcher and `moonbox dev`: saves become reloads, bursts become one; a damaged
versions store is read-only for the session."""

from __future__ import annotations

import json
import random
import time

from click.testing import CliRunner
from mod_folders import write_mod
from rich.console import Console

from moonbox.bindings import Permissions
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
    # On stderr, as moonbox run and moonbox versions write their errors.
    assert "mods/bad/main.lua:2:" in result.stderr and "refused" in result.stderr
    assert "mods/bad/main.lua" not in result.stdout


def test_dev_usage_errors_go_to_stderr(mods_dir, tmp_path):
    result = CliRunner().invoke(cli, ["dev", str(tmp_path / "nowhere"), "--once"])
    assert result.exit_code == 2
    assert "no such directory" in result.stderr and result.stdout == ""


def test_dev_game_factory_errors_are_usage_errors(mods_dir):
    result = CliRunner().invoke(cli, ["dev", str(mods_dir), "--once", "--no-store",
                                      "--game", "no_such_module_here:make"])
    assert result.exit_code == 2


def _view(session, width):
    console = Console(record=True, width=width)
    console.print(render(session))
    return console.export_text()


def _rows(text, mod_ids):
    """The table's row of each mod: the line that starts with its id."""
    rows = {}
    for line in text.splitlines():
        words = line.replace("│", " ").split()
        if words and words[0] in mod_ids and words[0] not in rows:
            rows[words[0]] = line
    return rows


def test_the_live_view_shows_each_mods_status_stats_and_latest_errors(mods_dir):
    write_mod(mods_dir, "good", 'every(1, function() report("tick") end)')
    folder = write_mod(mods_dir, "flaky", 'every(1, function() end)')
    with Game() as game:
        host = ModHost(game, mods_dir)
        session = DevSession(host, tick_s=0.0, watch=False)
        session.start()
        session.run(ticks=3)
        (folder / "main.lua").write_text("every(1, function(")  # a broken save
        host.reload_folder("flaky")
        text = _view(session, 140)
    assert "moonbox dev" in text and "tick 3" in text
    rows = _rows(text, {"good", "flaky"})
    assert "running" in rows["good"] and "1.0.0" in rows["good"]
    assert "failed reload" in rows["flaky"]
    log = text.split("errors and trips")[1]
    assert "refused flaky:" in log and "mods/flaky/main.lua:1:" in log
    assert "the version before it runs on" in log
    assert "good: tick" in text


HANDLER_ERROR = """
local n = 0
on("tick", function()
  n = n + 1
  if n == 2 then error("boom") end
end)
spawn(function() wait(1); local t = nil; return t.x end)
"""


def test_a_handler_error_and_a_trip_show_in_the_view_with_mod_handler_and_line(mods_dir):
    write_mod(mods_dir, "bad", HANDLER_ERROR)
    write_mod(mods_dir, "spin", 'every(3, function() while true do end end)')
    with Game() as game:
        host = ModHost(game, mods_dir)
        session = DevSession(host, tick_s=0.0, watch=False)
        assert all(r.ok for r in session.start())  # each passes its dry run (one tick)
        session.run(ticks=3)
        text = _view(session, 140)
    log = " ".join(text.split("errors and trips")[1].split())
    assert "error bad: mods/bad/main.lua:5: boom (in on('tick'), defined at " \
        "mods/bad/main.lua:3)" in log
    assert '5 | if n == 2 then error("boom") end' in log  # the source line
    # spawn's task is named spawn, not after(1).
    assert "in spawn, defined at mods/bad/main.lua:7" in log and "after(1)" not in log
    assert "trip spin: mods/spin/main.lua:1: steps budget exceeded" in log
    assert "in every(3)" in log
    kinds = [(p.kind, p.mod, p.tick) for p in session.problems]
    assert ("error", "bad", 2) in kinds and ("trip", "spin", 3) in kinds
    assert all(p.at_s > 0 and p.stamp.startswith(f"t {p.tick} ") for p in session.problems)


def test_a_fixed_mod_clears_its_errors_and_says_so(mods_dir):
    folder = write_mod(mods_dir, "bad", 'on("tick", function() error("boom") end)')
    write_mod(mods_dir, "other", 'on("tick", function(t) if t == 2 then error("x") end end)')
    with Game() as game:
        host = ModHost(game, mods_dir)
        session = DevSession(host, tick_s=0.0, watch=False)
        session.start()  # bad's dry run fails: refused, never live
        (folder / "main.lua").write_text('on("tick", function(t) if t > 1 then error("boom") end end)')
        assert host.reload_folder("bad").ok
        session.run(ticks=3)
        bad = [p for p in session.problems if p.mod == "bad"]
        assert [p.kind for p in bad] == ["fixed", "error"]  # the refusal is over
        assert "1 earlier entry cleared" in bad[0].text
        assert bad[1].count == 2 and (bad[1].first_tick, bad[1].tick) == (2, 3)
        (folder / "main.lua").write_text('on("tick", function() end)')
        assert host.reload_folder("bad").ok
        bad = [p for p in session.problems if p.mod == "bad"]
        assert [p.kind for p in bad] == ["fixed"]
        assert "live again (1.0.0" in bad[0].text and "1 earlier entry cleared" in bad[0].text
        assert [p.kind for p in session.problems if p.mod == "other"] == ["error"]  # its own
        text = _view(session, 120)
    log = text.split("errors and trips")[1]
    assert "fixed bad: live again" in log and "boom" not in log


def test_reports_of_the_main_chunk_and_on_reload_show(mods_dir):
    main = """
report("main chunk")
print("printed")
function on_reload(old) report("on_reload " .. tostring(old.n)) end
on("tick", function() state_set("n", 7) end)
"""
    folder = write_mod(mods_dir, "talk", main)
    with Game() as game:
        host = ModHost(game, mods_dir)
        session = DevSession(host, tick_s=0.0, watch=False)
        session.start()
        session.run(ticks=1)
        (folder / "main.lua").write_text(main + "-- v2\n")
        result = host.reload_folder("talk")
        assert result.ok and result.reports == ("on_reload 7",)
        session.run(ticks=1)
    lines = [(tick, line) for tick, mod, line in session.reports if mod == "talk"]
    assert lines == [(1, "main chunk"), (1, "printed"), (1, "on_reload 7 (on_reload)"),
                     (2, "main chunk"), (2, "printed")]  # the new version's main chunk


def test_dev_ticks_prints_handler_errors_and_trips_on_stderr(mods_dir):
    write_mod(mods_dir, "bad", HANDLER_ERROR)
    result = CliRunner().invoke(cli, ["dev", str(mods_dir), "--ticks", "3", "--tps", "500",
                                      "--no-store"])
    assert result.exit_code == 0, result.output  # it loaded; the output says what failed
    err = result.stderr
    assert "[   2] bad: error: mods/bad/main.lua:5: boom (in on('tick'), defined at " \
        "mods/bad/main.lua:3)" in err
    assert '    5 | if n == 2 then error("boom") end' in err
    assert "bad: error: mods/bad/main.lua:7: attempt to index local 't' (a nil value) " \
        "(in spawn" in err
    assert "these mods failed or tripped (see above): bad" in err
    assert "boom" not in result.stdout and "bad: live" in result.stdout


def test_a_binding_the_permissions_withhold_says_what_to_add_to_mod_toml(mods_dir):
    folder = mods_dir / "keeper"
    folder.mkdir()
    (folder / "mod.toml").write_text('id = "keeper"\n')  # no [permissions]: readonly
    (folder / "main.lua").write_text(
        'local n = 0\n'  # the dry run's tick passes; the game's second tick calls it
        'on("tick", function() n = n + 1; if n == 2 then state_set("k", 1) end end)\n'
        'local ok, e = pcall(function() coreai_world_spawn{prefab = "cube"} end)\n'
        'report(e)\n')
    with Game() as game:
        host = ModHost(game, mods_dir)
        session = DevSession(host, tick_s=0.0, watch=False)
        session.start()
        session.run(ticks=2)
        (spawn_line,) = [line for _, mod, line in session.reports if mod == "keeper"]
        (problem,) = [p for p in session.problems if p.mod == "keeper"]
        assert game.mod("keeper").state == {}  # the binding never ran
    assert spawn_line.startswith("mods/keeper/main.lua:3: coreai_world_spawn is withheld "
                                 "from mod 'keeper': a 'write' binding needs mode \"auto\"")
    assert problem.text.startswith("mods/keeper/main.lua:2: state_set is withheld from mod "
                                   "'keeper': a 'write' binding needs mode \"auto\", and "
                                   "mods/keeper/mod.toml asks for \"readonly\" (the default "
                                   "without a [permissions] table); add to "
                                   "mods/keeper/mod.toml: [permissions] mode = \"auto\"")
    assert 'state_set = "allow" under [permissions.rules]' in problem.text


def test_a_binding_the_host_withholds_says_so(mods_dir):
    write_mod(mods_dir, "asker", 'on("tick", function() emit("hello") end)', mode="auto")
    with Game() as game:
        host = ModHost(game, mods_dir, policy=Permissions(mode="readonly"))
        session = DevSession(host, tick_s=0.0, watch=False)
        session.start()
        session.run(ticks=1)
    (problem,) = [p for p in session.problems if p.mod == "asker"]
    assert "emit is withheld from mod 'asker' by the host, whatever mod.toml asks for: the " \
        "host's policy grants at most mode \"readonly\"" in problem.text
    assert "--grant" in problem.text


def test_the_view_keeps_names_statuses_and_errors_whole_at_80_columns(mods_dir):
    write_mod(mods_dir, "a-rather-long-mod-name", HANDLER_ERROR)
    write_mod(mods_dir, "steady", 'every(1, function() end)')
    write_mod(mods_dir, "broken", "local x = \n")
    with Game() as game:
        host = ModHost(game, mods_dir)
        session = DevSession(host, tick_s=0.0, watch=False)
        session.start()
        session.run(ticks=2)
        text = _view(session, 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    rows = _rows(text, {"a-rather-long-mod-name", "steady", "broken"})
    assert set(rows) == {"a-rather-long-mod-name", "steady", "broken"}  # whole names
    assert "running" in rows["steady"] and "failed" in rows["broken"]
    header = next(line for line in text.splitlines() if line.split()[:1] == ["mod"])
    assert all(column in header.split() for column in ("status", "err", "trips"))
    log = " ".join(text.split("errors and trips")[1].replace("│", " ").split())
    assert "mods/broken/main.lua:2: unexpected symbol near '<eof>'; the mod is not loaded" in log
    assert "mods/a-rather-long-mod-name/main.lua:5: boom (in on('tick')" in log


def test_dev_init_copies_the_example_mods_and_runs_them(tmp_path):
    mods_dir = tmp_path / "my-mods"
    result = CliRunner().invoke(cli, ["dev", str(mods_dir), "--init", "--ticks", "12",
                                      "--tps", "500", "--no-store"])
    # Every mod loads: the glitch passes its dry run and misbehaves in the game, on purpose.
    assert result.exit_code == 0, result.output
    assert "copied the example mods" in result.stdout
    assert "glitch misbehaves on purpose" in result.stdout
    assert "glitch: live" in result.stdout
    assert "scoreboard: tick 10: ann 1" in result.stdout
    assert "glitch: trip: mods/glitch/main.lua:" in result.stderr
    assert "glitch: quarantined: stopped (trips)" in result.stderr
    assert (mods_dir / "players" / "mod.toml").is_file()
    # The editor files: the whole mod API, and settings that point the editor at it.
    stubs = (mods_dir / "moonbox-api.lua").read_text()
    assert stubs.startswith("---@meta\n")
    for name in ("on", "every", "after", "spawn", "wait", "state_set", "emit", "export",
                 "import", "coreai_world_spawn", "require"):
        assert f"\nfunction {name}(" in stubs, name
    luarc = json.loads((mods_dir / ".luarc.json").read_text())
    assert luarc["runtime"]["version"] == "LuaJIT"
    assert luarc["workspace"]["library"] == ["moonbox-api.lua"]
    again = CliRunner().invoke(cli, ["dev", str(mods_dir), "--init", "--once", "--no-store"])
    assert again.exit_code == 2 and "new or empty directory" in again.stderr
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
