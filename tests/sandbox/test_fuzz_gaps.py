"""The fuzzer's hostile-size and metering-gap cases.

Each family and shape is what it claims (valid Lua, or refused by LuaJIT at some size);
each loads in work linear in its size; every metering-gap loop is stopped by its step budget;
and ``fuzz_cases`` mixes both kinds in with the composed programs. Counts and kinds only:
the wall-clock side of these programs is the fuzzer's ``wall-time`` invariant.
"""

from __future__ import annotations

import pytest
from host_work import instrument_work
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from lupa import luajit21

from moonbox import Budget, BudgetExceeded, Sandbox
from moonbox.fuzz._programs import (
    HOSTILE_SIZE_MAX,
    HOSTILE_SOURCES,
    METERING_GAP_MAX,
    METERING_GAPS,
    VALID_HOSTILE_SOURCES,
    WARM_UP,
    FuzzCase,
    fuzz_cases,
)

CHUNK = "@fuzz/program.lua"


@pytest.fixture(scope="module")
def parses():
    rt = luajit21.LuaRuntime(register_eval=False, register_builtins=False, encoding=None)
    load = rt.eval("function(s) return load(s, '=fuzz', 't') ~= nil end")
    return lambda src: bool(load(src.encode("utf-8", "surrogateescape")))


@pytest.mark.parametrize("family", sorted(VALID_HOSTILE_SOURCES))
def test_valid_hostile_families_are_valid_at_every_size(parses, family: str) -> None:
    for n in (1, 2, 7, 300, HOSTILE_SIZE_MAX):
        assert parses(HOSTILE_SOURCES[family](n)), n


@pytest.mark.parametrize("family", sorted(set(HOSTILE_SOURCES) - VALID_HOSTILE_SOURCES))
def test_the_other_families_are_refused_at_some_size(parses, family: str) -> None:
    assert not all(parses(HOSTILE_SOURCES[family](n)) for n in (1, 2, 7, 300, HOSTILE_SIZE_MAX))


@pytest.mark.parametrize("shape", sorted(METERING_GAPS))
def test_metering_gap_programs_are_valid_at_every_size(parses, shape: str) -> None:
    for k in (1, 2, 100, METERING_GAP_MAX):
        assert parses(WARM_UP + METERING_GAPS[shape](k)), k


@pytest.mark.parametrize("shape", sorted(METERING_GAPS))
def test_metering_gap_programs_load_in_linear_work(shape: str) -> None:
    make = METERING_GAPS[shape]
    small, large = instrument_work(make(300)), instrument_work(make(600))
    assert large <= 2.2 * small + 400


@pytest.mark.parametrize("shape", sorted(set(METERING_GAPS) - {"top_level"}))
def test_every_metering_gap_loop_trips_its_step_budget(shape: str) -> None:
    with Sandbox(Budget(steps=50_000, wall_s=60)) as sb:
        out = sb.run(METERING_GAPS[shape](300), CHUNK)
    assert out.status == "budget"
    assert isinstance(out.error, BudgetExceeded) and out.error.budget == "steps"
    assert out.error.chunk == CHUNK and out.error.line is not None


def test_the_long_top_level_is_charged_for_its_statements() -> None:
    with Sandbox(Budget(steps=1 << 52, wall_s=60)) as sb:
        out = sb.run(METERING_GAPS["top_level"](3_000), CHUNK)
    assert out.status == "done"
    assert out.stats.steps >= 3_000 * 10 // 64 * 0.75  # 10 tokens a statement


def test_fuzz_cases_mix_in_both_kinds() -> None:
    cases: list[FuzzCase] = []

    @hypothesis_seed(7)
    @settings(max_examples=200, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(fuzz_cases())
    def collect(case: FuzzCase) -> None:
        cases.append(case)

    collect()
    hostile = [c for c in cases if (c.corruption or "").startswith("hostile size")]
    gaps = [c for c in cases if c.source.startswith(WARM_UP)]
    assert len(hostile) >= 5 and len(gaps) >= 5
    assert sum(c.corruption is not None for c in cases) < len(cases) // 4
