"""``moonbox versions``: every subcommand, readable and --json, errors and exit codes, and
what each does on a damaged store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from pydantic import BaseModel
from store_damage import KEYS, PAGE, files, fill, middle_page, overwrite

from moonbox.cli import cli
from moonbox.cli._versions import DEFAULT_STORE, STORE_ENV
from moonbox.store import Store


class Balance(BaseModel):
    hp: int


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "game.db"
    with Store(path) as s:
        s.scripts.record_success("waves:main", "local x = 1\nreturn x\n", author="human")
        s.scripts.record_failure("waves:main", "return (\n", error="syntax error\nnear (",
                                 role="programmer", trace_id="t-1")
        s.scripts.record_success("waves:main", "local x = 2\nreturn x\n", role="programmer")
        s.scripts.record_success("loot:main", "return 1\n")
        s.data.register("balance", Balance, {"hp": 1})
        s.data.record_success("balance", {"hp": 5})
    return path


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["versions", *args], env=env)
    return result.exit_code, result.stdout, result.stderr


def run_json(*args: str) -> object:
    code, out, err = run(*args, "--json")
    assert code == 0, (out, err)
    return json.loads(out)


def test_list(db):
    code, out, _ = run("list", "--store", str(db))
    assert code == 0 and "3 keys in" in out
    assert "waves:main" in out and "balance" in out and "loot:main" in out
    data = run_json("list", "--store", str(db))
    assert [(k["kind"], k["key"], k["current"]) for k in data["keys"]] == [
        ("data", "balance", 2), ("script", "loot:main", 1), ("script", "waves:main", 3)]
    assert [k["key"] for k in run_json("list", "--store", str(db), "--kind", "script",
                                       "--prefix", "wa")["keys"]] == ["waves:main"]


def test_store_from_the_environment_and_default(db, tmp_path, monkeypatch):
    code, out, _ = run("list", env={STORE_ENV: str(db)})
    assert code == 0 and "waves:main" in out
    monkeypatch.chdir(tmp_path)
    code, _, err = run("list")
    assert code == 1 and DEFAULT_STORE in err and "no versions store" in err
    assert not (tmp_path / DEFAULT_STORE).exists()


# -- at 80 columns --------------------------------------------------------------------------

LONG_KEYS = ["mods/scoreboard/lib/standings.lua", "mods/scoreboard/lib/standings_old.lua",
             "mods/scoreboard/main.lua"]


@pytest.fixture
def crowded(tmp_path: Path) -> Path:
    """Keys that share a long prefix, and a history with long authors, roles and errors."""
    path = tmp_path / "crowded.db"
    with Store(path) as s:
        for key in LONG_KEYS:
            s.scripts.record_success(key, "return 1\n", author="model:a-long-model-name-v2",
                                     role="programmer", trace_id="trace-0123456789abcdef")
        key = LONG_KEYS[0]
        s.scripts.record_failure(key, "return (\n", error="mods/scoreboard/lib/standings.lua"
                                 ":3: attempt to call global 'state_set' (a nil value)",
                                 author="modder", role="modder")
        s.scripts.record_success(key, "return 2\n", author="modder", role="modder")
    return path


def _at_80(*args: str) -> str:
    result = CliRunner().invoke(cli, ["versions", *args], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    return result.stdout


def test_list_keeps_every_key_whole_at_80_columns(crowded):
    out = _at_80("list", "--store", str(crowded))
    lines = out.splitlines()
    header = next(line for line in lines if line.split()[:2] == ["kind", "key"])
    assert header.split() == ["kind", "key", "original", "current", "latest", "kept",
                              "updated"]
    # A key too long for its column folds onto the next line: join the column back up.
    start = header.index("key")
    end = header.index("original")
    keys, key = [], ""
    for line in lines[lines.index(header) + 2:]:
        cell = line[start:end].strip()
        if line[:start].strip():  # a new row
            if key:
                keys.append(key)
            key = cell
        else:
            key += cell
    keys.append(key)
    assert keys == LONG_KEYS
    assert "…" not in out


def test_show_keeps_the_revision_numbers_at_80_columns(crowded):
    out = _at_80("show", LONG_KEYS[0], "--store", str(crowded))
    lines = out.splitlines()
    header = next(line for line in lines if line.split()[:1] == ["rev"])
    assert header.split() == ["rev", "outcome", "recorded", "sha256", "author", "role",
                              "trace"]
    rows = [line.split() for line in lines[lines.index(header) + 2:]
            if line[:3].strip().isdigit()]
    assert [(row[0], row[1]) for row in rows] == [("3", "C"), ("2", "failed"), ("1", "O")]
    errors = " ".join(out.split("errors:")[1].split())
    assert errors == ("rev 2: mods/scoreboard/lib/standings.lua:3: attempt to call global "
                      "'state_set' (a nil value)")


@pytest.mark.parametrize("args", [
    ["list"], ["show", "k"], ["diff", "k", "1"], ["rollback", "k", "1"], ["reset", "k"],
    ["reset-all"], ["export", "-"],
])
def test_only_import_creates_a_store(tmp_path, args):
    path = tmp_path / "none.db"
    code, _, err = run(*args, "--store", str(path))
    assert code == 1 and "no versions store" in err
    assert list(tmp_path.iterdir()) == []


def test_show_history_and_revision(db):
    code, out, _ = run("show", "waves:main", "--store", str(db))
    assert code == 0 and "original 1 (O), current 3 (C)" in out and "failed" in out
    data = run_json("show", "waves:main", "--store", str(db))
    assert data["key"]["current"] == 3
    assert [(r["rev"], r["outcome"], r["current"], r["original"]) for r in data["revisions"]] == [
        (3, "ok", True, False), (2, "failed", False, False), (1, "ok", False, True)]
    code, out, _ = run("show", "waves:main", "2", "--store", str(db))
    assert code == 0
    assert out.endswith("# error: syntax error\n# error: near (\nreturn (\n")
    assert "trace t-1" in out
    rev = run_json("show", "waves:main", "original", "--store", str(db))
    assert (rev["rev"], rev["source"], rev["author"], rev["original"]) == (
        1, "local x = 1\nreturn x\n", "human", True)
    rev = run_json("show", "balance", "current", "--kind", "data", "--store", str(db))
    assert rev["payload"] == {"hp": 5}
    code, out, _ = run("show", "balance", "2", "--kind", "data", "--store", str(db))
    assert code == 0 and out.endswith('{\n  "hp": 5\n}\n')


def test_diff(db):
    code, out, _ = run("diff", "waves:main", "1", "--store", str(db))
    assert code == 0
    assert out == ("--- waves:main@1\n+++ waves:main@3\n@@ -1,2 +1,2 @@\n-local x = 1\n"
                   "+local x = 2\n return x\n")
    data = run_json("diff", "waves:main", "original", "2", "--store", str(db))
    assert (data["from"], data["to"]) == (1, 2) and "+return (" in data["diff"]
    code, out, _ = run("diff", "waves:main", "3", "--store", str(db))
    assert code == 0 and "are the same" in out


def test_rollback_reset_reset_all(db):
    data = run_json("rollback", "waves:main", "1", "--store", str(db))
    assert data["current"]["rev"] == 1 and data["key"]["current"] == 1
    code, out, _ = run("rollback", "waves:main", "3", "--store", str(db))
    assert code == 0 and "current is now revision 3" in out
    data = run_json("reset", "waves:main", "--store", str(db))
    assert data["current"]["rev"] == 1
    run("rollback", "waves:main", "3", "--store", str(db))
    assert run_json("reset-all", "--store", str(db), "--kind", "script") == {"changed": 1}
    code, out, _ = run("reset-all", "--store", str(db))
    assert code == 0 and out == "reset 1 key to their original\n"
    with Store(db) as s:
        assert [(i.key, i.current) for i in s.keys()] == [
            ("balance", 1), ("loot:main", 1), ("waves:main", 1)]


@pytest.mark.parametrize("args, code_name", [
    (["show", "nope"], "unknown_key"),
    (["show", "waves:main", "9"], "unknown_revision"),
    (["rollback", "waves:main", "2"], "failed_revision"),
    (["diff", "waves:main", "1", "99"], "unknown_revision"),
    (["reset", "waves:main", "--kind", "data"], "unknown_key"),
])
def test_store_errors_exit_1(db, args, code_name):
    code, out, err = run(*args, "--store", str(db))
    assert code == 1 and out == "" and err.startswith("error: ")
    code, out, _ = run(*args, "--store", str(db), "--json")
    assert code == 1 and json.loads(out)["error"]["code"] == code_name


@pytest.mark.parametrize("args", [
    ["show", "waves:main", "zero"], ["show", "waves:main", "0"], ["rollback", "waves:main"],
    ["list", "--kind", "other"], ["nope"],
])
def test_usage_errors_exit_2(db, args):
    assert run(*args, "--store", str(db))[0] == 2


def test_export_import_round_trip(db, tmp_path):
    out = tmp_path / "v.json"
    assert run_json("export", str(out), "--store", str(db)) == {"path": str(out), "keys": 3}
    other = tmp_path / "other.db"
    code, text, _ = run("import", str(out), "--store", str(other))
    assert code == 0 and text == f"imported 3 keys from {out}\n"
    with Store(db) as a, Store(other) as b:
        assert a.export()["keys"] == b.export()["keys"]
    code, _, err = run("import", str(out), "--store", str(other))
    assert code == 1 and "already has" in err
    assert run_json("import", str(out), "--replace", "--store", str(other))["keys"] == 3


def test_export_to_stdout_and_import_from_stdin(db, tmp_path):
    code, text, _ = run("export", "-", "--store", str(db))
    assert code == 0 and json.loads(text)["format"] == "moonbox-versions"
    result = CliRunner().invoke(cli, ["versions", "import", "-", "--store",
                                      str(tmp_path / "n.db")], input=text)
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cli, ["versions", "import", "-", "--json", "--store",
                                      str(tmp_path / "m.db")], input="{bad")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"]["code"] == "invalid_export"


def test_help_lists_every_subcommand():
    result = CliRunner().invoke(cli, ["versions", "--help"])
    for name in ("list", "show", "diff", "rollback", "reset", "reset-all", "export", "import"):
        assert f"  {name} " in result.output


# --- a damaged store -------------------------------------------------------------------

@pytest.fixture
def damaged(tmp_path: Path) -> Path:
    """A store of 400 keys with the page in the middle of its file overwritten."""
    path = tmp_path / "damaged.db"
    fill(path)
    overwrite(path, middle_page(path), PAGE)
    return path


def invoke(*args: str) -> Result:
    result = CliRunner().invoke(cli, ["versions", *args])
    # Never a Python traceback: every failure is a reported StoreError and an exit status.
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        result.exception)
    assert "Traceback" not in result.output
    return result


def _lost_key(path: Path) -> str:
    with Store(path) as store:
        return next(e["key"] for e in store.export()["lost"] if e["what"] == "key")


def _readable_key(path: Path) -> str:
    with Store(path) as store:
        return store.export()["keys"][-1]["key"]


def test_reads_of_a_damaged_store_warn_and_go_on(damaged):
    result = invoke("list", "--store", str(damaged))
    assert result.exit_code == 0 and f"{KEYS + 20} keys in" in result.stdout
    assert result.stderr.startswith(f"warning: the versions store {damaged} is damaged (")
    assert "moonbox versions export" in result.stderr
    result = invoke("show", _readable_key(damaged), "--store", str(damaged), "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["key"]["current"] == 3
    assert "warning: " in result.stderr


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_read_that_fails_is_a_store_error(damaged, as_json):
    key = _lost_key(damaged)
    for args in (["show", key], ["show", key, "1"], ["diff", key, "1", "3"]):
        result = invoke(*args, "--store", str(damaged), *(["--json"] if as_json else []))
        assert result.exit_code == 1, args
        if as_json:
            error = json.loads(result.stdout)["error"]
            assert error["code"] == "corrupt_store" and error["path"] == str(damaged)
            assert error["findings"] and error["key"] == key
        else:
            assert result.stdout == ""
            assert result.stderr.startswith(f"error: the versions store {damaged} is damaged")
            assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args", [
    ["rollback", "mod0001:main", "1"], ["reset", "mod0001:main"], ["reset-all"],
    ["reset-all", "--kind", "data"], ["import", "-"],
])
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_writes_to_a_damaged_store_are_refused(damaged, args, as_json):
    before = files(damaged)
    result = CliRunner().invoke(cli, ["versions", *args, "--store", str(damaged),
                                      *(["--json"] if as_json else [])],
                                input='{"format": "moonbox-versions", "format_version": 1, '
                                      '"exported_at_s": 1, "keys": []}')
    assert isinstance(result.exception, SystemExit) and result.exit_code == 1
    if as_json:
        assert json.loads(result.stdout)["error"]["code"] == "corrupt_store"
    else:
        assert result.stderr.startswith("error: ") and "nothing was written" in result.stderr
    assert files(damaged) == before


def test_export_salvages_a_damaged_store(damaged, tmp_path):
    out = tmp_path / "salvage.json"
    result = invoke("export", str(out), "--store", str(damaged))
    assert result.exit_code == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert len(data["keys"]) >= 0.9 * (KEYS + 20) and data["lost"]
    assert result.stdout == f"exported {len(data['keys'])} keys to {out}\n"
    assert f"{len(data['lost'])} things could not be read" in result.stderr
    first = data["lost"][0]
    assert f"  lost {first['what']}: {first['kind']} {first['key']}" in result.stderr
    assert (f"next: move {damaged} and {damaged}-wal aside, then moonbox versions import {out}"
            in result.stderr)
    report = invoke("export", str(out), "--store", str(damaged), "--json")
    assert report.exit_code == 0
    assert json.loads(report.stdout) == {"path": str(out), "keys": len(data["keys"]),
                                         "lost": data["lost"]}
    to_stdout = invoke("export", "-", "--store", str(damaged))
    assert to_stdout.exit_code == 0 and json.loads(to_stdout.stdout)["lost"] == data["lost"]
    # The recovery the message names: move the file and its WAL aside, import the export.
    for suffix in ("", "-wal"):
        Path(f"{damaged}{suffix}").rename(tmp_path / f"damaged.db.bad{suffix}")
    result = invoke("import", str(out), "--store", str(damaged))
    assert result.exit_code == 0 and result.stderr == ""
    assert invoke("list", "--store", str(damaged), "--json").stderr == ""


@pytest.mark.parametrize("content, code", [
    (b"not a database\n" * 100, "not_a_store"),
    (b"SQLite format 3\x00" + bytes(30), "corrupt_store"),
])
def test_a_file_that_is_not_a_sound_store(tmp_path, content, code):
    path = tmp_path / "game.db"
    path.write_bytes(content)
    for args in (["list"], ["show", "a"], ["export", "-"], ["reset-all"]):
        result = invoke(*args, "--store", str(path), "--json")
        if result.exit_code == 0:  # a read of a damaged store: nothing in it, and a warning
            assert code == "corrupt_store" and "is damaged" in result.stderr
            continue
        assert result.exit_code == 1 and json.loads(result.stdout)["error"]["code"] == code
    assert path.read_bytes() == content
