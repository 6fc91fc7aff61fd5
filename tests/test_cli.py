"""The `moonbox run` contract: flags, JSON lines, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from moonbox.cli import cli


@pytest.fixture
def lua(tmp_path: Path):
    def write(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    return write


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["run", *args])
    return result.exit_code, result.output


def _records(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


def test_ok_file_json_record(lua):
    f = lua("hello.lua", 'report("hi") return add(1, 2)')
    code, out = _run(f, "--json")
    assert code == 0
    (rec,) = _records(out)
    assert rec == {
        "file": f, "status": "ok", "budget": None, "value": 3, "reports": ["hi"],
        "error": None, "stats": rec["stats"], "commands": [], "events": [],
    }
    assert set(rec["stats"]) == {"steps", "memory_peak_bytes", "wall_s"}


def test_budget_trip_exits_3(lua):
    f = lua("loop.lua", "while true do end")
    code, out = _run(f, "--json", "--steps", "1000")
    assert code == 3
    (rec,) = _records(out)
    assert rec["status"] == "budget" and rec["budget"] == "steps"
    assert rec["error"]["kind"] == "budget" and rec["error"]["line"] == 1
    assert rec["error"]["chunk"] == "@" + f


def test_time_flag(lua):
    f = lua("slow.lua", "while true do end")
    code, out = _run(f, "--json", "--steps", "1000000000000", "--time", "0.1")
    assert code == 3 and _records(out)[0]["budget"] == "time"


def test_memory_and_heap_flags_accept_sizes(lua):
    f = lua("bomb.lua", "local s = 'x' while true do s = s .. s end")
    code, out = _run(f, "--json", "--heap", "4MB", "--memory", "2MB")
    assert code == 3 and _records(out)[0]["budget"] == "memory"


def test_script_error_exits_1_and_wins_over_budget(lua):
    ok = lua("ok.lua", "return 1")
    loop = lua("loop.lua", "while true do end")
    bad = lua("bad.lua", "\nerror('boom')")
    code, out = _run(ok, loop, bad, "--json", "--steps", "1000")
    assert code == 1
    recs = _records(out)
    assert [r["status"] for r in recs] == ["ok", "budget", "error"]
    assert recs[2]["error"] == {
        "kind": "runtime", "message": "boom", "chunk": "@" + bad, "line": 2,
        "traceback": [{"chunk": "@" + bad, "line": 2, "function": "main chunk"}],
    }


def test_syntax_error_record(lua):
    f = lua("syntax.lua", "x = = 1")
    code, out = _run(f, "--json")
    assert code == 1 and _records(out)[0]["error"]["kind"] == "syntax"


def test_files_run_as_separate_mods_in_order(lua):
    a = lua("a.lua", "shared = 'a' return shared")
    b = lua("b.lua", "return shared")
    code, out = _run(a, b, "--json")
    assert [r["value"] for r in _records(out)] == ["a", None]


def test_no_jit_flag(lua):
    f = lua("loop.lua", "while true do end")
    code, out = _run(f, "--json", "--no-jit", "--steps", "1000")
    assert code == 3 and _records(out)[0]["budget"] == "steps"


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--steps", "0", "x.lua"],
        ["--heap", "lots", "x.lua"],
        ["--time", "-1", "x.lua"],
        ["--bogus", "x.lua"],
    ],
)
def test_usage_errors_exit_2(args):
    assert CliRunner().invoke(cli, ["run", *args]).exit_code == 2


def test_missing_file_is_a_host_error_exit_2(tmp_path):
    code, out = _run(str(tmp_path / "nope.lua"), "--json")
    assert code == 2
    assert _records(out)[0]["error"]["kind"] == "host"


def test_readable_output_names_file_line_and_budget(lua):
    f = lua("loop.lua", "local n = 0\nwhile true do n = n + 1 end")
    code, out = _run(f, "--steps", "1000")
    assert code == 3
    assert "budget" in out and "loop.lua:2" in out and "steps budget exceeded" in out


def test_non_finite_values_are_valid_json(lua):
    f = lua("inf.lua", "return {1/0, -1/0, 0/0}")
    code, out = _run(f, "--json")
    assert _records(out)[0]["value"] == ["inf", "-inf", "nan"]


def test_module_entry_point_runs(lua):
    f = lua("hello.lua", "return 5")
    proc = subprocess.run([sys.executable, "-m", "moonbox", "run", f, "--json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and json.loads(proc.stdout)["value"] == 5


def test_demo_runs():
    result = CliRunner().invoke(cli, ["demo"])
    assert result.exit_code == 0, result.output
    assert "steps budget exceeded" in result.output
    assert "memory budget exceeded" in result.output


def test_bench_quick_json_reports_every_figure():
    # Timings are not asserted (shared machines are noisy): only that every workload ran in
    # every mode with agreeing checksums and every figure and target is reported.
    result = CliRunner().invoke(cli, ["bench", "--quick", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert {w["name"] for w in report["workloads"]} == {
        "fib", "numeric", "strings", "tables", "handler"
    }
    for w in report["workloads"]:
        assert w["raw_ms"] > 0 and w["metered_ratio"] > 0 and w["nojit_ratio"] > 0
    assert set(report["costs"]) == {"create_us", "binding_call_us", "resume_us",
                                    "bare_callback_us"}
    assert report["costs"]["bare_callback_us"]["raw"] > 0
    assert set(report["trip_margins"]) == {"metered", "nojit"}
    names = [t["name"] for t in report["targets"]]
    assert names[4] == "add() round trip / bare lupa callback"
    assert names[-2:] == ["process isolation per round trip (trivial)",
                          "process isolation per round trip (10-world-commands)"]
    assert len(report["targets"]) == 8
    # Process isolation: each handler in process and in a worker, and the raw floor.
    assert set(report["isolation"]) == {"trivial", "10-world-commands", "raw floor"}
    for m in report["isolation"].values():
        assert m["in_process_us"] > 0 and m["isolated_us"] > 0
    assert report["isolation"]["10-world-commands"]["round_trips"] == 11
    assert report["environment"]["isolation_wire"] in ("compiled", "python")
    for name in ("trivial", "10-world-commands"):
        m = report["isolation"][name]
        assert m["samples"] == report["rounds"] and 0 <= m["contended_samples"] <= m["samples"]


def test_bench_suite_json_reports_programs_ratios_and_targets():
    # Timings are not asserted: only the shape of the report, for two programs, one round.
    result = CliRunner().invoke(cli, ["bench", "--suite", "--rounds", "1", "--program", "fib",
                                      "--program", "sieve", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert [p["name"] for p in report["programs"]] == ["fib", "sieve"]
    for p in report["programs"]:
        assert p["raw_ms"] > 0 and p["metered_ratio"] > 0
        assert len(p["raw_samples_ms"]) == len(p["metered_samples_ms"]) == 1
        low, high = p["metered_ratio_range"]
        assert low <= high
    assert report["metered_worst"]["name"] in ("fib", "sieve")
    assert [t["limit"] for t in report["targets"]] == [1.1, 1.5]
    assert report["budget"]["max_memory"] > 0


def test_bench_suite_options_need_suite_and_a_known_program():
    result = CliRunner().invoke(cli, ["bench", "--rounds", "2"])
    assert result.exit_code == 2 and "--suite" in result.output
    result = CliRunner().invoke(cli, ["bench", "--suite", "--rounds", "1", "--program", "nope"])
    assert result.exit_code == 1 and "nope" in result.output


def test_scripts_get_the_world_and_see_earlier_files_commands(lua, tmp_path):
    first = lua("first.lua", """
        coreai_world_spawn{prefab = "cube", name = "a", x = 1}
        coreai_world_spawn{prefab = "dragon", name = "d"}
        coreai_world_spawn{prefab = "cube", name = "n", x = 0/0}
        return coreai_world_exists("a")
    """)
    second = lua("second.lua", 'return coreai_world_pos("a")')
    saved = tmp_path / "out.world"
    code, out = _run(first, second, "--json", "--save-world", str(saved))
    assert code == 0
    one, two = _records(out)
    assert one["value"] is False and two["value"] == [1, 0, 0]
    assert [(c["command"], c["status"], c["reason"]) for c in one["commands"]] == [
        ("spawn", "applied", None), ("spawn", "refused", "unknown_prefab"),
        ("spawn", "refused", "not_finite")]
    assert [e["event"] for e in one["events"]] == [
        "world:spawned", "world:refused", "world:refused"]
    assert one["events"][1]["data"]["reason"] == "unknown_prefab"
    assert two["commands"] == [] and two["events"] == []
    from moonbox.world import World

    world = World.load(saved.read_bytes())
    assert world.get("a").owner == first and len(world) == 1


def test_world_flag_starts_from_a_snapshot(lua, tmp_path):
    from moonbox.world import World

    world = World()
    world.submit("spawn", {"prefab": "cube", "name": "base", "y": 4}, None)
    world.apply()
    snap = tmp_path / "base.world"
    snap.write_bytes(world.snapshot())
    f = lua("read.lua", 'coreai_world_destroy("base") return coreai_world_pos("base")')
    code, out = _run(f, "--json", "--world", str(snap))
    (rec,) = _records(out)
    assert code == 0 and rec["value"] == [0, 4, 0]
    assert rec["commands"][0]["reason"] == "not_owner"


@pytest.mark.parametrize("content", [None, b"not a snapshot"])
def test_bad_world_file_is_a_usage_error(lua, tmp_path, content):
    snap = tmp_path / "bad.world"
    if content is not None:
        snap.write_bytes(content)
    code, out = _run(lua("x.lua", "return 1"), "--world", str(snap))
    assert code == 2 and "--world" in out


def test_readable_output_shows_commands(lua):
    f = lua("w.lua", 'coreai_world_spawn{prefab = "dragon"}')
    code, out = _run(f)
    assert code == 0 and "refused (unknown_prefab)" in out


# -- --seed: runs that replay byte for byte ---------------------------------------------------

DRAWS = """
local t = {}
for i = 1, 5 do t[#t + 1] = math.random(1000000) end
local keys = {}
for k in pairs({alpha = 1, beta = 2, gamma = 3, delta = 4, [2.5] = 5, [true] = 6}) do
  keys[#keys + 1] = tostring(k)
end
report(table.concat(keys, ","))
coreai_world_spawn{prefab = "cube", name = "c" .. math.random(1000000), x = math.random(10)}
return t
"""


@pytest.mark.parametrize("isolate", [False, True])
def test_two_runs_with_one_seed_print_the_same_json(lua, isolate):
    files = [lua("a.lua", DRAWS), lua("b.lua", DRAWS)]
    flags = ["--json", "--seed", "7", *(["--isolate"] if isolate else [])]
    first, second = (_run(*files, *flags) for _ in range(2))
    assert first == second
    a, b = _records(first[1])
    assert a["stats"] == {"steps": a["stats"]["steps"]}  # only what replays
    assert a["value"] != b["value"]  # each file has its own generator


def test_a_file_that_reseeds_changes_nothing_another_file_draws(lua):
    reseeder = lua("a.lua", "math.randomseed(1) return math.random(1000000)")
    drawer = lua("b.lua", DRAWS)
    _, together = _run(reseeder, drawer, "--json", "--seed", "7")
    _, alone = _run(drawer, "--json", "--seed", "7")
    assert _records(together)[1]["value"] == _records(alone)[0]["value"]


def test_another_seed_draws_other_numbers(lua):
    f = lua("a.lua", DRAWS)
    _, seven = _run(f, "--json", "--seed", "7")
    _, eight = _run(f, "--json", "--seed", "8")
    assert _records(seven)[0]["value"] != _records(eight)[0]["value"]


def test_a_file_over_the_source_limit_is_refused_unread(tmp_path):
    from moonbox._errors import MAX_SOURCE_BYTES

    f = tmp_path / "big.lua"
    f.write_bytes(b"--" + b"x" * (3 * MAX_SOURCE_BYTES))
    code, out = _run(str(f), "--json")
    (rec,) = _records(out)
    assert code == 1 and rec["error"]["kind"] == "syntax"
    assert "source_too_large" in rec["error"]["message"]
    assert f"{3 * MAX_SOURCE_BYTES + 2:,} bytes" in rec["error"]["message"]
