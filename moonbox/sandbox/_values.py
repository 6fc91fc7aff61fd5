"""Values crossing between a run and the host on the hot paths: numbers, booleans and nils
as they are, flat tables from their pairs, a host function's results pushed with the
host's headroom. The general copies and their limits are in :mod:`._marshal`."""

from __future__ import annotations

from typing import Any

from ._marshal import to_lua, to_python
from ._protocols import SandboxState
from ._runtime import HOST_CALL_MARGIN_BYTES, HOST_HEADROOM_BYTES

SCALARS = frozenset({bool, int, float})
MAX_EXACT_INT = 1 << 53  # past this an int crosses as a float (to_lua)
MIN_EXACT_INT = -MAX_EXACT_INT


def lua_text(b: Any) -> str:
    """A Lua string (bytes) as text, undecodable bytes replaced."""
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b)


def all_scalar(values: tuple[Any, ...], start: int = 0) -> bool:
    """Only numbers that are exact in Lua, booleans and nils, from ``start`` on."""
    # Iterated directly (a range and indexing cost several times more per value).
    for v in values[start:] if start else values:
        kind = type(v)
        if kind is float or v is None or kind is bool:
            continue
        if kind is int and MIN_EXACT_INT <= v <= MAX_EXACT_INT:
            continue
        return False
    return True


def from_pairs(flat: Any) -> Any:
    """The plain data of a flat table from its pairs (``n, k1, v1, ...``), as to_python
    copies it: keys exactly 1..n make a list, others a dict; strings decoded."""
    if type(flat) is not tuple:  # n == 0: an empty table
        return {}
    n = flat[0]
    out: dict[Any, Any] = {}
    listed = True
    # One plain loop: comprehensions and generators each cost a frame, several times
    # this whole function for the one- or two-entry tables this path serves.
    for i in range(1, 2 * n, 2):
        k, v = flat[i], flat[i + 1]
        if type(v) is bytes:
            v = v.decode("utf-8", "replace")
        if type(k) is bytes:
            k = k.decode("utf-8", "replace")
            listed = False
        elif listed and not (type(k) is int and 1 <= k <= n):
            listed = False
        out[k] = v
    if listed:  # n distinct keys, each in 1..n
        return [out[i] for i in range(1, n + 1)]
    return out


def resume_values(sb: SandboxState, res: tuple[Any, ...]) -> tuple[Any, ...]:
    """The values of a resume's answer (from its 4th on, checked in Lua already): scalars
    as they are, the rest copied."""
    pairs = sb._pairs
    return tuple([v if v is None or type(v) in SCALARS else to_python(v, pairs)
                  for v in res[3:]])


def lua_results(sb: SandboxState, result: tuple[Any, ...]) -> tuple[Any, ...]:
    """A host function's results as Lua values, or the sandbox's out-of-memory answer
    when their strings would not fit under the limit in force."""
    out: list[Any] = []
    text_bytes = 0
    for value in result:
        # Every value goes back as a Lua value: an int lupa cannot convert would come
        # back to the mod as a Python exception object.
        kind = type(value)
        if value is None or kind is float or kind is bool:
            out.append(value)
        elif kind is int and MIN_EXACT_INT <= value <= MAX_EXACT_INT:
            out.append(value)
        elif kind is int or kind is str or kind is bytes:
            value = value if kind is bytes else to_lua(sb._rt, value)
            if type(value) is bytes:
                text_bytes += len(value)
            out.append(value)
        else:
            out.append(build_table(sb, value))
    # lupa pushes strings after the call returns, with allocations that must not fail
    # (a failure there would unwind through the interpreter). The prelude refused this
    # call within HOST_CALL_MARGIN_BYTES of the limit in force; strings of more than a
    # quarter of that are checked against the room actually left.
    if text_bytes > HOST_CALL_MARGIN_BYTES // 4 and (
        sb._rt.get_memory_used(True) + text_bytes + HOST_CALL_MARGIN_BYTES // 4
        > sb._current_limit
    ):
        return sb._not_enough_memory  # the mod's side turns it into a memory trip
    return tuple(out)


def build_table(sb: SandboxState, value: Any) -> Any:
    """``value`` (plain data) as a Lua table of the sandbox's runtime, built in a run."""
    # Building tables allocates through lupa's unprotected API: the host's work gets the
    # headroom above the resume's limit (the prelude already refused a call made within
    # its margin of the cap), so an allocation never fails there.
    rt = sb._rt
    rt.set_max_memory(sb._limit + HOST_HEADROOM_BYTES, True)
    try:
        return to_lua(rt, value)
    finally:
        rt.set_max_memory(sb._limit, True)
        sb._current_limit = sb._limit
