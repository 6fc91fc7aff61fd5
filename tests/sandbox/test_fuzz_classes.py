"""The fuzzer's generators of the host-attack classes, and the invariants that catch them.

Each generator makes programs of its kind (valid Lua unless broken on purpose, seeded, of
the shapes it claims); each invariant fails on a deliberately bad outcome (a planted one,
as in test_fuzz.py) and holds on a good one. Counts and kinds only: no timing is asserted,
the clock-based invariants are judged on planted figures.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from lupa import luajit21
from test_host_stalls import COLLIDING_KEYS

from moonbox import Budget, Outcome, ScriptError, SourceTooLarge
from moonbox._errors import MAX_SOURCE_BYTES
from moonbox.fuzz import Checker
from moonbox.fuzz._invariants import (
    COLLIDING_CALL,
    HOST_TIME_S,
    PLAIN_CALL,
    TWIN_FACTOR,
    check_error_value,
    check_flood,
    check_host_time,
    check_host_time_against_twin,
    check_late_end,
    check_outcome,
    check_resume_reports,
    check_source_limit,
)
from moonbox.fuzz._programs import (
    CASE_MIX,
    COLLIDING_USES,
    KINDS,
    LONG_OPERATIONS,
    SOURCE_SHAPES,
    SPECIAL_CASES,
    FuzzCase,
    colliding_keys_case,
    colliding_keys_lua,
    error_value_case,
    fuzz_cases,
    long_operation_case,
    plain_twin,
    report_flood_case,
    source_size_case,
)
from moonbox.sandbox import Stats
from moonbox.sandbox._parser_limits import MAX_GOTOS
from moonbox.sandbox._run import MAX_REPORTS, REPORTS_DROPPED

NEW_KINDS = ("colliding-keys", "error-value", "source-size", "report-flood", "long-operation")


@pytest.fixture(scope="module")
def checker() -> Checker:
    c = Checker(jit=True)
    yield c
    c.close()


def cases_of(make, count: int) -> list[FuzzCase]:
    return [make(random.Random(f"test:{i}")) for i in range(count)]


def names(violations) -> set[str]:
    return {v.invariant for v in violations if v is not None}


# -- the generators ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", NEW_KINDS)
def test_each_generator_makes_valid_programs_of_its_kind(checker, kind):
    made = cases_of(SPECIAL_CASES[kind], 40)
    assert {c.kind for c in made} == {kind}
    for case in made:
        if case.corruption is None and kind != "source-size":  # a 4 MiB parse each: below
            assert checker.parses(case.source), case.source[:300]
    # Seeded: the same generator state makes the same case.
    assert SPECIAL_CASES[kind](random.Random(5)) == SPECIAL_CASES[kind](random.Random(5))


def test_fuzz_cases_mix_in_every_kind():
    cases: list[FuzzCase] = []

    @hypothesis_seed(19)
    @settings(max_examples=800, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(fuzz_cases(max_depth=1))
    def collect(case: FuzzCase) -> None:
        cases.append(case)

    collect()
    assert set(CASE_MIX) == set(KINDS)
    assert {c.kind for c in cases} == set(KINDS)
    composed = sum(c.kind == "composed" for c in cases)
    assert 0.6 * len(cases) < composed < 0.9 * len(cases)


def test_the_colliding_keys_are_the_attack_tests_keys():
    rt = luajit21.LuaRuntime(register_eval=False, register_builtins=False)
    ours = rt.execute(colliding_keys_lua() + "local k = colliding_keys(512) "
                      "return table.concat(k, ',')")
    theirs = rt.execute(COLLIDING_KEYS + "local k = colliding_keys(512) "
                        "return table.concat(k, ',')")
    assert ours == theirs and len(ours.split(",")) == 512


def test_colliding_keys_cases_hand_the_table_over_in_every_way():
    made = cases_of(colliding_keys_case, 200)
    assert all("colliding_keys(" in c.source for c in made)
    used = {use for use, make in COLLIDING_USES.items()
            if any(c.source.endswith(make(max(1, 100_000 // (n + 1000) - 1)))
                   for c in made for n in [int(c.source.split("colliding_keys(")[-1]
                                               .split(")")[0])])}
    assert used == set(COLLIDING_USES)
    # Within the item limit of values that cross (100,000), whatever the use.
    rt = luajit21.LuaRuntime(register_eval=False, register_builtins=False)
    count = rt.eval("function(s) local n = 0 for _ in s:gmatch('%f[%w]t%f[^%w]') do n = n + 1 "
                    "end return n end")
    for c in made:
        keys = int(c.source.split("colliding_keys(")[-1].split(")")[0])
        assert 5_000 <= keys <= 6_500
        tail = c.source.split("for i = 1, #keys do t[keys[i]] = i end\n", 1)[1]
        for line in tail.splitlines():  # each a resume's values at most
            assert count(line) * (keys + 1000) <= 100_000 + keys, line


def test_the_twin_of_a_colliding_keys_program_has_plain_keys(checker):
    case = colliding_keys_case(random.Random(3))
    twin = plain_twin(case.source)
    assert COLLIDING_CALL in case.source and PLAIN_CALL not in case.source
    assert PLAIN_CALL in twin and COLLIDING_CALL not in twin and checker.parses(twin)
    rt = luajit21.LuaRuntime(register_eval=False, register_builtins=False)
    probe = "\nlocal seen = {} for i = 1, #keys do seen[keys[i]] = true end return #keys\n"
    head = twin.split("local t = {}")[0]
    assert rt.execute(head + probe) == int(case.source.split("colliding_keys(")[-1]
                                           .split(")")[0])


def test_error_value_cases_raise_every_value_and_long_tokens():
    made = cases_of(error_value_case, 600)
    syntax = [c for c in made if c.corruption]
    assert syntax and all(len(c.source) >= 5000 for c in syntax)
    assert any("metamethod_ran" in c.source for c in made)
    assert any("coroutine.create" in c.source for c in made)
    assert any("string.rep('e', 1048576)" in c.source for c in made)


def test_source_size_cases_sit_on_both_sides_of_the_limit():
    sizes = {len(c.source.encode("utf-8")) - MAX_SOURCE_BYTES
             for c in cases_of(source_size_case, 120)}
    assert {-1, 0, 1} <= sizes and min(sizes) < 0 < max(sizes)
    for shape, make in SOURCE_SHAPES.items():
        for size in (MAX_SOURCE_BYTES, MAX_SOURCE_BYTES + 1):
            assert len(make(size).encode("utf-8")) == size, shape


def test_source_size_shapes_are_valid_lua(checker):
    for shape, make in SOURCE_SHAPES.items():
        assert checker.parses(make(1 << 16)), shape


def test_report_floods_span_three_resumes():
    for case in cases_of(report_flood_case, 20):
        assert case.source.count("coroutine.yield(flood(") == 2
        assert "return flood(3," in case.source


def test_long_operations_cover_every_shape():
    made = cases_of(long_operation_case, 120)
    assert all(c.profile == "time" for c in made)
    assert len({c.source.split("\n", 3)[:3][-1] for c in made}) > 3
    assert len(LONG_OPERATIONS) == 7


# -- the invariants on planted outcomes -------------------------------------------------------


def _outcome(status="done", values=(), error=None, reports=(), wall_s=0.01) -> Outcome:
    return Outcome(status, values, error, reports, Stats(10, 0, wall_s))


def test_host_time_past_the_bound_is_a_violation():
    quick = _outcome(wall_s=0.1)
    assert check_host_time(0.05, quick) is None
    late = check_host_time(HOST_TIME_S + 0.5, quick)
    assert late is not None and late.invariant == "host-time"


def test_host_time_far_past_the_twins_is_a_violation():
    assert check_host_time_against_twin(0.2, 0.1) is None
    assert check_host_time_against_twin(0.0, 0.0) is None
    slow = check_host_time_against_twin(TWIN_FACTOR * 0.1 + 0.2, 0.1)
    assert slow is not None and slow.invariant == "host-time"


def test_a_plain_end_past_the_budget_and_margins_is_a_late_end():
    budget = Budget(wall_s=0.2)
    assert check_late_end(0.3, _outcome(), budget) is None
    assert check_late_end(0.2 + 0.25 + 0.04, _outcome(), budget) is None  # within the slack
    assert names([check_late_end(3.0, _outcome("done"), budget)]) == {"late-end"}
    assert names([check_late_end(3.0, _outcome("yielded"), budget)]) == {"late-end"}
    trip = _outcome("budget", error=ScriptError("time"))
    assert check_late_end(3.0, trip, budget) is None


def test_the_source_limit_is_judged_exactly():
    m = MAX_SOURCE_BYTES
    refused = _outcome("error", error=SourceTooLarge(m + 1, m))
    assert check_source_limit(refused, m + 1) is None
    assert names([check_source_limit(_outcome("done"), m + 1)]) == {"source-limit"}
    assert names([check_source_limit(refused, m + 2)]) == {"source-limit"}  # size misstated
    wrong_limit = _outcome("error", error=SourceTooLarge(m + 1, m + 1))
    assert names([check_source_limit(wrong_limit, m + 1)]) == {"source-limit"}
    assert names([check_source_limit(_outcome("error", error=SourceTooLarge(m, m - 1)), m)]) \
        == {"source-limit"}  # refused at the limit
    assert check_source_limit(_outcome("done"), m) is None
    # A SourceTooLarge is a well-formed outcome, not a syntax-verdict miss.
    assert check_outcome(refused, expect_syntax=False) == []


def test_error_messages_past_4_kib_and_the_ellipsis_are_unbounded():
    ok = _outcome("error", error=ScriptError("e" * 4096 + "..."))
    assert check_outcome(ok) == []
    long = _outcome("error", error=ScriptError("e" * 4100))
    assert names(check_outcome(long)) == {"outcome"}


def test_a_drop_not_said_or_said_without_a_drop_is_a_reports_violation():
    kept = tuple(str(i) for i in range(MAX_REPORTS))
    assert check_resume_reports(_outcome(reports=kept + (REPORTS_DROPPED,)), 5) is None
    assert check_resume_reports(_outcome(reports=kept), 0) is None
    assert names([check_resume_reports(_outcome(reports=kept), 5)]) == {"reports"}
    assert names([check_resume_reports(_outcome(reports=("a", REPORTS_DROPPED)), 0)]) \
        == {"reports"}
    assert names([check_resume_reports(_outcome(reports=(REPORTS_DROPPED, "a")), 1)]) \
        == {"reports"}


def test_a_flood_that_loses_its_first_line_or_miscounts_is_a_violation():
    lines = ("resume 2", *[str(i) for i in range(MAX_REPORTS - 1)], REPORTS_DROPPED)
    good = _outcome("yielded", values=(1500,), reports=lines)
    assert check_flood(good, 500, 2) is None
    assert names([check_flood(good, 499, 2)]) == {"reports"}  # a line neither kept nor counted
    lifetime_cap = _outcome("yielded", values=(1500,), reports=(REPORTS_DROPPED,))
    assert names([check_flood(lifetime_cap, 1500, 2)]) == {"reports"}
    assert names([check_flood(good, 500, 3)]) == {"reports"}  # another resume's first line
    tripped = _outcome("budget", error=ScriptError("time"), reports=("resume 2",))
    assert check_flood(tripped, 0, 2) is None


def test_a_metamethod_that_ran_on_the_host_side_is_a_violation():
    assert check_error_value(None) is None
    assert names([check_error_value(b"tostring")]) == {"error-value"}


# -- the invariants through real runs ---------------------------------------------------------


def test_the_flag_of_a_metamethod_is_read_from_the_mods_environment(checker):
    # The program sets the flag itself, as a host-side __tostring would: the checker sees it.
    found = checker.check("metamethod_ran = 'tostring' error('x')", "steps",
                          "error-value").violations
    assert names(found) == {"error-value"}
    clean = checker.check("error(setmetatable({}, {__tostring = function() "
                          "metamethod_ran = 1 end}))", "steps", "error-value")
    assert clean.violations == [] and clean.status == "error:runtime"


def test_a_real_flood_keeps_its_invariants_and_a_miscount_is_caught(checker):
    flood = ("local function f(r, n) report('resume ' .. r) for i = 2, n do report(i) end "
             "return n end coroutine.yield(f(1, 1500)) coroutine.yield(f(2, 10)) "
             "return f(3, 1001)")
    result = checker.check(flood, "time", "report-flood")
    assert result.violations == [] and result.status == "done"
    assert [d for *_, d in result.resumes] == [500, 0, 1]
    lying = flood.replace("return n end", "return n + 1 end")
    assert names(checker.check(lying, "time", "report-flood").violations) == {"reports"}


def test_an_oversized_source_is_judged_by_its_size(checker):
    result = checker.check("--" + "x" * (MAX_SOURCE_BYTES - 1), "steps", "source-size")
    assert result.violations == [] and result.status == "error:syntax"
    at = checker.check("--" + "x" * (MAX_SOURCE_BYTES - 2), "steps", "source-size")
    assert at.violations == [] and at.status == "done"


class _QuadraticCopies(Checker):
    """A checker whose sandboxes copy tables out as the host once did: re-finding each key
    with ``next(t, k)``, along its whole chain when the keys collide."""

    def _sandbox(self, budget):
        sb = super()._sandbox(budget)
        walk = sb._rt.eval(
            "function(t) local out, n = {}, 0 local k, v = next(t) while k ~= nil do "
            "out[n + 1], out[n + 2] = k, v n = n + 2 k, v = next(t, k) end return out, n end")

        def pairs(table):
            out, n = walk(table)
            return [out[i] for i in range(1, n + 1)]

        sb._pairs = pairs
        return sb


def test_the_host_work_around_a_resume_excludes_the_run_in_lua(checker):
    # Found by a campaign (seed 2001, example 3360): the host's work measured as CPU time
    # minus the resume's wall time came out negative for a thread descheduled inside the
    # resume, and compared as a violation. The run in Lua is now timed on the same clock.
    from moonbox.fuzz._invariants import CaseResult, _host_s

    result = CaseResult()
    sb = checker._sandbox(Budget(steps=1 << 50, wall_s=5))
    try:
        checker._run(sb, "local x = 0 for i = 1, 3e7 do x = x + i end "
                         "coroutine.yield(x) return {1, 2, 3}", Budget(steps=1 << 50, wall_s=5),
                     result, 1.0)
    finally:
        sb.close()
    assert [o.status for o, *_ in result.resumes] == ["yielded", "done"]
    for _outcome, elapsed, cpu_s, host_s, _ in result.resumes:
        assert 0 <= host_s <= cpu_s <= elapsed + 0.01
    lua_s = result.resumes[0][2] - result.resumes[0][3]
    assert lua_s > 10 * result.resumes[0][3]  # the loop is the Lua part's
    assert _host_s(result) == sum(r[3] for r in result.resumes)


def test_a_quadratic_copy_of_colliding_keys_is_caught_against_its_twin():
    # The invariant is honest: planted into the copy-out path, the quadratic walk the attack
    # review found breaks it, on a program the generator makes.
    source = (colliding_keys_lua() + "local keys = colliding_keys(6400)\nlocal t = {}\n"
              "for i = 1, #keys do t[keys[i]] = i end\n" + COLLIDING_USES["returned"](13))
    assert source == plain_twin(source).replace("plain_keys(6400)", "colliding_keys(6400)")
    quadratic = _QuadraticCopies(jit=True)
    try:
        found = quadratic.check(source, "time", "colliding-keys").violations
    finally:
        quadratic.close()
    assert "host-time" in names(found), found


# -- the sandbox's own parser limits ----------------------------------------------------------


@pytest.mark.parametrize("source", [
    "::top:: " + "goto top " * (MAX_GOTOS + 1),
    "do " + "goto l " * (MAX_GOTOS + 1) + "::l:: end",
])
def test_a_source_past_a_parser_limit_is_expected_refused_though_luajit_takes_it(
        checker, source):
    # LuaJIT's parser takes it (in quadratic work); the sandbox refuses it by a documented
    # limit. That refusal is the expected verdict, and running it would be the miss.
    assert checker.parses(source) and checker.over_parser_limits(source)
    assert names(checker.check(source, "steps", "hostile-size").violations) == set()


def test_a_source_within_the_parser_limits_is_judged_by_luajit_alone(checker):
    assert not checker.over_parser_limits("::top:: " + "goto top " * MAX_GOTOS)
    assert not checker.over_parser_limits("return [[")  # the tokenizer's error: not a limit
