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
insert text without moving any line.
"""

from __future__ import annotations

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
_ONE = frozenset("+-*/%^#=<>(){}[];:,.")


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


def _is_ident_start(ch: str) -> bool:
    return ch.isascii() and (ch.isalpha() or ch == "_") or ord(ch) >= 0x80


def _is_ident(ch: str) -> bool:
    return ch.isascii() and (ch.isalnum() or ch == "_") or ord(ch) >= 0x80


def _long_bracket_level(src: str, pos: int) -> int:
    """Level of a long bracket opening at ``pos`` (``[``), or -1 if there is none."""
    level = 0
    i = pos + 1
    while i < len(src) and src[i] == "=":
        level += 1
        i += 1
    if i < len(src) and src[i] == "[":
        return level
    return -1


class _Lexer:
    def __init__(self, src: str) -> None:
        self.src = src
        self.pos = 0
        self.line = 1

    def _count_lines(self, start: int, end: int) -> None:
        # A CR LF or LF CR pair is one line break, as in LuaJIT.
        src = self.src
        i = start
        while i < end:
            ch = src[i]
            if ch == "\n" or ch == "\r":
                nxt = src[i + 1] if i + 1 < end else ""
                if nxt in ("\n", "\r") and nxt != ch:
                    i += 1
                self.line += 1
            i += 1

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
        while True:
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
        n = len(src)
        xp = "e"
        i = pos
        if src[i] == "0" and i + 1 < n and src[i + 1] in "xX":
            xp = "p"
        prev = ""
        while i < n:
            ch = src[i]
            if _is_ident(ch) or ch == ".":
                pass
            elif ch in "+-" and prev.lower() == xp:
                pass
            else:
                break
            prev = ch
            i += 1
        return i

    def tokens(self) -> list[Token]:
        src = self.src
        n = len(src)
        out: list[Token] = []
        pos = 0
        # A first line starting with '#' is skipped, as by LuaJIT's loader.
        if src.startswith("#"):
            while pos < n and src[pos] not in "\r\n":
                pos += 1
        while pos < n:
            ch = src[pos]
            if ch in " \t\v\f":
                pos += 1
                continue
            if ch == "\n" or ch == "\r":
                pos += 1
                if pos < n and src[pos] in "\n\r" and src[pos] != ch:
                    pos += 1
                self.line += 1
                continue
            line = self.line
            if ch == "-" and src.startswith("--", pos):
                pos += 2
                if pos < n and src[pos] == "[":
                    level = _long_bracket_level(src, pos)
                    if level >= 0:
                        end = self._skip_long_bracket(pos, level, "comment")
                        self._count_lines(pos, end)
                        pos = end
                        continue
                while pos < n and src[pos] not in "\r\n":
                    pos += 1
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
            if _is_ident_start(ch):
                end = pos + 1
                while end < n and _is_ident(src[end]):
                    end += 1
                word = src[pos:end]
                kind = TokenKind.KEYWORD if word in _HARD_KEYWORDS else TokenKind.NAME
                out.append(Token(kind, word, pos, end, line))
                pos = end
                continue
            for op in _THREE + _TWO:
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
