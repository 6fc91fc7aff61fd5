"""Every piece of code a mod runs is charged, straight-line code and loop conditions too.

A step is meant to be a bounded amount of work: the meter reads the clock only every K
steps, so code that runs without being charged runs without the clock being read. Two gaps
were found by attacking the instrumenter:

- the main chunk's top level had no check at all: 2,000 top-level lines each comparing two
  24 MiB strings ran for seconds under a 1 s wall budget and finished ``done``;
- ``while`` and ``repeat ... until`` conditions were not weighed: 500 ``math.sin`` calls in a
  ``while`` condition cost one step per iteration, 55 times less than the same calls in the
  body.

These tests count steps, never milliseconds: the steps charged for N top-level statements
grow with N, the steps of a loop grow with the work its condition repeats, and a long
straight-line chunk trips a step budget it cannot fit in.
"""

from __future__ import annotations

import pytest

from moonbox import Budget, BudgetExceeded, Sandbox
from moonbox.sandbox._instrument import SEGMENT_TOKENS, TOKENS_PER_STEP

both_modes = pytest.mark.parametrize("jit", [True, False], ids=["jit", "hook"])

UNLIMITED = Budget(steps=1 << 52, wall_s=60)
CHUNK = "@mods/attacker/main.lua"


def steps_of(source: str, *, jit: bool = True) -> int:
    with Sandbox(UNLIMITED, jit=jit) as sb:
        out = sb.run(source, CHUNK)
    assert out.status == "done", out.error
    return out.stats.steps


def sin_sum(k: int) -> str:
    """``k`` calls of a library function, as one expression (7 tokens a term)."""
    return " + ".join(f"math.sin({i})" for i in range(k))


# -- the main chunk's top level ---------------------------------------------------------------


def straight_line(lines: int) -> str:
    return "local x = 0\n" + "x = x + 1\n" * lines + "return x"


@pytest.mark.parametrize("lines", [2_000, 4_000, 8_000])
def test_the_top_level_is_charged_for_its_statements(lines: int) -> None:
    # Each line is 5 tokens: the chunk costs about one step per TOKENS_PER_STEP tokens, less
    # what each check rounds down (at most one step per segment).
    steps = steps_of(straight_line(lines))
    tokens = 5 * lines
    segments = tokens // SEGMENT_TOKENS + 1
    assert tokens // TOKENS_PER_STEP - segments <= steps <= tokens // TOKENS_PER_STEP + 1


def test_top_level_steps_grow_with_the_chunk() -> None:
    small, large = steps_of(straight_line(3_000)), steps_of(straight_line(6_000))
    assert small >= 3_000 * 5 // TOKENS_PER_STEP * 0.9
    assert 1.9 * small <= large <= 2.1 * small + 2


def test_a_short_chunk_still_costs_nothing() -> None:
    assert steps_of("local x = 1 x = x + 1 return x") == 0


@both_modes
def test_a_long_straight_line_chunk_trips_a_step_budget(jit: bool) -> None:
    """No loop, no call: 40,000 top-level statements cannot fit in 1,000 steps."""
    src = straight_line(40_000)
    with Sandbox(Budget(steps=1_000, wall_s=60), jit=jit) as sb:
        out = sb.run(src, CHUNK)
    assert out.status == "budget"
    assert isinstance(out.error, BudgetExceeded)
    assert (out.error.budget, out.error.limit) == ("steps", 1_000)
    # It trips part-way down the chunk, at a line of the mod's own.
    assert out.error.chunk == CHUNK and 2 <= out.error.line <= 40_001


def test_straight_line_code_passes_checks_a_segment_apart() -> None:
    """The checks of a long chunk are spread through it: each charges a bounded amount."""
    from moonbox.sandbox._instrument import _plan_of

    src = straight_line(10_000)
    _, offsets, weights = _plan_of(src)
    assert len(offsets) >= 5 * 10_000 // (SEGMENT_TOKENS + 5)
    assert max(weights) <= (SEGMENT_TOKENS + 5) // TOKENS_PER_STEP
    gaps = [b - a for a, b in zip(offsets, offsets[1:], strict=False)]
    assert max(gaps) <= (SEGMENT_TOKENS + 5) * len("x = x + 1\n") // 5


def test_a_long_function_body_is_charged_on_every_call() -> None:
    body = "x = x + 1\n" * 2_000
    src = f"local x = 0\nlocal function f()\n{body}end\nfor i = 1, 10 do f() end\nreturn x"
    steps = steps_of(src)
    assert steps >= 10 * (5 * 2_000 // TOKENS_PER_STEP - 5 * 2_000 // SEGMENT_TOKENS)


# -- what loops repeat: conditions ------------------------------------------------------------


def while_loop(k: int, iterations: int = 200) -> str:
    return (f"local i = 0\nwhile i < {iterations} and ({sin_sum(k)}) ~= 12345 do\n"
            "  i = i + 1\nend\nreturn i")


def repeat_loop(k: int, iterations: int = 200) -> str:
    return (f"local i = 0\nrepeat\n  i = i + 1\nuntil i >= {iterations} and "
            f"({sin_sum(k)}) ~= 12345\nreturn i")


@pytest.mark.parametrize("loop", [while_loop, repeat_loop], ids=["while", "repeat"])
@pytest.mark.parametrize("k", [50, 100, 400])
def test_a_loop_condition_is_charged_on_every_iteration(loop, k: int) -> None:
    # 200 iterations, each evaluating k library calls in the condition (7 tokens each).
    steps = steps_of(loop(k))
    per_iteration = 7 * k // TOKENS_PER_STEP
    assert steps >= 200 * per_iteration


@pytest.mark.parametrize("loop", [while_loop, repeat_loop], ids=["while", "repeat"])
def test_loop_steps_grow_with_the_work_the_condition_repeats(loop) -> None:
    small, large = steps_of(loop(100)), steps_of(loop(200))
    assert small >= 200 * 10  # 700 tokens a condition: about 11 steps an iteration
    assert large >= 1.8 * small


def test_a_condition_costs_what_the_same_work_costs_in_the_body() -> None:
    in_condition = steps_of(while_loop(500))
    in_body = steps_of(
        f"local i, s = 0, 0\nwhile i < 200 do\n  i = i + 1\n  s = {sin_sum(500)}\nend\nreturn i"
    )
    assert 0.9 * in_body <= in_condition <= 1.1 * in_body


def test_a_numeric_for_limit_is_charged_once() -> None:
    """The limits of a numeric `for` run once: the loop costs a step an iteration."""
    src = f"local n = 0\nfor i = 1, 100 + 0 * ({sin_sum(100)}) do n = n + 1 end\nreturn n"
    steps = steps_of(src)
    assert 100 <= steps <= 100 + 7 * 100 // TOKENS_PER_STEP + 1


def test_a_generic_for_iterator_is_charged_on_every_call() -> None:
    # The iterator is a Lua function: its entry charges its own long body on every call.
    src = (
        "local function it(n)\n  local i = 0\n  return function()\n    i = i + 1\n"
        f"    local s = {sin_sum(100)}\n    if i <= n then return i end\n  end\nend\n"
        "local c = 0\nfor v in it(200) do c = c + v end\nreturn c"
    )
    steps = steps_of(src)
    assert steps >= 201 * (7 * 100 // TOKENS_PER_STEP)


def test_a_goto_loop_is_charged_for_the_code_it_repeats() -> None:
    body = "x = x + 1\n" * 400  # 2,000 tokens between the label and the goto
    src = f"local i, x = 0, 0\n::top::\ni = i + 1\n{body}if i < 100 then goto top end\nreturn x"
    steps = steps_of(src)
    per_round = 5 * 400 // TOKENS_PER_STEP - 5 * 400 // SEGMENT_TOKENS - 1
    assert steps >= 100 * per_round


def test_an_until_condition_is_charged_when_a_goto_skips_the_rest_of_the_body() -> None:
    """A forward goto to a label right before `until` skips the body's later checks: the
    condition is charged by the loop's own check, which every iteration passes."""
    rest = "x = x + 1\n" * 200  # long enough for checks of its own
    src = (f"local i, x = 0, 0\nrepeat\n  i = i + 1\n  if i > 0 then goto next end\n{rest}"
           f"  ::next::\nuntil i >= 200 and ({sin_sum(100)}) ~= 12345\nreturn i")
    steps = steps_of(src)
    assert steps >= 200 * (7 * 100 // TOKENS_PER_STEP)
