"""``moonbox run --isolate`` keeps the output contract of ``moonbox run``."""

from __future__ import annotations

import json

from click.testing import CliRunner

from moonbox.cli import cli

FILES = {
    "ok.lua": 'report("hi") return 1 + 1',
    "world.lua": 'coreai_world_spawn{prefab = "cube", name = "a", x = 1}\n'
                 'coreai_world_spawn{prefab = "dragon", name = "d"}',
    "loop.lua": "while true do end",
    "bad.lua": "return ((",
}


def _records(tmp_path, *flags: str) -> tuple[int, list[dict]]:
    paths = []
    for name, source in FILES.items():
        (tmp_path / name).write_text(source)
        paths.append(str(tmp_path / name))
    result = CliRunner().invoke(cli, ["run", "--json", "--steps", "100000", *flags, *paths])
    records = [json.loads(line) for line in result.output.splitlines()]
    for record in records:
        record["stats"] = None  # timings and heap differ between processes
    return result.exit_code, records


def test_isolated_runs_print_what_in_process_runs_print(tmp_path):
    assert _records(tmp_path, "--isolate") == _records(tmp_path)
