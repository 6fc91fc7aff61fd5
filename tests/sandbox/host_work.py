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
to a source of about ``n`` tokens (or characters), valid or not.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from moonbox.sandbox import _instrument, _tokenizer
from moonbox.sandbox._instrument import ReservedNameError, _plans, instrument
from moonbox.sandbox._tokenizer import LuaTokenError

_COUNTED_FILES = frozenset({_instrument.__file__, _tokenizer.__file__})

CELL, SLOW = "__mb_n", "__mb_s"


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
        return counted_work(lambda: instrument(src, cell=CELL, slow=SLOW))
    finally:
        _plans.clear()


def _lines(line: str) -> Callable[[int], str]:
    return lambda n: line * n


HOSTILE: dict[str, Callable[[int], str]] = {
    # Parameter lists: each `function` used to scan ahead to the next `(` and `)`.
    "functions_then_one_paren": lambda n: "function " * n + "()",
    "functions_then_nothing": lambda n: "local x = " + "function " * n,
    "open_parameter_lists": lambda n: "function(" * n + ")",
    "parameters_without_close": lambda n: "function f(" + "a, " * n,
    "local_functions_then_one_body": lambda n: "local function f" * n + "() end",
    "functions_with_bodies": lambda n: "local f = function() end\n" * n,
    # Nesting: blocks, functions, brackets, conditions.
    "nested_blocks": lambda n: "do " * n + "end " * n,
    "nested_blocks_unclosed": lambda n: "do " * n,
    "nested_functions": lambda n: "local f = " + "function() " * n + "end " * n,
    "nested_ifs": lambda n: "if x then " * n + "end " * n,
    "nested_whiles": lambda n: "while x do " * n + "end " * n,
    "nested_repeats": lambda n: "repeat " * n + "until x " * n,
    "nested_fors": lambda n: "for i = 1, 2 do " * n + "end " * n,
    "open_parentheses": lambda n: "x = " + "(" * n,
    "nested_parentheses": lambda n: "x = " + "(" * n + "1" + ")" * n,
    "nested_tables": lambda n: "x = " + "{" * n + "}" * n,
    "nested_calls": lambda n: "f" + "(f" * n + ")" * n,
    "elseif_chain": lambda n: "if x then " + "elseif x then y = 1 " * n + "end",
    "while_heads": lambda n: "while x " * n + "do end",
    "many_ends": lambda n: "end " * n,
    "many_untils": lambda n: "until x " * n,
    # goto and labels.
    "labels_and_gotos": lambda n: "".join(f"::l{i}:: goto l{i} " for i in range(n)),
    "gotos_to_one_label": lambda n: "::top:: " + "goto top " * n,
    "gotos_then_labels": lambda n: "do " + "goto l " * n + "::l:: end",
    "goto_names": lambda n: "goto " * n,
    "label_openers": lambda n: ":: " * n,
    # Long brackets, comments and strings.
    "long_string_of_level_n": lambda n: "return [" + "=" * n + "[" + ("]" + "=" * (n - 1) + "]") * 8
    + "]" + "=" * n + "]",
    "unterminated_long_string_of_level_n": lambda n: "return [" + "=" * n + "[" + "]=]" * n,
    "long_comments": _lines("--[==[ c ]=] ]==] x = 1\n"),
    "unterminated_long_comment": lambda n: "--[===[" + " ]==] ]=]" * n,
    "comment_openers_without_bracket": _lines("--[====x\n"),
    "invalid_long_delimiter": lambda n: "x = [" + "=" * n,
    "many_long_strings": _lines("x = [[a]] .. [=[b]=] .. [==[c]==]\n"),
    "unterminated_string": lambda n: 'x = "' + "a\\z   \\\n" * n,
    "unterminated_string_at_line_end": lambda n: 'x = "abc\\"' * n,
    "escapes": lambda n: 'x = "' + "\\x41\\u{41}\\065\\z \\n" * n + '"',
    # Tokens: numbers, names, operators, statement soup.
    "long_number": lambda n: "x = 0x" + "f" * n + "p+1",
    "long_name": lambda n: "x" * n + " = 1",
    "concatenation_chain": lambda n: "x = " + "a .. " * n + "a",
    "comparisons": _lines("x = s < s\n"),
    "statements_on_one_line": lambda n: "x = 1; " * n,
    "calls_after_literals": lambda n: "x = 1 (f)(a) " * n,
    "method_calls": lambda n: "a:b'c'{d}:e()" * n,
    "reserved_name_last": lambda n: "x = 1\n" * n + "__mb = 2",
    "alternating_function_end": lambda n: "function end " * n,
    "alternating_do_until": lambda n: "do until " * n,
}
"""Hostile source families: each maps a size to a source of that many repeated pieces."""

ALPHABET = (
    "function", "(", ")", "end", "do", "x", "=", "goto", "::", "if", "then", "else",
    "elseif", "local", "return", ";", "{", "}", "[", "]", "repeat", "until", "while", "for",
    "in", ",", ".", ":", "1", "'s'", "..", "not", "and", "nil", "...", "break", "--[[ c ]]",
    "[[s]]", "#", "-",
)  # fmt: skip
"""Tokens the property test strings together, repeated, as alternating-token sources."""
