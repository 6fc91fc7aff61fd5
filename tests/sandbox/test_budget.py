"""Budget validation and size parsing."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from moonbox import Budget
from moonbox.sandbox import parse_size


def test_defaults_are_the_documented_ones():
    b = Budget()
    assert (b.steps, b.wall_s, b.alloc_bytes, b.max_memory) == (10_000_000, 1.0, 64 << 20, 64 << 20)
    assert b.total_steps is None


def test_budget_is_frozen():
    b = Budget()
    with pytest.raises(ValidationError):
        b.steps = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"steps": 0},
        {"steps": -1},
        {"wall_s": 0},
        {"wall_s": float("inf")},
        {"wall_s": float("nan")},
        {"alloc_bytes": 0},
        {"max_memory": 1000},
        {"steps": 10, "total_steps": 5},
        {"unknown": 1},
    ],
)
def test_limits_that_cannot_be_enforced_are_refused(kwargs):
    with pytest.raises(ValidationError):
        Budget(**kwargs)


def test_sizes_accept_suffixes():
    assert Budget(max_memory="2MB", alloc_bytes="512KB").max_memory == 2 << 20
    assert parse_size("64MB") == 64 << 20
    assert parse_size("64mib") == 64 << 20
    assert parse_size("1.5GB") == int(1.5 * (1 << 30))
    assert parse_size("4096") == 4096
    assert parse_size(7) == 7


@pytest.mark.parametrize("text", ["", "MB", "-1", "12 parsecs", "1e3"])
def test_bad_sizes(text):
    with pytest.raises(ValueError):
        parse_size(text)
