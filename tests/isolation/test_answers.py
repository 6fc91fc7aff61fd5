"""The host's reading of a worker's answer to a run or resume: the usual answer has a short
path of its own, which must take nothing the general reading refuses and build the same
outcome from what it takes. Checked on the usual answer with fields swapped for what a
worker taken over by a VM bug might send instead."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from moonbox import MoonboxError
from moonbox.isolation import IsolatedSandbox
from moonbox.isolation._process import WorkerLost

_SCALARS = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats()
            | st.text(max_size=4) | st.binary(max_size=3))
_ANY = _SCALARS | st.lists(_SCALARS, max_size=3) | st.dictionaries(st.text(max_size=3),
                                                                    _SCALARS, max_size=2)
_ERROR = {"kind": "runtime", "message": "boom", "chunk": "=m", "line": 1, "traceback": []}
_USUAL = ["r", "yielded", [1, "x", None], 7, 150_000, 1.5e-5, None, None, 0]
# Per field of the usual answer: what else a worker might send there.
_OTHERS = [
    ["script", "fail", "ok", "call", "R"],
    ["done", "preempted", "error", "budget", "finished", "Done"],
    [[], [[1, 2], {"a": b"\xff"}], (1,)],
    [0, 2**40, -1, 1.5, True],
    [0, 2**62, -3, 2.0, False],
    [0.0, 0, -1.0, float("nan"), float("inf"), True],
    [_ERROR, {"kind": "budget"}, {}],
    [[None], [{"a": 1}], [1, 2], [], "could not copy"],
    [1, -1, True, 0.0],
]


@st.composite
def _answers(draw: st.DrawFn) -> list[Any]:
    """The usual answer with one to three fields swapped, or a message of any length."""
    if draw(st.integers(0, 4)) == 0:
        return [draw(st.sampled_from([*_OTHERS[0], "r"])), *draw(st.lists(_ANY, max_size=9))]
    reply = list(_USUAL)
    for index in draw(st.lists(st.integers(0, 8), min_size=1, max_size=3, unique=True)):
        reply[index] = draw(st.sampled_from(_OTHERS[index]) | _ANY)
    if type(reply[0]) is not str:  # what the host reads is a message (see exchange_locked)
        reply[0] = "r"
    return reply


def _read(sb: IsolatedSandbox, how: Any, reply: list[Any]) -> tuple[Any, ...]:
    """What ``how`` made of ``reply``: the outcome (its error by kind and message) and what
    it changed in the sandbox, or the failure it raised."""
    sb._snapshot, sb._replaced_here, sb.replacements, sb._remake = (), 0, 0, False
    try:
        outcome = how(list(reply), ("a report",))
    except WorkerLost:
        return ("lost",)
    except MoonboxError as exc:
        return ("refused", type(exc).__name__, str(exc))
    error = outcome.error
    return ("read", outcome.status, outcome.values, outcome.reports, tuple(outcome.stats),
            None if error is None else (error.kind, error.message), sb._snapshot,
            sb._replaced_here, sb.replacements, sb._remake)


def test_the_usual_answer_reads_as_the_general_reading_reads_it():
    sb = IsolatedSandbox(state_global=None)
    try:
        read = _read(sb, sb._result, _USUAL)
        assert read == _read(sb, sb._unusual_result, _USUAL)
        assert read[:5] == ("read", "yielded", (1, "x", None), ("a report",),
                            (7, 150_000, 1.5e-5))
        with_state = [*_USUAL[:7], [{"hp": 3}], 0]
        assert _read(sb, sb._result, with_state)[6] == ({"hp": 3},)

        @settings(max_examples=500, deadline=None)
        @given(_answers())
        def same(reply: list[Any]) -> None:
            assert _read(sb, sb._result, reply) == _read(sb, sb._unusual_result, reply)

        same()
    finally:
        sb.close()
