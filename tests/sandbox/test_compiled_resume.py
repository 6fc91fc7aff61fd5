"""The compiled resume (moonbox/sandbox/_resume.c): Run.call's steady state resumes the run
without the prelude's bookkeeping, and answers exactly what the prelude's host.call does."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moonbox import Budget, Sandbox
from moonbox.sandbox._runtime import compiled_resume, resume_call

pytestmark = pytest.mark.skipif(not compiled_resume(), reason="the compiled resume is not built")

# A run the host calls over and over; each call's first argument says what it does.
SCRIPT = """
local big = {}
while true do
  local what, n = coroutine.yield()
  if what == 1 then report("line " .. n)
  elseif what == 2 then while true do end
  elseif what == 3 then error("bad " .. n)
  elseif what == 4 then big[#big + 1] = ("x"):rep(n)
  elseif what == 5 then coroutine.yield(n, "v", true)
  elseif what == 6 then return n, "end"
  elseif what == 7 then big = {}
  elseif what == 8 then local ok = pcall(function() while true do end end)
  end
end
"""

BUDGET = Budget(steps=200_000, alloc_bytes="1MB", wall_s=10.0)


def _refused(*args: Any) -> Any:
    raise AssertionError("the prelude's host.call was called")


def _answer(out: Any, steps: bool) -> Any:
    """What a call answered, comparable across sandboxes. With ``steps`` False (jit=False,
    where the count hook fires every HOOK_STEPS steps of VM instructions, the host's own
    included, so where a count lands depends on how much bookkeeping ran) without the
    steps and the messages that quote them."""
    if type(out) is int:
        return ("steps", out if steps else None)
    error = out.error
    kind = None
    if error is not None:
        budget = getattr(error, "budget", None)
        kind = (type(error).__name__, budget, str(error) if steps or budget is None else None,
                error.line)
    return (out.status, out.values, kind, out.stats.steps if steps else None)


def _calls(sb: Sandbox, actions: list[tuple[int, int]]) -> list[Any]:
    steps = sb.jit
    run = sb.start(SCRIPT, "=calls")
    answers = [run.resume().status]
    for what, n in actions:
        if run.finished:
            run = sb.start(SCRIPT, "=calls")
            answers.append(("new", run.resume().status))
        out = run.call(sb.clock(), what, n)
        answers.append((_answer(out, steps), tuple(run.reports)))
    return answers


def test_the_structs_are_laid_out_alike_in_c_and_in_the_ffi():
    # Declared twice (meter.lua's cdef, _resume.c): a field out of place would be read and
    # written at another's offset. Sizes and every field's offset agree.
    from moonbox.sandbox._resume import layout

    with Sandbox(BUDGET) as sb:
        for ctype, (size, fields) in zip(("moonbox_meter", "moonbox_run"), layout(), strict=True):
            got = sb._rt.execute(
                "local ffi, ctype, names = require('ffi'), ... "
                "local out = {ffi.sizeof(ctype)} "
                "for i, name in ipairs(names) do out[i + 1] = ffi.offsetof(ctype, name) end "
                "return unpack(out)", ctype.encode(),
                sb._rt.table_from([n.encode() for n, _ in fields]))
            assert got == (size, *(offset for _, offset in fields)), ctype


def test_the_steady_state_never_runs_the_preludes_call(make_sandbox):
    sb = make_sandbox(BUDGET)
    run = sb.start(SCRIPT, "=calls")
    run.resume()
    assert type(run.call(sb.clock(), 0, 0)) is int  # the first call: the prelude's way
    if sb.jit:
        sb._h_call = _refused
    # (Under the count hook of jit=False, a call whose hook landed in the prelude's own
    # code, its yield say, ends armed for single instructions; the next call takes the
    # prelude's way, which sets the hook again. Where it lands depends on how many of
    # the prelude's instructions a call runs; the answers are the same either way.)
    for n in range(50):
        assert type(run.call(sb.clock(), 1, n)) is int
        assert run.reports == [f"line {n}"]
    out = run.call(sb.clock(), 5, 9)  # values: host.call_end answers, not host.call
    assert out.status == "yielded" and out.values == (9, "v", True)
    assert type(run.call(sb.clock(), 0, 0)) is int  # what that inner yield returns
    out = run.call(sb.clock(), 2, 0)
    assert out.status == "budget" and out.error.budget == "steps" and out.error.line == 6


def test_a_call_trips_on_time_through_the_compiled_resume(make_sandbox):
    sb = make_sandbox(Budget(steps=1 << 52, wall_s=0.05))
    run = sb.start(SCRIPT, "=calls")
    run.resume()
    run.call(sb.clock(), 0, 0)
    sb._h_call = _refused
    out = run.call(sb.clock(), 2, 0)
    assert out.status == "budget" and out.error.budget == "time", out
    run = sb.start(SCRIPT, "=calls")
    run.resume()
    run.call(sb.clock(), 0, 0)
    out = run.call(sb.clock(), 8, 0)  # a protected loop: the trip is not caught
    assert out.status == "budget" and out.error.budget == "time", out


def test_a_call_trips_on_memory_through_the_compiled_resume(make_sandbox):
    sb = make_sandbox(Budget(steps=1 << 40, alloc_bytes="1MB", max_memory="64MB"))
    run = sb.start(SCRIPT, "=calls")
    run.resume()
    run.call(sb.clock(), 0, 0)
    sb._h_call = _refused
    for _ in range(20):
        assert type(run.call(sb.clock(), 4, 300 << 10)) is int
    out = run.call(sb.clock(), 4, 1200 << 10)
    assert out.status == "budget" and out.error.budget == "memory", out


def test_a_trip_taken_the_preludes_way_leaves_the_next_call_clean(make_sandbox):
    # The trip flag lives in the prelude; the compiled resume cannot clear it. Every end the
    # prelude answers clears it, so the next call of another run starts with a fresh budget.
    sb = make_sandbox(BUDGET)
    a = sb.start(SCRIPT, "=a")
    a.resume()
    a.call(sb.clock(), 0, 0)
    b = sb.start("while true do end", "=b")
    assert b.resume().error.budget == "steps"  # the prelude's resume trips
    for n in range(5):
        assert type(a.call(sb.clock(), 1, n)) is int
    c = sb.start("while true do end", "=c")
    assert c.resume().error.budget == "steps"
    out = a.call(sb.clock(), 2, 0)
    assert out.error.budget == "steps" and out.stats.steps > BUDGET.steps  # all of it


_ACTIONS = st.lists(
    st.tuples(st.sampled_from([0, 0, 1, 1, 3, 4, 5, 6, 7, 2]), st.integers(0, 400_000)),
    max_size=24,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=_ACTIONS, jit=st.booleans())
def test_the_compiled_resume_answers_as_the_preludes_call(actions, jit):
    budget = Budget(steps=200_000, alloc_bytes="1MB", max_memory="64MB")
    with Sandbox(budget, jit=jit) as compiled, Sandbox(budget, jit=jit) as prelude:
        prelude._resumer.close()
        prelude._resumer = None  # every call the prelude's host.call
        assert _calls(compiled, actions) == _calls(prelude, actions)


def test_a_closed_sandbox_leaves_the_compiled_resume_nothing_to_touch():
    sb = Sandbox(BUDGET)
    run = sb.start(SCRIPT, "=calls")
    run.resume()
    run.call(sb.clock(), 0, 0)
    resumer, co, figures = sb._resumer, run._c_co, run._c_run
    assert co and figures
    sb.close()
    assert run._c_co == 0
    call = resume_call()
    assert call(resumer, co, figures, 1, 0.0, False, False) is NotImplemented


def test_a_finished_run_keeps_no_addresses(make_sandbox):
    # Its coroutine and figures may be freed once it is closed: the run drops them first.
    sb = make_sandbox(BUDGET)
    run = sb.start(SCRIPT, "=calls")
    run.resume()
    run.call(sb.clock(), 0, 0)
    assert run._c_co and run._c_run
    out = run.call(sb.clock(), 6, 3)
    assert out.status == "done" and out.values == (3, "end")
    assert run._c_co == 0 and run._c_run == 0
    other = sb.start(SCRIPT, "=other")
    other.resume()
    other.call(sb.clock(), 0, 0)
    assert other._c_co
    other.close()
    assert other._c_co == 0 and other._c_run == 0


def test_arguments_it_cannot_push_take_the_preludes_way(make_sandbox):
    sb = make_sandbox(BUDGET)
    run = sb.start(SCRIPT, "=calls")
    run.resume()
    run.call(sb.clock(), 0, 0)
    call = resume_call()
    assert call(sb._resumer, run._c_co, run._c_run, run._id, sb.clock(), False, False,
                "text") is NotImplemented
    assert call(sb._resumer, run._c_co, run._c_run, run._id, sb.clock(), False, False,
                *range(17)) is NotImplemented
    assert type(run.call(sb.clock(), 1, 1)) is int  # nothing was pushed
