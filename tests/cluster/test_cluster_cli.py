"""``moonbox cluster``: a mods folder run sharded, in process and on a Ray instance the
command starts (and ends) itself."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import psutil
import pytest
from _mods import chatty_mods
from click.testing import CliRunner

from moonbox.cli import cli


@pytest.fixture
def mods_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "mods"
    folder.mkdir()
    for m in chatty_mods():
        (folder / f"{m.id}.lua").write_text(m.source)
    dep = folder / "pair"
    dep.mkdir()
    (dep / "mod.toml").write_text('id = "pair"\nname = "Pair"\nversion = "1.0.0"\n'
                                  'dependencies = ["solo"]\n')
    (dep / "main.lua").write_text('local n = import("solo", "n")\n'
                                  'coreai_world_spawn{prefab = "cube", name = "pair", x = n}\n')
    solo = folder / "solo"
    solo.mkdir()
    (solo / "mod.toml").write_text('id = "solo"\nname = "Solo"\nversion = "1.0.0"\n')
    (solo / "main.lua").write_text('export("n", 3)\n')
    return folder


def _run(args: list[str]) -> dict:
    result = CliRunner().invoke(cli, ["cluster", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_the_command_runs_a_folder_in_process(mods_dir: Path):
    doc = _run([str(mods_dir), "--shards", "3", "--ticks", "12", "--backend", "local",
                "--checkpoint-every", "5"])
    assert [s["ticks"] for s in doc["shards"]] == [12, 12, 12]
    assert sum(s["mods"] for s in doc["shards"]) == 6
    assert [c["tick"] for c in doc["checkpoints"]] == [0, 5, 10]
    shard_of = {m: s["shard"] for s in doc["shards"] for m in s["mod_ids"]}
    assert shard_of["pair"] == shard_of["solo"]  # a dependency is an import: one shard
    assert len(doc["combined_hash"]) == 64 and not doc["lost"]
    text = CliRunner().invoke(cli, ["cluster", str(mods_dir), "--backend", "local",
                                    "--ticks", "3"]).output
    assert "world hash: " + _run([str(mods_dir), "--backend", "local", "--ticks", "3"])[
        "combined_hash"] in text


def test_a_folder_needing_require_is_refused(tmp_path: Path):
    folder = tmp_path / "mods" / "multi"
    folder.mkdir(parents=True)
    (folder / "mod.toml").write_text('id = "multi"\nname = "M"\nversion = "1.0.0"\n')
    (folder / "main.lua").write_text('local u = require("util")\n')
    (folder / "util.lua").write_text("return {}\n")
    result = CliRunner().invoke(cli, ["cluster", str(tmp_path / "mods"), "--backend", "local"])
    assert result.exit_code == 1 and "no require yet" in result.output


def test_the_command_starts_and_ends_its_own_ray(mods_dir: Path):
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before ray's first import
    os.environ["RAY_AUTH_MODE"] = "token"
    pytest.importorskip("ray", reason="the Ray backend needs ray: pip install -e '.[dev]'")
    import ray

    if ray.is_initialized():
        pytest.skip("a Ray instance of this process is running")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    local = _run([str(mods_dir), "--shards", "2", "--ticks", "10", "--backend", "local"])
    doc = _run([str(mods_dir), "--shards", "2", "--ticks", "10"])
    assert doc["backend"] == "ray" and doc["combined_hash"] == local["combined_hash"]
    assert len({s["pid"] for s in doc["shards"]} | {os.getpid()}) == 3
    deadline = time.monotonic() + 20
    left = [1]
    while left and time.monotonic() < deadline:
        left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        time.sleep(0.2)
    assert not left, f"left running: {[(p.pid, p.name()) for p in left]}"
