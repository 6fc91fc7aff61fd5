"""A tokenizer for the full Lua 5.1 / LuaJIT 2.1 lexical grammar.

The instrumenter relies on it to find every loop body, function body and ``goto``, and to
reject reserved identifiers, so it must see exactly what LuaJIT's own lexer sees: a comment
or string it misreads could hide a loop from the meter. Its rules mirror ``lj_lex.c``:

- long brackets ``[[ ]]``, ``[==[ ]==]`` for strings and ``--[[ ]]`` comments, any level;
- short strings with every escape, including ``\\z``, ``\\x``, ``\\u{}`` and a backslash before
  a line break;
- numbers read as LuaJIT reads them: identifier characters, ``.``, and a sign right after the
  exponent letter (``e`` for decimal, ``p`` for hex), so ``1LL``, ``0x10ULL``, ``2i``,
  ``0x1p4`` and ``3e-2`` are single tokens;
- bytes from 0x80 up are identifier characters, as in LuaJIT.

The tokenizer works on ``str``; every character keeps its offset so the instrumenter can
insert text without moving any line. Its work is linear in the source, valid or not (a mod
controls its text): runs of characters are matched by regular expressions that never
backtrack, a long bracket is closed with one search, and no text is scanned twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

__all__ = ["Token", "TokenKind", "LuaTokenError", "tokenize", "KEYWORDS"]

KEYWORDS = frozenset(
    {
        "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto",
        "if", "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until",
        "while",
    }
)  # fmt: skip
# ``goto`` is listed for completeness; LuaJIT treats it as a statement only when a name
# follows it, so the tokenizer reports it as a NAME and the instrumenter decides.
_HARD_KEYWORDS = KEYWORDS - {"goto"}

_THREE = ("...",)
_TWO = ("..", "==", "~=", "<=", ">=", "::")
_OPS = _THREE + _TWO
_ONE = frozenset("+-*/%^#=<>(){}[];:,.")

# Runs of characters, each a single character class under one star with nothing after it:
# a match never backtracks, so each costs time linear in what it consumes, whatever the
# text (the lexer then moves past it).
_BLANKS = re.compile(r"[ \t\v\f\r\n]*")
# A name: bytes from 0x80 up are identifier characters, as in LuaJIT (with surrogateescape,
# a byte that is not UTF-8 is a lone surrogate, also in this range).
_NAME = re.compile("[A-Za-z_\x80-\U0010ffff][0-9A-Za-z_\x80-\U0010ffff]*")
_TO_LINE_END = re.compile(r"[^\r\n]*")
_EQUALS = re.compile("=*")
_LINE_BREAKS = re.compile(r"\r\n|\n\r|\r|\n")  # a CR LF or LF CR pair is one break
_PLAIN = {'"': re.compile(r'[^"\\\r\n]*'), "'": re.compile(r"[^'\\\r\n]*")}
# A number: identifier characters and dots, and a sign right after the exponent letter.
_NUMBER = re.compile("(?:[eE][+-]|[0-9A-Za-z_.\x80-\U0010ffff])*")
_HEX_NUMBER = re.compile("(?:[pP][+-]|[0-9A-Za-z_.\x80-\U0010ffff])*")


class TokenKind(Enum):
    NAME = "name"
    KEYWORD = "keyword"
    NUMBER = "number"
    STRING = "string"
    OP = "op"


@dataclass(frozen=True, slots=True)
class Token:
    kind: TokenKind
    text: str
    start: int
    end: int
    line: int


class LuaTokenError(ValueError):
    """The source is not lexically valid Lua; carries the 1-based ``line``."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


def _long_bracket_level(src: str, pos: int) -> int:
    """Level of a long bracket opening at ``pos`` (``[``), or -1 if there is none."""
    i = _EQUALS.match(src, pos + 1).end()
    if src.startswith("[", i):
        return i - pos - 1
    return -1


class _Lexer:
    def __init__(self, src: str) -> None:
        self.src = src
        self.pos = 0
        self.line = 1

    def _count_lines(self, start: int, end: int) -> None:
        # A CR LF or LF CR pair is one line break, as in LuaJIT.
        self.line += len(_LINE_BREAKS.findall(self.src, start, end))

    def _skip_long_bracket(self, pos: int, level: int, what: str) -> int:
        close = "]" + "=" * level + "]"
        end = self.src.find(close, pos)
        if end < 0:
            raise LuaTokenError(f"unfinished long {what}", self.line)
        return end + len(close)

    def _read_short_string(self, pos: int) -> int:
        src = self.src
        quote = src[pos]
        i = pos + 1
        n = len(src)
        plain = _PLAIN[quote]
        while True:
            i = plain.match(src, i).end()
            if i >= n:
                raise LuaTokenError("unfinished string", self.line)
            ch = src[i]
            if ch == quote:
                return i + 1
            if ch == "\n" or ch == "\r":
                raise LuaTokenError("unfinished string", self.line)
            if ch == "\\":
                i += 1
                if i >= n:
                    raise LuaTokenError("unfinished string", self.line)
                esc = src[i]
                if esc in "\n\r":
                    # Backslash-newline: the string goes on past a line break.
                    if i + 1 < n and src[i + 1] in "\n\r" and src[i + 1] != esc:
                        i += 1
                elif esc == "z":
                    # \z skips the following whitespace, line breaks included.
                    i += 1
                    while i < n and src[i] in " \t\v\f\r\n":
                        i += 1
                    continue
            i += 1

    def _read_number(self, pos: int) -> int:
        src = self.src
        hexadecimal = src.startswith(("0x", "0X"), pos)
        return (_HEX_NUMBER if hexadecimal else _NUMBER).match(src, pos).end()

    def tokens(self) -> list[Token]:
        src = self.src
        n = len(src)
        out: list[Token] = []
        pos = 0
        # A first line starting with '#' is skipped, as by LuaJIT's loader.
        if src.startswith("#"):
            pos = _TO_LINE_END.match(src).end()
        while pos < n:
            ch = src[pos]
            if ch in " \t\v\f\r\n":
                end = _BLANKS.match(src, pos).end()
                if ch == "\n" or ch == "\r" or end - pos > 1:
                    self._count_lines(pos, end)
                pos = end
                continue
            line = self.line
            name = _NAME.match(src, pos)
            if name is not None:
                end = name.end()
                word = name.group()
                kind = TokenKind.KEYWORD if word in _HARD_KEYWORDS else TokenKind.NAME
                out.append(Token(kind, word, pos, end, line))
                pos = end
                continue
            if ch == "-" and src.startswith("--", pos):
                pos += 2
                if pos < n and src[pos] == "[":
                    level = _long_bracket_level(src, pos)
                    if level >= 0:
                        end = self._skip_long_bracket(pos, level, "comment")
                        self._count_lines(pos, end)
                        pos = end
                        continue
                pos = _TO_LINE_END.match(src, pos).end()
                continue
            if ch == "[":
                level = _long_bracket_level(src, pos)
                if level >= 0:
                    end = self._skip_long_bracket(pos, level, "string")
                    self._count_lines(pos, end)
                    out.append(Token(TokenKind.STRING, src[pos:end], pos, end, line))
                    pos = end
                    continue
                if pos + 1 < n and src[pos + 1] == "=":
                    raise LuaTokenError("invalid long string delimiter", line)
            if ch == '"' or ch == "'":
                end = self._read_short_string(pos)
                self._count_lines(pos, end)
                out.append(Token(TokenKind.STRING, src[pos:end], pos, end, line))
                pos = end
                continue
            if ch.isdigit() and ch.isascii() or (
                ch == "." and pos + 1 < n and src[pos + 1].isascii() and src[pos + 1].isdigit()
            ):
                end = self._read_number(pos)
                out.append(Token(TokenKind.NUMBER, src[pos:end], pos, end, line))
                pos = end
                continue
            for op in _OPS:
                if src.startswith(op, pos):
                    out.append(Token(TokenKind.OP, op, pos, pos + len(op), line))
                    pos += len(op)
                    break
            else:
                if ch in _ONE or ch == "~":
                    if ch == "~":
                        raise LuaTokenError("unexpected symbol near '~'", line)
                    out.append(Token(TokenKind.OP, ch, pos, pos + 1, line))
                    pos += 1
                else:
                    raise LuaTokenError(f"unexpected symbol near {ch!r}", line)
        return out


def tokenize(src: str) -> list[Token]:
    """Split Lua source into tokens; comments and whitespace are dropped.

    Raises:
        LuaTokenError: the source is not lexically valid (unfinished string or long
            bracket, a stray symbol).
    """
    return _Lexer(src).tokens()
