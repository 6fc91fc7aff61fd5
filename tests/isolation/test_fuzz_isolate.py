"""`moonbox fuzz --isolate`: every program also runs through an isolated sandbox, and what
isolation promises is checked on it."""

from __future__ import annotations

import json

from click.testing import CliRunner

from moonbox import Budget, Outcome, ScriptError
from moonbox.cli import cli
from moonbox.fuzz import Checker
from moonbox.fuzz._invariants import REPEATS_FOR_PARITY, _parity
from moonbox.fuzz._runner import fuzz
from moonbox.isolation import WorkerPool


def _invariants(result) -> set[str]:
    return {v.invariant for v in result.violations}


def test_a_bounded_isolated_run_breaks_no_invariant(tmp_path):
    report = fuzz(40, seed=11, isolate=True, out_dir=tmp_path)
    assert report.isolate and report.examples == 40
    assert report.ok, [f.to_dict() for f in report.failures]
    kinds = {status.split(":")[0] for status in report.statuses}
    assert {"done", "error", "budget"} <= kinds, report.statuses


def test_a_crashed_isolated_worker_is_a_crash_and_its_sibling_is_restored():
    checker = Checker(isolate=True)
    try:
        # Give the isolated runs the test-only hooks, so a program can crash its worker.
        checker._pool.close()
        checker._pool = WorkerPool(1, _test_hooks=True)
        checker._iso_sibling = checker._pool.sandbox(
            "sibling", Budget(steps=10_000_000, wall_s=5.0),
            host_functions=checker._api.host_functions, seed=1, deterministic=True,
            respawn="next_call")
        checker._iso_sibling.run("state = {answer = 42, name = 'sibling'}", "=fuzz-sibling")
        checker._iso_sibling_print = checker._isolated_fingerprint()
        crashed = checker.check("test_segfault()", "steps")
        # In process the hook does not exist (a runtime error); isolated, the worker died.
        assert _invariants(crashed) == {"crash", "isolation-parity"}, crashed.violations
        assert "SIGSEGV" in next(v.detail for v in crashed.violations if v.invariant == "crash")
        assert checker._iso_sibling.restores == 1  # it shared the lost worker
        calm = checker.check("return 1 + 1", "steps")
        assert calm.violations == [] and calm.status == "done"
    finally:
        checker.close()


def test_parity_compares_what_replays_and_nothing_else():
    nan = float("nan")
    a = Outcome("done", ({1: nan, "k": 2},), None, ("r",))
    b = Outcome("done", ({"k": 2, 1: nan},), None, ("r",))
    assert _parity("steps", a, b) == []
    assert _parity("steps", a, Outcome("done", ({1: nan, "k": 3},), None, ("r",)))
    assert _parity("steps", a, Outcome("done", a.values, None, ()))  # reports differ
    # A runtime message may name whichever bad table key came first: not compared.
    e1 = Outcome("error", (), ScriptError("a table key cannot cross", chunk="@p", line=3))
    e2 = Outcome("error", (), ScriptError("a boolean key cannot cross", chunk="@p", line=3))
    assert _parity("steps", e1, e2) == []
    e3 = Outcome("error", (), ScriptError("a table key cannot cross", chunk="@p", line=4))
    assert _parity("steps", e1, e3)
    # Other profiles compare how the run ended only.
    assert _parity("memory", a, Outcome("done", (), None, ())) == []
    assert _parity("memory", a, e1)


def test_parity_is_judged_only_for_programs_that_repeat_in_process(monkeypatch):
    """A program that ends one way in process, then another, is no isolation finding; one
    that ends the same wrong way on every in-process run is."""
    checker = Checker(isolate=True)
    wrong = Outcome("error", (), ScriptError("boom", kind="runtime", chunk="@fuzz/program.lua",
                                             line=1))
    try:
        real_run, calls = checker._run, []

        def first_run_differs(*args):
            calls.append(1)
            return wrong if len(calls) == 1 else real_run(*args)

        monkeypatch.setattr(checker, "_run", first_run_differs)
        flaky = checker.check("return 1 + 1", "steps")
        assert "isolation-parity" not in _invariants(flaky), flaky.violations
        assert len(calls) == 2  # the run parity compares, and one repeat that disagreed

        calls.clear()
        monkeypatch.setattr(checker, "_run", lambda *args: calls.append(1) or wrong)
        steady = checker.check("return 1 + 1", "steps")
        assert _invariants(steady) == {"isolation-parity"}, steady.violations
        assert len(calls) == 1 + REPEATS_FOR_PARITY
    finally:
        checker.close()


def test_the_command_takes_isolate(tmp_path):
    result = CliRunner().invoke(cli, ["fuzz", "--examples", "6", "--seed", "3", "--isolate",
                                      "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["ok"] is True and report["isolate"] is True and report["examples"] == 6
