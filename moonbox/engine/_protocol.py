"""The dispatcher's protocol: how the host and ``mod_runtime.lua`` talk, and what checks
every answer.

The host resumes a mod's dispatcher with ``(what, a, b, c)``: ``what > 0`` calls callback
``what``, ``what < 0`` resumes waiting task ``-what``, a string calls that export, and
``0`` is an engine operation (``a`` a task id: forget it; ``"snapshot"``, ``"restore"``).
It yields ``(code, x, y, ...)``. Nothing the dispatcher yields is trusted: the mod's code
runs in the same runtime, so :func:`checked_yield` holds every answer to the protocol.
"""

from __future__ import annotations

import math
import re
from importlib import resources
from typing import Any

from .._errors import ScriptError

__all__ = [
    "DONE",
    "DONE_ONLY",
    "FAILED",
    "MAX_MESSAGE_CHARS",
    "MAX_WAIT_TICKS",
    "MISSING",
    "PAUSED_RUN",
    "RUNTIME",
    "RUNTIME_CHUNK",
    "WAIT",
    "checked_yield",
    "error_from_message",
    "shown",
    "task_id",
]

RUNTIME_CHUNK = "@moonbox/engine/mod_runtime.lua"
RUNTIME = resources.files("moonbox.engine").joinpath("mod_runtime.lua").read_text("utf-8")
"""The engine library's source (``mod_runtime.lua``)."""

DONE, WAIT, FAILED, MISSING = 0, 1, 2, 3
# A wait whose task is the dispatcher's own coroutine: a callback it ran on it paused. The
# Lua side keeps that coroutine as the task; the host starts the dispatcher again.
PAUSED_RUN = 4
DONE_ONLY = ()  # what the dispatcher yields when a handler returned normally
_DONE_PLAIN = (DONE, None, None)  # the same, as the codes read it
MAX_WAIT_TICKS = 1_000_000  # wait(ticks): 1..MAX_WAIT_TICKS
# A failed callback's message, at most (the engine's Lua side cuts it at the same length).
MAX_MESSAGE_CHARS = 4096
MAX_POINT_CHARS = 64  # a resume point's name: 1..64 characters

_POSITION = re.compile(r"^(.*?):(\d+): (.*)$", re.DOTALL)


def error_from_message(message: Any, chunk: str) -> ScriptError:
    """The error a failed callback reported: its message, and the position it names."""
    # The engine's Lua side sends a bounded string; anything else is shown, never copied.
    if isinstance(message, str):
        text = message if len(message) <= MAX_MESSAGE_CHARS else message[:MAX_MESSAGE_CHARS] + "..."
    else:
        text = f"(error object is a {type(message).__name__} value)"
    m = _POSITION.match(text)
    if m and not m.group(1).startswith("["):
        where = m.group(1)
        return ScriptError(m.group(3), chunk=where if where[:1] in "@=" else "@" + where,
                           line=int(m.group(2)))
    return ScriptError(text, chunk=chunk)


def task_id(value: Any) -> int | None:
    """A task id as the dispatcher yields it (an int from 1), or ``None``."""
    if type(value) is float and value.is_integer():
        value = int(value)
    return value if type(value) is int and value >= 1 else None


def checked_yield(values: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """What the dispatcher yielded, if it fits its protocol; ``None`` if it does not.

    A wait comes back as ``(WAIT, task, ticks, point, data)``: ticks clamped to
    1..MAX_WAIT_TICKS as an int, ``point`` a resume point's name or ``None`` (then
    ``data`` is ``None`` too).
    """
    if not values:
        return _DONE_PLAIN
    code = values[0]
    if type(code) is not int:
        return None
    if code == DONE or code == MISSING:
        return values
    if code != WAIT or len(values) < 3:
        return None
    tid, ticks = task_id(values[1]), values[2]
    if tid is None or type(ticks) not in (int, float) or not math.isfinite(ticks):
        return None
    point = values[3] if len(values) > 3 else None
    if point is not None and not (type(point) is str and 1 <= len(point) <= MAX_POINT_CHARS):
        return None
    data = values[4] if point is not None and len(values) > 4 else None
    return (WAIT, tid, int(min(max(ticks, 1), MAX_WAIT_TICKS)), point, data)


def shown(values: tuple[Any, ...]) -> str:
    """A short rendering of what the dispatcher yielded, for an error message."""
    text = ", ".join(repr(v) if isinstance(v, (int, float, str)) or v is None
                     else type(v).__name__ for v in values[:3])
    return f"({text[:120]})"
