"""Loading a mod costs the host work linear in the mod's source, whatever the source.

A mod controls its text, so every pass over it (the tokenizer, the instrumenter's plan) must
do work proportional to its size, valid Lua or not: a pass that rescans ahead is a way to
stall the host before the mod runs (16,000 ``function`` tokens and one ``()`` once blocked
``Sandbox.load`` for 18-25 s). Work is counted (lines executed, ``host_work``), never timed:
each family of hostile sources is built at size n and 2n, and the work at 2n must stay within
about twice the work at n.
"""

from __future__ import annotations

import pytest
from host_work import ALPHABET, HOSTILE, instrument_work
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moonbox import Sandbox, ScriptError

PROPERTY = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Doubling the source may at most double the work, plus this much: the ratio leaves room
# for the fixed cost of a call and for sizes that round (a name of n digits, say).
SLACK_RATIO = 2.2
SLACK_LINES = 400


def assert_linear(make, n: int) -> None:
    small, large = instrument_work(make(n)), instrument_work(make(2 * n))
    assert large <= SLACK_RATIO * small + SLACK_LINES, (n, small, large)


# Every family is checked so that no pass starts rescanning...
@pytest.mark.parametrize("family", HOSTILE.keys())
def test_each_hostile_family_costs_linear_work(family: str) -> None:
    assert_linear(HOSTILE[family], 400)


# ...and these were quadratic: the planner scanned ahead from each `function` to the next
# `(` and `)`, across every other `function` before them (at 400 pieces, doubling the source
# made 3.8 times the work).
WERE_QUADRATIC = ("functions_then_one_paren", "open_parameter_lists",
                  "local_functions_then_one_body")


@pytest.mark.parametrize("family", WERE_QUADRATIC)
def test_the_shapes_that_were_quadratic_are_linear(family: str) -> None:
    for n in (1_000, 4_000):
        assert_linear(HOSTILE[family], n)


@settings(PROPERTY, max_examples=60)
@given(family=st.sampled_from(sorted(HOSTILE)), n=st.integers(150, 900))
def test_hostile_families_at_any_size_cost_linear_work(family: str, n: int) -> None:
    assert_linear(HOSTILE[family], n)


@settings(PROPERTY, max_examples=80)
@given(pattern=st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=6),
       n=st.integers(100, 600))
def test_alternating_token_soups_cost_linear_work(pattern: list[str], n: int) -> None:
    piece = " ".join(pattern) + "\n"
    assert_linear(lambda k: piece * k, n)


def test_the_counter_sees_quadratic_work() -> None:
    """The measure itself: work that does rescan shows as growing four-fold when doubled."""
    from host_work import counted_work

    from moonbox.sandbox._tokenizer import tokenize

    def rescan(n: int) -> int:
        return counted_work(lambda: [tokenize("x = 1 " * k) for k in range(0, n, 10)])

    assert rescan(400) > 3.5 * rescan(200)


def test_the_first_report_of_the_attack_loads_in_linear_work() -> None:
    """16,000 `function` tokens and one `()` (144 KB of invalid source): a syntax error,
    reached after work linear in the source."""
    src = "function " * 16_000 + "()"
    work = instrument_work(src)
    assert work <= 40 * len(src)
    with Sandbox() as sb:
        with pytest.raises(ScriptError) as info:
            sb.load(src, "@mods/attack.lua")
    assert info.value.kind == "syntax"
