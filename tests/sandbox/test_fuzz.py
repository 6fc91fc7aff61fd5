"""The fuzzer: its checker catches planted violations, its generator writes valid Lua, and a
bounded seeded run in each metering mode finds nothing.

Timings are never asserted tightly: the only clock-based invariant checked here is planted
with an impossible bound (a zero margin past a 1 ms wall budget).
"""

from __future__ import annotations

import json
import os
import signal
import threading

import psutil
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from lupa import luajit21

from moonbox import Budget, BudgetExceeded, Outcome, ScriptError
from moonbox._errors import MAX_SOURCE_BYTES, HostError, SourceTooLarge
from moonbox.cli import cli
from moonbox.fuzz import Checker, budget_for, check_outcome, check_plain, check_wall
from moonbox.fuzz._invariants import HOST_MARKERS
from moonbox.fuzz._programs import (
    CORRUPTIONS,
    Ctx,
    FuzzCase,
    corrupt,
    fuzz_cases,
    lua_string,
    no_host_marker,
    strings,
)
from moonbox.fuzz._runner import Worker, WorkerDied, fuzz

both_modes = pytest.mark.parametrize("jit", [True, False], ids=["jit", "hook"])


@pytest.fixture(scope="module")
def checker() -> Checker:
    c = Checker(jit=True)
    yield c
    c.close()


def invariants(violations) -> set[str]:
    return {v.invariant for v in violations}


# ------------------------------------------------------------------------------------------
# The checker against planted violations
# ------------------------------------------------------------------------------------------


def test_clean_outcomes_of_every_kind_pass(checker):
    sb = checker._sandbox(budget_for("steps"))
    try:
        outcomes = [
            sb.run("report('hi') return 1, 'two', {3, {x = true}}, nil, 0/0"),
            sb.run("error('plain runtime error')"),
            sb.run("local = 1"),
            sb.run("while true do end"),
        ]
    finally:
        sb.close()
    assert [o.status for o in outcomes] == ["done", "error", "error", "budget"]
    for outcome in outcomes:
        assert check_outcome(outcome) == [], outcome


def test_a_host_error_in_an_outcome_is_a_violation():
    found = check_outcome(Outcome("error", (), HostError("moonbox failed")))  # type: ignore[arg-type]
    assert invariants(found) == {"outcome"}
    assert "HostError" in found[0].detail


def test_an_escaped_exception_instead_of_an_outcome_is_a_violation():
    assert invariants(check_outcome(RuntimeError("boom"))) == {"outcome"}


def test_a_python_object_among_the_values_is_a_violation():
    found = check_outcome(Outcome("done", (1, {"k": [object()]})))
    assert invariants(found) == {"plain-data"}
    assert "builtins.object" in found[0].detail and "value 2['k'][0]" in found[0].detail


def test_a_lupa_table_among_the_values_is_a_violation():
    rt = luajit21.LuaRuntime(register_eval=False, register_builtins=False)
    found = check_outcome(Outcome("yielded", ([rt.table(1, 2)],)))
    assert invariants(found) == {"plain-data"}
    assert "lupa" in found[0].detail


def test_a_subclass_of_a_plain_type_is_not_plain():
    class Sneaky(str):
        pass

    assert check_plain(Sneaky("x")) is not None
    assert check_plain({"a": [1, 2.5, True, None, "s"], 3: {}}) is None


def test_a_host_address_in_a_report_or_message_is_a_violation():
    leak = Outcome("done", (), None, ("table: 0x7f3a1c2b4e10",))
    assert invariants(check_outcome(leak)) == {"plain-data"}
    stable_id = Outcome("done", ("table: 0x00000002",))
    assert check_outcome(stable_id) == []
    traceback = Outcome("error", (), ScriptError("Traceback (most recent call last): ..."))
    assert invariants(check_outcome(traceback)) == {"plain-data"}


@settings(max_examples=300, deadline=None)
@given(render=strings())
def test_generated_strings_hold_no_host_marker(render):
    # A program that reports its own literal "LuaError" is no leak (the text strategy drew
    # that word from the checker's own constants once, seed 3157): the generator never
    # writes a marker the checker looks for.
    text = render(Ctx())
    assert not any(marker in text for marker in HOST_MARKERS), text


def test_the_generators_text_filter_refuses_every_host_marker():
    assert no_host_marker("hello") and no_host_marker("")
    for marker in HOST_MARKERS:
        assert not no_host_marker(marker) and not no_host_marker(f"a{marker}b")


def test_unknown_statuses_and_budget_kinds_are_violations():
    assert invariants(check_outcome(Outcome("preempted"))) == {"outcome"}
    trip = BudgetExceeded("steps", 10, 11)
    trip.budget = "cpu"  # type: ignore[assignment]
    assert invariants(check_outcome(Outcome("budget", (), trip))) == {"outcome"}
    odd_kind = ScriptError("x", kind="host")  # type: ignore[arg-type]
    assert invariants(check_outcome(Outcome("error", (), odd_kind))) == {"outcome"}
    not_a_trip = Outcome("budget", (), ScriptError("x"))
    assert invariants(check_outcome(not_a_trip)) == {"outcome"}


def test_unbounded_messages_and_reports_are_violations():
    assert invariants(check_outcome(Outcome("error", (), ScriptError("x" * 100_000)))) == {
        "outcome"
    }
    assert invariants(check_outcome(Outcome("done", (), None, ("r" * 100_000,)))) == {"outcome"}
    assert invariants(check_outcome(Outcome("done", (), None, ("r",) * 5000))) == {"outcome"}


def test_the_syntax_verdict_is_checked_both_ways():
    refused = Outcome("error", (), ScriptError("unexpected symbol", kind="syntax"))
    ran = Outcome("done", (1,))
    assert invariants(check_outcome(refused, expect_syntax=False)) == {"syntax-verdict"}
    assert invariants(check_outcome(ran, expect_syntax=True)) == {"syntax-verdict"}
    assert check_outcome(refused, expect_syntax=True) == []
    assert check_outcome(ran, expect_syntax=False) == []


def test_a_run_past_its_wall_budget_and_margin_is_a_violation():
    budget = Budget(wall_s=0.2)
    assert check_wall(0.5, budget, margin_s=0.75) is None
    late = check_wall(1.5, budget, margin_s=0.75)
    assert late is not None and late.invariant == "wall-time"


def test_pythons_full_collections_are_counted_apart():
    import gc

    from moonbox.fuzz._invariants import full_collections

    counter = full_collections()
    assert full_collections() is counter  # one per process
    garbage = [[i] for i in range(200_000)]
    wall0, cpu0 = counter.spent()
    gc.collect(1)  # a smaller collection: not counted
    assert counter.spent() == (wall0, cpu0)
    gc.collect()  # a full one
    del garbage
    wall, cpu = counter.spent()
    assert wall > wall0 and cpu >= cpu0


def test_a_resume_kept_off_the_cpu_is_judged_on_its_cpu_time():
    budget = Budget(wall_s=0.2)
    # 1.2 s of wall, 0.2 s of it on the CPU: the machine, not the sandbox, made it late
    assert check_wall(1.2, budget, margin_s=0.75, cpu_s=0.2) is None
    # the thread computed past the budget and the margin: late whatever the machine did
    late = check_wall(2.5, budget, margin_s=0.75, cpu_s=1.1)
    assert late is not None and "on the CPU" in late.detail
    # on the CPU all along: the wall time judges, as without cpu_s
    assert check_wall(1.2, budget, margin_s=0.75, cpu_s=1.15) is not None


def test_the_walk_finds_host_capabilities_planted_in_reach(checker):
    sb = checker._sandbox(budget_for("steps"))
    try:
        assert checker.reachable(sb) == []
        real = sb._rt.globals()
        sb._env[b"leaked_load"] = real[b"load"]
        sb._env[b"nested"] = sb._rt.table_from({b"deeper": real[b"string"]})
        sb._env[b"pyobj"] = object()
        sb._rt.execute(
            b"local env = ... setmetatable(env.nested, {__index = package.loaded.debug})", sb._env
        )
        details = " | ".join(v.detail for v in checker.reachable(sb))
    finally:
        sb.close()
    assert "_G.leaked_load is load" in details
    assert "_G.nested.deeper is the host's string" in details
    assert "_G.pyobj is a userdata" in details
    assert "_G.nested<metatable>.__index is the host's debug" in details


def test_the_walk_finds_the_unwrapped_versions_of_wrapped_functions(checker):
    assert {"pcall", "xpcall", "coroutine.resume"} <= set(checker.wrapped_names)
    sb = checker._sandbox(budget_for("steps"))
    try:
        sb._env[b"raw_pcall"] = sb._rt.globals()[b"pcall"]
        details = [v.detail for v in checker.reachable(sb)]
    finally:
        sb.close()
    assert details == ["reachable from the mod: _G.raw_pcall is the unwrapped pcall"]


def test_the_walk_names_a_deep_finding_by_a_bounded_path(checker):
    # Found by the fuzzer (seed 1001, example 8089): a chain of tables, each the __index of
    # the next one's metatable, a hundred thousand deep, held the walk 20 s while it built
    # ever longer paths. Paths now stop growing past ~200 characters.
    sb = checker._sandbox(budget_for("steps"))
    try:
        sb._rt.execute(
            b"local env, leak = ... local t = {leak = leak} for i = 1, 20000 do "
            b"t = setmetatable({}, {__index = t}) end env.chain = t",
            sb._env, sb._rt.globals()[b"load"])
        details = [v.detail for v in checker.reachable(sb)]
    finally:
        sb.close()
    assert len(details) == 1 and details[0].startswith(
        "reachable from the mod: _G.chain<metatable>.__index<metatable>")
    assert details[0].endswith("... is load") and len(details[0]) < 300


def test_a_changed_sibling_is_a_violation():
    c = Checker(jit=True)
    try:
        assert c.check("return 1", "steps").violations == []
        c._sibling._env[b"intruder"] = 1  # as if a program had written into the sibling
        found = c.check("return 1", "steps").violations
    finally:
        c.close()
    assert invariants(found) == {"sibling"}
    assert "intruder:number" in found[0].detail


# ------------------------------------------------------------------------------------------
# The generator
# ------------------------------------------------------------------------------------------


def test_lua_string_literals_round_trip(checker):
    text = 'quote " backslash \\ newline \n nul \0 tick ✓'
    rt = luajit21.LuaRuntime(register_eval=False, register_builtins=False, encoding=None)
    assert rt.execute(f"return {lua_string(text)}".encode()) == text.encode("utf-8")
    assert rt.execute(f"return {lua_string(chr(255) + chr(233))}".encode()) == b"\xff\xe9"
    for how in CORRUPTIONS:
        assert not checker.parses(corrupt("do local x = 1 end\n", how)), how


@both_modes
def test_generated_programs_are_valid_lua_and_compile_in_the_sandbox(checker, jit):
    cases: list[FuzzCase] = []

    @hypothesis_seed(20240611 + jit)
    @settings(max_examples=150, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(fuzz_cases())
    def collect(case: FuzzCase) -> None:
        cases.append(case)

    collect()
    sb = checker._api.sandbox(budget_for("steps"), jit=jit)
    try:
        for case in cases:
            parses = checker.parses(case.source)
            if case.corruption is None:
                assert parses, case.source
            try:
                sb.load(case.source, "@fuzz/program.lua")
                refused = None
            except ScriptError as exc:
                refused = exc
            if len(case.source.encode("utf-8", "surrogateescape")) > MAX_SOURCE_BYTES:
                assert isinstance(refused, SourceTooLarge), case.source[:200]
            elif parses:
                assert refused is None or "once instrumented" in str(refused), (refused, case)
            else:
                assert refused is not None and refused.kind == "syntax", case
    finally:
        sb.close()
    assert sum(c.corruption is not None for c in cases) < len(cases) // 4


# ------------------------------------------------------------------------------------------
# Bounded runs
# ------------------------------------------------------------------------------------------


@both_modes
def test_a_bounded_seeded_run_breaks_no_invariant(jit, tmp_path):
    report = fuzz(60, seed=11 if jit else 12, jit=jit, out_dir=tmp_path)
    assert report.examples == 60
    assert report.ok, [f.to_dict() for f in report.failures]
    assert list(tmp_path.iterdir()) == []
    # The programs reach every kind of outcome, not just one.
    kinds = {status.split(":")[0] for status in report.statuses}
    assert {"done", "error", "budget"} <= kinds, report.statuses


def test_a_segfault_of_the_worker_is_a_crash_with_its_program():
    worker = Worker(jit=True, wall_s=5.0, margin_s=1.0)
    killer = threading.Timer(0.5, os.kill, (worker.pid, signal.SIGSEGV))
    killer.start()
    try:
        with pytest.raises(WorkerDied) as died:
            worker.check(FuzzCase("while true do end", "time"))
    finally:
        killer.cancel()
        worker.close()
    assert died.value.violation.invariant == "crash"
    assert "SIGSEGV" in died.value.violation.detail


def test_a_run_goes_on_with_a_fresh_worker_after_a_crash(tmp_path):
    def kill_the_worker(index, report):
        if index == 4:
            for child in psutil.Process().children():
                if "moonbox.fuzz._worker" in " ".join(child.cmdline()):
                    os.kill(child.pid, signal.SIGKILL)

    report = fuzz(12, seed=5, out_dir=tmp_path, on_example=kill_the_worker)
    assert report.examples == 12 and report.workers == 2
    crashes = [f for f in report.failures if invariants(f.violations) == {"crash"}]
    assert [f.index for f in crashes] == [5]
    assert "SIGKILL" in crashes[0].violations[0].detail
    assert crashes[0].path is not None and crashes[0].path.read_text().startswith(
        "-- moonbox fuzz reproducer"
    )


# ------------------------------------------------------------------------------------------
# The command
# ------------------------------------------------------------------------------------------


def test_the_command_exits_0_and_reports_json_when_nothing_breaks(tmp_path):
    result = CliRunner().invoke(
        cli, ["fuzz", "--examples", "8", "--seed", "3", "--out", str(tmp_path), "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["ok"] is True and report["examples"] == 8 and report["failures"] == []
    assert sum(report["kinds"].values()) == 8 and "composed" in report["kinds"]


def test_the_command_writes_a_reproducer_for_each_failing_program(tmp_path):
    # A 1 ms wall budget with no margin at all: every program that does any real work
    # breaks the wall-time invariant, as checked by the real checker on real runs.
    result = CliRunner().invoke(cli, [
        "fuzz", "--examples", "20", "--seed", "4", "--out", str(tmp_path),
        "--wall-s", "0.001", "--wall-margin-s", "0", "--json",
    ])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["ok"] is False and report["failures"]
    files = sorted(tmp_path.glob("fuzz-4-*.lua"))
    assert [str(p) for p in files] == sorted(f["reproducer"] for f in report["failures"])
    text = files[0].read_text()
    header = text.split("-- (this header shifts line numbers by its length)\n")[0]
    assert "-- seed 4, example" in header and "-- violated:" in header
    assert "wall-time" in header and "-- replay: moonbox run" in header
    # The reproducer, header and all, is the program as it ran: still valid Lua.
    checker = Checker(jit=True)
    try:
        assert checker.parses(text)
    finally:
        checker.close()
