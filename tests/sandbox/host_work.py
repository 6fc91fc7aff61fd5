"""Counting the host's work on a mod's source, never timing it.

:func:`counted_work` runs a function under a tracer that counts every line executed in the
tokenizer and the instrumenter (``moonbox/sandbox/_tokenizer.py``, ``_instrument.py``): the
number is the same on a fast machine and a slow one, and a loop that rescans the source
shows as work that grows faster than the source. What the tracer cannot see are the C-level
string operations those lines call (``str.find``, slicing, ``startswith``, the tokenizer's
regular expressions, each a run of one character class that never backtracks); each runs
over text the lexer then consumes or copies once, so its work is linear in the text it
passes over, and the lines that call it are counted.

:data:`HOSTILE` holds the source families the linearity tests double: each maps a size ``n``
to a source of ``n`` repeated pieces, valid or not.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from moonbox.fuzz._programs import HOSTILE_SOURCES
from moonbox.sandbox import _instrument, _tokenizer
from moonbox.sandbox._instrument import ReservedNameError, _plans, instrument
from moonbox.sandbox._tokenizer import LuaTokenError

_COUNTED_FILES = frozenset({_instrument.__file__, _tokenizer.__file__})

CELL, POLL, SLOW = "__mb_n", "__mb_p", "__mb_s"


def counted_work(fn: Callable[[], Any]) -> int:
    """Lines of the tokenizer and the instrumenter executed by ``fn()``.

    An error that the instrumenter raises on invalid Lua (a token error, a reserved name, a
    ``ValueError``) ends the call like a return: refusing a source is work too.
    """
    lines = 0

    def count_lines(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal lines
        if event == "line":
            lines += 1
        return count_lines

    def on_call(frame: FrameType, event: str, arg: Any) -> Any:
        return count_lines if frame.f_code.co_filename in _COUNTED_FILES else None

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        fn()
    except (LuaTokenError, ReservedNameError, ValueError):
        pass
    finally:
        sys.settrace(previous)
    return lines


def instrument_work(src: str) -> int:
    """Counted work of instrumenting ``src`` from scratch (no cached plan)."""
    _plans.clear()
    try:
        return counted_work(lambda: instrument(src, cell=CELL, poll=POLL, slow=SLOW))
    finally:
        _plans.clear()


HOSTILE: dict[str, Callable[[int], str]] = {
    **HOSTILE_SOURCES,
    # Refused for its last line (a reserved name), after the whole source was read.
    "reserved_name_last": lambda n: "x = 1\n" * n + "__mb = 2",
}
"""Hostile source families: the fuzzer's (:data:`moonbox.fuzz._programs.HOSTILE_SOURCES`)
and one it cannot use (the sandbox refuses it, where LuaJIT's parser would not)."""

ALPHABET = (
    "function", "(", ")", "end", "do", "x", "=", "goto", "::", "if", "then", "else",
    "elseif", "local", "return", ";", "{", "}", "[", "]", "repeat", "until", "while", "for",
    "in", ",", ".", ":", "1", "'s'", "..", "not", "and", "nil", "...", "break", "--[[ c ]]",
    "[[s]]", "#", "-",
)  # fmt: skip
"""Tokens the property test strings together, repeated, as alternating-token sources."""
