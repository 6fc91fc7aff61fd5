"""``moonbox fuzz``: programs composed from dangerous primitives, checked against invariants.

:mod:`._programs` holds the generator (strategies of Lua programs), :mod:`._invariants` the
checker that runs one program and names every invariant it broke, :mod:`._worker` the
process programs run in, and :mod:`._runner` the loop that drives them and writes
reproducers. The generator needs the ``hypothesis`` package (``pip install moonbox[fuzz]``);
the checker does not.
"""

from ._invariants import (
    DEFAULT_MARGIN_S,
    DEFAULT_WALL_S,
    CaseResult,
    Checker,
    Violation,
    budget_for,
    check_outcome,
    check_plain,
    check_wall,
)

__all__ = [
    "DEFAULT_MARGIN_S",
    "DEFAULT_WALL_S",
    "CaseResult",
    "Checker",
    "Violation",
    "budget_for",
    "check_outcome",
    "check_plain",
    "check_wall",
]
