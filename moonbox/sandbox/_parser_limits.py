"""Limits on what LuaJIT's parser does in work superlinear in the source, checked on the
tokens before the source reaches it (Sandbox.load runs the parser with no budget).

- Number constants. The parser interns every number literal of a function in a table keyed
  by the number, and LuaJIT's number hash is not seeded: literals whose hashes share one
  chain make the load quadratic (16,384 of them: ~1.8 s, against ~0.14 s for as many plain
  ones). Distinct literals are bucketed by that hash; more than MAX_NUMBERS_PER_BUCKET in
  one bucket of 65,536 is refused. Random data (100,000 distinct floats) fills a bucket with
  about ten at most.
- Gotos. The parser resolves gotos against labels in work quadratic in their number (16,557
  gotos to one label: 1.3 s). More than MAX_GOTOS in one source is refused.
"""

from __future__ import annotations

import struct

from ._tokenizer import Token, TokenKind

__all__ = ["MAX_GOTOS", "MAX_NUMBERS_PER_BUCKET", "SourceLimitError", "check_parser_limits"]

MAX_GOTOS = 4096
MAX_NUMBERS_PER_BUCKET = 256
_BUCKETS = 1 << 16
_M = 0xFFFFFFFF


class SourceLimitError(ValueError):
    """The source would make LuaJIT's parser do superlinear work; refused before it runs."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


def _rol(x: int, n: int) -> int:
    return ((x << n) | (x >> (32 - n))) & _M


def _number_hash(value: float) -> int:
    """LuaJIT's hash of a number key (lj_tab.h, hashrot of the double's halves)."""
    lo, hi = struct.unpack("<II", struct.pack("<d", value))
    hi = (hi << 1) & _M
    lo ^= hi
    hi = _rol(hi, 14)
    lo = (lo - hi) & _M
    hi = _rol(hi, 5)
    hi ^= lo
    return (hi - _rol(lo, 13)) & _M


def _number(text: str) -> float | None:
    """The value of a number literal, or None for a cdata literal (``LL``, ``ULL``, ``i``)."""
    lowered = text.lower()
    if lowered.endswith(("ll", "i")):
        return None
    try:
        if lowered.startswith("0x"):
            if "p" in lowered or "." in lowered:
                return float.fromhex(lowered)
            return float(int(lowered, 16))
        return float(lowered)
    except (ValueError, OverflowError):
        return None


def check_parser_limits(tokens: list[Token]) -> None:
    """Raises SourceLimitError if the tokens pass a limit above. Linear in their number."""
    gotos = 0
    seen: set[float] = set()
    buckets: dict[int, int] = {}
    number, name, keyword = TokenKind.NUMBER, TokenKind.NAME, TokenKind.KEYWORD
    for tok in tokens:
        kind = tok.kind
        if kind is number:
            value = _number(tok.text)
            if value is None or value in seen or value != value:
                continue
            seen.add(value)
            bucket = _number_hash(value) & (_BUCKETS - 1)
            filled = buckets.get(bucket, 0) + 1
            buckets[bucket] = filled
            if filled > MAX_NUMBERS_PER_BUCKET:
                raise SourceLimitError(
                    f"more than {MAX_NUMBERS_PER_BUCKET} number constants share one hash "
                    "bucket (they would make loading the source quadratic); write such data "
                    "as strings, or compute it", tok.line)
        elif tok.text == "goto" and (kind is name or kind is keyword):
            gotos += 1
            if gotos > MAX_GOTOS:
                raise SourceLimitError(
                    f"more than {MAX_GOTOS} gotos in one source (resolving them would make "
                    "loading it quadratic); use loops, or split the source", tok.line)
