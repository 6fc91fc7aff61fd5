"""Swapping in new versions: state carried, failures keep the old one, old timers gone."""

from __future__ import annotations

from mod_folders import write_mod

from moonbox.engine import Game
from moonbox.mods import ModHost
from moonbox.store import Store

V1 = """
local n = state_get("n") or 0
every(1, function() n = n + 1; state_set("n", n); report("v1 " .. n) end)
after(5, function() report("v1 late timer") end)
"""

V2 = """
every(1, function() state_set("n", (state_get("n") or 0) + 10); report("v2") end)
function on_reload(old)
  state_set("migrated_from", old.n)
end
"""


def _tick(game, n=1):
    lines = []
    for _ in range(n):
        lines += [line for _, line in game.tick().reports]
    return lines


def test_reload_carries_state_and_cancels_old_timers(mods_dir):
    folder = write_mod(mods_dir, "w", V1)
    with Game() as game:
        host = ModHost(game, mods_dir)
        assert host.load_all()[0].ok
        _tick(game, 3)
        assert game.mod("w").state["n"] == 3
        (folder / "main.lua").write_text(V2)
        result = host.reload_folder("w")
        assert result.ok, result.error
        state = game.mod("w").state
        assert state["n"] == 3 and state["migrated_from"] == 3
        lines = _tick(game, 4)
        assert lines == ["v2"] * 4  # no "v1 ..." and no late timer of the old version
        assert game.mod("w").state["n"] == 43
        assert host.mods["w"].reloads == 1 and host.mods["w"].status == "running"


def test_failed_reload_keeps_the_old_version_running(mods_dir):
    folder = write_mod(mods_dir, "w", V1)
    with Game() as game:
        host = ModHost(game, mods_dir)
        host.load_all()
        _tick(game, 2)
        for bad, where in [
            ("every(1, function() end\n", "mods/w/main.lua:"),           # syntax
            ("local t = nil\nt.x = 1\n", "mods/w/main.lua:2"),             # load-time error
            ("on('tick', function() error('tick boom') end)\n", "tick boom"),  # first tick
            ("function on_reload(old) error('migrate') end\n", "on_reload failed"),
        ]:
            (folder / "main.lua").write_text(bad)
            result = host.reload_folder("w")
            assert not result.ok and where in result.error, result.error
            assert host.mods["w"].status == "failed_reload"
            assert _tick(game, 1)[0] == f"v1 {game.tick_count}"
        assert "2 | t.x = 1" in host.errors[1]
        (folder / "main.lua").write_text(V1)
        assert host.reload_folder("w").unchanged
        assert host.mods["w"].status == "running"


def test_a_reload_error_in_a_required_file_names_it(mods_dir):
    folder = write_mod(mods_dir, "w", 'local h = require("helpers")\nh.go()\n',
                       files={"helpers.lua": "return { go = function() end }\n"})
    with Game() as game:
        host = ModHost(game, mods_dir)
        host.load_all()
        (folder / "helpers.lua").write_text("return { go = function()\n  local x = nil .. 1\nend }\n")
        result = host.reload_folder("w")
        assert "mods/w/helpers.lua:2" in result.error
        assert "local x = nil .. 1" in result.error


def test_half_written_file_is_refused_then_the_whole_one_loads(mods_dir):
    folder = write_mod(mods_dir, "w", V1)
    with Game() as game:
        host = ModHost(game, mods_dir)
        host.load_all()
        full = V2
        (folder / "main.lua").write_text(full[: len(full) // 2])  # an editor mid-save
        assert not host.reload_folder("w").ok
        (folder / "mod.toml").write_text('id = "w"\nversion = ')  # a half-written manifest
        assert "mod.toml" in host.reload_folder("w").error
        assert _tick(game, 1)[0].startswith("v1")
        write_mod(mods_dir, "w", full)
        assert host.reload_folder("w").ok
        assert _tick(game, 1) == ["v2"]


def test_many_rapid_saves_end_on_the_last_version(mods_dir):
    folder = write_mod(mods_dir, "w", V1)
    with Game() as game:
        host = ModHost(game, mods_dir)
        host.load_all()
        for i in range(30):
            (folder / "main.lua").write_text(f'every(1, function() report("v{i}") end)\n')
            if i % 3 == 0:
                host.reload_folder("w")
        host.reload_folder("w")
        assert _tick(game, 2) == ["v29", "v29"]
        assert game.mod("w").timer_count == 1


def test_dependents_keep_calling_the_new_version(mods_dir):
    lib = write_mod(mods_dir, "lib", 'export("f", function(x) return x + 1 end)')
    write_mod(mods_dir, "app", 'local f = import("lib", "f")\n'
              'every(1, function() report(tostring(f(1))) end)', deps=("lib",))
    with Game() as game:
        host = ModHost(game, mods_dir)
        assert all(r.ok for r in host.load_all())
        assert _tick(game, 1) == ["2"]
        (lib / "main.lua").write_text('export("f", function(x) return x + 100 end)')
        assert host.reload_folder("lib").ok
        assert _tick(game, 1) == ["101"]


def test_restart_restores_the_active_versions(mods_dir, tmp_path):
    folder = write_mod(mods_dir, "w", V1)
    write_mod(mods_dir, "other", 'every(1, function() report("other") end)')
    db = tmp_path / "versions.db"
    with Store(db) as store, Game() as game:
        host = ModHost(game, mods_dir, store=store)
        host.load_all()
        (folder / "main.lua").write_text(V2)
        assert host.reload_folder("w").ok
        assert store.scripts.current("mods/w/main.lua").rev == 2
    # While the game was down the file broke: the restart runs the recorded version.
    (folder / "main.lua").write_text("this is not lua")
    with Store(db) as store, Game() as game:
        host = ModHost(game, mods_dir, store=store)
        results = host.load_all()
        assert [r.ok for r in results if r.mod == "w"] == [True, False]
        assert sorted(m.id for m in game.mods) == ["other", "w"]
        assert sorted(_tick(game, 1)) == ["other", "v2"]
        assert host.mods["w"].status == "failed_reload"
        history = store.scripts.history("mods/w/main.lua")
        assert history[0].outcome == "failed"


def test_a_deleted_mod_folder_unloads_the_mod(mods_dir, tmp_path):
    import shutil

    folder = write_mod(mods_dir, "w", V1)
    write_mod(mods_dir, "other", 'every(1, function() report("other") end)')
    with Store(tmp_path / "versions.db") as store, Game() as game:
        host = ModHost(game, mods_dir, store=store)
        host.load_all()
        shutil.rmtree(folder)
        result = host.reload_folder("w")
        assert result.ok and result.removed and result.mod == "w"
        assert [m.id for m in game.mods] == ["other"] and "w" not in host.mods
        assert _tick(game, 1) == ["other"]
        assert [m["id"] for m in store.data.current("mods:active").content["mods"]] == ["other"]
    with Store(tmp_path / "versions.db") as store, Game() as game:
        ModHost(game, mods_dir, store=store).load_all()  # a restart does not bring it back
        assert [m.id for m in game.mods] == ["other"]


def test_a_folder_cannot_take_over_a_live_mods_id(mods_dir):
    write_mod(mods_dir, "bank", 'state_set("balance", 100)')
    skin = write_mod(mods_dir, "skin", 'state_set("x", 1)')
    with Game() as game:
        host = ModHost(game, mods_dir)
        assert all(r.ok for r in host.load_all())
        (skin / "mod.toml").write_text('id = "bank"\n')
        (skin / "main.lua").write_text('function on_reload(old) state_set("stolen", old) end')
        result = host.reload_folder("skin")
        assert not result.ok and result.mod == "skin"
        assert "'bank' is taken already by mods/bank" in result.error
        assert host.mods["bank"].package.root.name == "bank"
        assert host.mods["bank"].status == "running" and host.mods["bank"].error is None
        assert game.mod("bank").state == {"balance": 100}
        assert sorted(m.id for m in game.mods) == ["bank", "skin"]


def test_after_a_restart_a_mod_in_a_renamed_folder_can_be_removed(mods_dir, tmp_path):
    import shutil

    folder = write_mod(mods_dir, "waves", 'state_set("v", 1)')
    folder.rename(mods_dir / "waves-v2")
    db = tmp_path / "versions.db"
    with Store(db) as store, Game() as game:
        assert ModHost(game, mods_dir, store=store).load_all()[0].ok
    with Store(db) as store, Game() as game:
        host = ModHost(game, mods_dir, store=store)
        assert all(r.ok for r in host.load_all())
        shutil.rmtree(mods_dir / "waves-v2")
        result = host.reload_folder("waves-v2")
        assert result.removed and result.mod == "waves"
        assert list(game.mods) == [] and store.data.current("mods:active").content["mods"] == []


def test_a_rolled_back_file_goes_live_through_the_dry_run(mods_dir, tmp_path):
    folder = write_mod(mods_dir, "w", 'every(1, function() report("one") end)')
    with Store(tmp_path / "v.db") as store, Game() as game:
        host = ModHost(game, mods_dir, store=store)
        assert host.load_all()[0].ok
        (folder / "main.lua").write_text('every(1, function() report("two") end)')
        assert host.reload_folder("w").ok
        assert _tick(game) == ["two"]
        store.scripts.rollback("mods/w/main.lua", 1)
        package = host.recorded_package("w")
        assert package.files["main.lua"] == 'every(1, function() report("one") end)'
        assert package.root == folder.resolve()
        result = host.apply_recorded("w")
        assert result.ok and not result.unchanged
        assert _tick(game) == ["one"]
        assert host.mods["w"].reloads == 2
        # the disk is untouched, and the active record names the rolled-back revision
        assert "two" in (folder / "main.lua").read_text()
        assert host._active().mods[0].files["main.lua"] == 1
        # a version the dry run refuses leaves the live one running
        store.scripts.record_success("mods/w/main.lua", "error('broken')")
        refused = host.apply_recorded("w")
        assert not refused.ok and "broken" in refused.error
        assert _tick(game) == ["one"]


def test_recorded_package_needs_a_recorded_mod(mods_dir, tmp_path):
    import pytest

    from moonbox.mods import ModError

    write_mod(mods_dir, "w", "")
    with Game() as game:
        host = ModHost(game, mods_dir)
        host.load_all()
        with pytest.raises(ModError) as info:
            host.recorded_package("w")  # no store
        assert info.value.code == "unknown_mod"
    with Store(tmp_path / "v.db") as store, Game() as game:
        host = ModHost(game, mods_dir, store=store)
        with pytest.raises(ModError):
            host.recorded_package("nobody")
