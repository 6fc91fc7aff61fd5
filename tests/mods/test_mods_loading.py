"""Discovery, dependency order, permissions granted, and require confined to the folder."""

from __future__ import annotations

import os

import pytest
from mod_folders import write_mod

from moonbox.bindings import Permissions
from moonbox.engine import Game
from moonbox.mods import ModError, ModHost, discover, order_packages, read_package


def _ids(packages):
    return [p.id for p in packages]


def test_dependencies_load_first(mods_dir):
    write_mod(mods_dir, "c", "", deps=("b",))
    write_mod(mods_dir, "b", "", deps=("a",))
    write_mod(mods_dir, "a", "")
    write_mod(mods_dir, "d", "")
    packages, errors = discover(mods_dir)
    ordered, order_errors = order_packages(packages)
    assert not errors and not order_errors
    assert _ids(ordered) == ["a", "b", "c", "d"]


def test_missing_dependency_and_cycle_are_clear_errors(mods_dir):
    write_mod(mods_dir, "x", "", deps=("y",))
    write_mod(mods_dir, "y", "", deps=("x",))
    write_mod(mods_dir, "lonely", "", deps=("ghost",))
    write_mod(mods_dir, "fan", "", deps=("lonely",))
    write_mod(mods_dir, "fine", "")
    ordered, errors = order_packages(discover(mods_dir)[0])
    assert _ids(ordered) == ["fine"]
    by_mod = {e.mod: e for e in errors}
    assert by_mod["x"].code == by_mod["y"].code == "dependency_cycle"
    assert "x -> y -> x" in str(by_mod["x"]) or "y -> x -> y" in str(by_mod["x"])
    assert by_mod["lonely"].code == "missing_dependency" and "'ghost'" in str(by_mod["lonely"])
    assert by_mod["fan"].code == "missing_dependency"
    assert str(by_mod["lonely"]).startswith("mods/lonely/mod.toml: field 'dependencies'")


def test_bad_folders_are_reported_and_others_load(mods_dir):
    write_mod(mods_dir, "good", 'state_set("ok", true)')
    bad = write_mod(mods_dir, "bad", "")
    (bad / "mod.toml").write_text('id = "bad"\nentry = "nope.lua"\n')
    with Game() as game:
        host = ModHost(game, mods_dir)
        results = {r.mod: r for r in host.load_all()}
        assert results["good"].ok and not results["bad"].ok
        assert "nope.lua" in results["bad"].error
        assert game.mod("good").state == {"ok": True}


def test_a_mod_never_gets_more_than_the_policy(mods_dir):
    write_mod(mods_dir, "greedy", 'report(tostring(coreai_world_spawn ~= nil))', mode="full")
    write_mod(mods_dir, "humble", 'report(tostring(state_set ~= nil))', mode="readonly")
    with Game() as game:
        host = ModHost(game, mods_dir, policy=Permissions(mode="readonly"))
        host.load_all()
        greedy = host.permissions_for(host.mods["greedy"].package)
        assert greedy.decide("coreai_world_spawn", "write") == "deny"
        humble = ModHost(game, mods_dir, policy=Permissions(mode="full")).permissions_for(
            host.mods["humble"].package)
        assert humble.decide("state_set", "write") == "deny"
        assert humble.decide("coreai_world_pos", "read") == "allow"


LIB = "local M = {}\nfunction M.double(x) return x * 2 end\nreturn M\n"


def _load_one(mods_dir, main, files=None):
    write_mod(mods_dir, "m", main, files=files)
    game = Game()
    host = ModHost(game, mods_dir)
    result = host.load_all()[0]
    return game, host, result


def test_require_runs_own_files_once_with_their_chunk_names(mods_dir):
    main = ('local u = require("lib.util")\nlocal v = require("lib/util.lua")\n'
            'state_set("same", u == v)\nstate_set("d", u.double(21))\n'
            'state_set("bad", select(2, pcall(require, "lib.broken")))\n')
    files = {"lib/util.lua": LIB, "lib/broken.lua": "local x = 1\nerror('nope')\n"}
    game, host, result = _load_one(mods_dir, main, files)
    with game:
        assert result.ok, result.error
        state = game.mod("m").state
        assert state["same"] is True and state["d"] == 42
        assert state["bad"].startswith("mods/m/lib/broken.lua:2: nope")


@pytest.mark.parametrize("name, words", [
    ("../other/main", "leaves the mod's folder"),
    ("..", "leaves the mod's folder"),
    ("/etc/passwd", "absolute path"),
    ("C:/x", "absolute path"),
    ("missing", "no file 'missing.lua'"),
    ("./main", "not a file name"),
])
def test_require_is_confined(mods_dir, name, words):
    write_mod(mods_dir, "other", "")
    main = f'state_set("err", select(2, pcall(require, {name!r})))\n'
    game, host, result = _load_one(mods_dir, main)
    with game:
        assert result.ok, result.error
        assert words in game.mod("m").state["err"]


def test_require_refuses_a_link_out_of_the_folder(mods_dir, tmp_path):
    outside = tmp_path / "secret.lua"
    outside.write_text("return 'secret'")
    folder = write_mod(mods_dir, "m", 'state_set("err", select(2, pcall(require, "evil")))\n'
                       'state_set("inner", require("alias"))')
    (folder / "real.lua").write_text("return 'inner'")
    os.symlink(outside, folder / "evil.lua")
    os.symlink(folder / "real.lua", folder / "alias.lua")
    package = read_package(folder)
    assert "evil.lua" in package.refused and "alias.lua" in package.files
    with Game() as game:
        host = ModHost(game, mods_dir)
        host.load_all()
        state = game.mod("m").state
        assert "outside the mod's folder" in state["err"] and state["inner"] == "inner"


def test_require_cycle_is_an_error(mods_dir):
    files = {"a.lua": "return require('b')", "b.lua": "return require('a')"}
    game, host, result = _load_one(mods_dir, 'require("a")', files)
    with game:
        assert not result.ok
        assert "a cycle: a.lua -> b.lua -> a.lua" in result.error


def test_a_syntax_error_in_any_file_names_file_line_and_source(mods_dir):
    files = {"lib/util.lua": "local M = {}\nfunction M.f( return 1 end\nreturn M\n"}
    game, host, result = _load_one(mods_dir, "", files)
    with game:
        assert not result.ok
        assert "mods/m/lib/util.lua:2" in result.error
        assert "2 | function M.f( return 1 end" in result.error
        assert host.mods["m"].status == "failed"


def test_unreadable_entry_is_a_mod_error(mods_dir):
    folder = write_mod(mods_dir, "m", "")
    (folder / "main.lua").unlink()
    with pytest.raises(ModError) as info:
        read_package(folder)
    assert info.value.code == "missing_entry" and info.value.field == "entry"


def test_a_hostile_manifest_is_refused_and_other_mods_load(mods_dir):
    write_mod(mods_dir, "good", 'state_set("ok", true)')
    evil = write_mod(mods_dir, "evil", "")
    (evil / "mod.toml").write_text('id = "evil"\nx = ' + "[" * 5000 + "]" * 5000 + "\n")
    with Game() as game:
        results = ModHost(game, mods_dir).load_all()
        assert [m.id for m in game.mods] == ["good"]
        assert any("mods/evil/mod.toml" in (r.error or "") for r in results)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_pipe_named_like_a_lua_file_is_refused_not_read(mods_dir):
    folder = write_mod(mods_dir, "m", 'state_set("err", select(2, pcall(require, "lib")))')
    os.mkfifo(folder / "lib.lua")  # opening it for reading would block forever
    package = read_package(folder)
    assert "not a regular file" in package.refused["lib.lua"]
    with Game() as game:
        assert ModHost(game, mods_dir).load_all()[0].ok
        assert "not a regular file" in game.mod("m").state["err"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_pipe_named_mod_toml_is_an_invalid_path(mods_dir):
    folder = write_mod(mods_dir, "m", "")
    (folder / "mod.toml").unlink()
    os.mkfifo(folder / "mod.toml")
    with pytest.raises(ModError) as info:
        read_package(folder)
    assert info.value.code == "invalid_path"


def test_a_manifest_linking_out_of_the_folder_is_not_read(mods_dir, tmp_path):
    outside = tmp_path / "host.toml"
    outside.write_text('id = "stolen"\ndescription = "host secret"\n')
    folder = write_mod(mods_dir, "m", "")
    (folder / "mod.toml").unlink()
    os.symlink(outside, folder / "mod.toml")
    with pytest.raises(ModError) as info:
        read_package(folder)
    assert info.value.code == "invalid_path" and "outside the mod's folder" in str(info.value)


def test_a_module_that_failed_is_not_a_cycle_the_next_time(mods_dir):
    files = {"lib/data.lua": "error('config missing')\nreturn {}\n", "other.lua": "return 1"}
    main = ('local _, e1 = pcall(require, "lib.data")\n'
            'local _, e2 = pcall(require, "lib.data")\n'
            'state_set("first", e1) state_set("second", e2) state_set("other", require("other"))')
    game, host, result = _load_one(mods_dir, main, files)
    with game:
        assert result.ok, result.error
        state = game.mod("m").state
        assert "mods/m/lib/data.lua:1: config missing" in state["first"]
        assert state["second"] == state["first"] and state["other"] == 1


def test_a_budget_trip_in_a_required_module_is_not_swallowed(mods_dir):
    files = {"spin.lua": "while true do end"}
    main = 'local ok = pcall(require, "spin")\nstate_set("swallowed", true)'
    game, host, result = _load_one(mods_dir, main, files)
    with game:
        assert not result.ok
        assert "swallowed" not in (game.mod("m").state if game.mods else {})


# A handler that requires lib "slow" lazily and keeps what it got (or the error) by event.
REQUIRE_ON_GO = ('on("go", function(data)\n'
                 '  local ok, m = pcall(require, "slow")\n'
                 '  state_set("go" .. data.n, ok and m.ready or tostring(m))\n'
                 'end)')


def test_a_budget_trip_in_a_lazy_require_leaves_no_false_cycle(mods_dir):
    """A trip unwinds past require's own cleanup; the engine's restarted dispatcher makes
    require forget the marks of the calls the trip ended, so the module loads next time."""
    files = {"slow.lua": "if not state_get('warm') then while true do end end\n"
                         "return {ready = true}\n"}
    main = REQUIRE_ON_GO + '\non("warm", function() state_set("warm", true) end)'
    game, host, result = _load_one(mods_dir, main, files)
    with game:
        assert result.ok, result.error
        game.emit("go", {"n": 1})
        first = game.tick()
        assert [f.error.kind for f in first.failures] == ["budget"]
        game.emit("warm", {})
        game.emit("go", {"n": 2})
        assert game.tick().failures == []
        state = game.mod("m").state
        assert "go1" not in state and state["go2"] is True, state


def test_the_example_mods_ship_as_packages_and_load_as_they_are(tmp_path):
    from moonbox.mods import arena_mods, copy_arena_mods, load_packages
    from moonbox.mods._dev import arena_game

    with arena_game() as game, arena_mods() as mods_dir:
        loaded = load_packages(game, mods_dir)
        ids = [p.id for p in loaded]
        assert sorted(ids) == ["enemies", "glitch", "pickups", "players", "scoreboard"]
        assert ids.index("scoreboard") < ids.index("players")  # a dependency first
        reports = [r for _ in range(12) for r in game.tick().reports]
        assert game.mod("glitch").quarantine.kind == "trips"  # loaded without a dry run
        assert ("scoreboard", "tick 10: ann 1") in reports  # its require'd lib at work
    copied = copy_arena_mods(tmp_path / "mine")
    assert copied == sorted(ids)
    assert (tmp_path / "mine" / "scoreboard" / "lib" / "standings.lua").is_file()
    with pytest.raises(ModError) as info:
        copy_arena_mods(tmp_path / "mine")  # not empty
    assert info.value.code == "invalid_path"


def test_load_packages_refuses_a_set_with_a_missing_dependency(mods_dir):
    from moonbox.mods import load_packages

    write_mod(mods_dir, "b", "", deps=("a",))
    with Game() as game, pytest.raises(ModError) as info:
        load_packages(game, mods_dir)
    assert info.value.code == "missing_dependency" and not game.mods


def test_load_packages_grants_what_each_manifest_asks_within_the_policy(mods_dir):
    from moonbox.mods import load_packages

    write_mod(mods_dir, "reader", 'state_set("x", 1)', mode="readonly")
    write_mod(mods_dir, "writer", 'state_set("x", 1)')
    with Game() as game:
        load_packages(game, mods_dir)
        assert game.mod("reader").quarantine is not None  # state_set is not granted
        assert game.mod("writer").state == {"x": 1}
    with Game() as game:
        load_packages(game, mods_dir, policy=Permissions(mode="readonly"))
        assert game.mod("writer").quarantine is not None  # the policy caps it


def test_copied_example_mods_are_the_users_to_edit(tmp_path):
    import stat

    from moonbox.mods import copy_arena_mods

    copy_arena_mods(tmp_path / "mine")
    for path in (tmp_path / "mine").rglob("*"):
        mode = path.stat().st_mode
        assert mode & stat.S_IWUSR, path
        if path.is_dir():
            assert mode & stat.S_IXUSR, path


def test_a_module_file_that_would_break_out_of_its_wrapper_is_refused(mods_dir):
    # A file's text is defined wrapped as the body of a function: this one would close the
    # wrapper and run code of its own while the package is prepared.
    files = {"evil.lua": 'end) state_set("seen", type(engine_dispatcher_starts)) '
                         'local _ = (function(...)'}
    game, host, result = _load_one(mods_dir, 'state_set("main", 1)', files)
    with game:
        assert not result.ok
        assert "mods/m/evil.lua:1: '<eof>' expected near 'end'" in result.error
        assert "seen" not in (game.mod("m").state if game.mods else {})


@pytest.mark.parametrize("direct", [True, False], ids=["dispatcher", "worker"])
def test_a_lazy_require_that_waits_is_loading_until_it_ends(mods_dir, monkeypatch, direct):
    """A module's body that waits keeps its mark while it waits: another call's require of
    it meanwhile is a cycle, and the body runs once. A pause that turns the dispatcher's
    own coroutine into the task restarts the dispatcher, which is no new start (the marks
    stay current); so the same holds where every call runs in a worker."""
    from moonbox.sandbox import Sandbox

    start = Sandbox.start

    def starting(self, *args, **options):
        if not direct:
            options.pop("worker_resume", None)
        return start(self, *args, **options)

    monkeypatch.setattr(Sandbox, "start", starting)
    files = {"slow.lua": "state_set('loads', (state_get('loads') or 0) + 1)\nwait(2)\n"
                         "return {ready = true}\n"}
    main = REQUIRE_ON_GO
    game, host, result = _load_one(mods_dir, main, files)
    with game:
        assert result.ok, result.error
        for n in range(1, 5):
            if n != 3:
                game.emit("go", {"n": n})
            assert game.tick().failures == []
        state = game.mod("m").state
        assert state["loads"] == 1 and state["go1"] is True and state["go4"] is True
        assert "cycle" in state["go2"] and "slow.lua" in state["go2"], state["go2"]
