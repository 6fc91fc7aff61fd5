"""The benchmark suite's programs: what each one is, and that the sandbox runs each to the
same checksum as raw LuaJIT. Nothing here is timed (see benchmarks/ and moonbox bench)."""

from __future__ import annotations

import pytest

from moonbox.bench import PROGRAMS, fresh_runner, program_source


def test_the_suite_has_thirty_programs_or_more_each_described():
    assert len(PROGRAMS) >= 30
    for program in PROGRAMS:
        assert program.description, program.name
        source = program_source(program.name)
        # Each checks its own result: a wrong answer fails the run, whatever mode it is in.
        assert "assert(" in source, program.name


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_the_sandbox_returns_raw_luajits_checksum(program):
    values = []
    for mode in ("raw", "metered"):
        runner = fresh_runner(program.name, mode)
        try:
            values.append(runner())
        finally:
            runner.close()
    assert values[0] == values[1]
