"""Hypothesis strategies for Lua source text, shared by the tokenizer and instrumenter tests.

Three layers, each built on the one before:

- **literals and junk**: string literals of every kind (short strings with every escape,
  long strings of any level) paired with the bytes LuaJIT reads from them, number
  literals, names, operators, and "junk" (whitespace with every line break kind, line
  comments, long comments) whose text is full of words that look like code: ``end``,
  ``do``, ``while true do``, ``]]``, ``--``, quotes, ``__mb_n``;
- **token streams and marker soups** for the tokenizer: sequences of tokens, and programs
  of ``M(<literal>)`` calls buried in junk whose lines LuaJIT can report;
- **programs** for the instrumenter: random *valid* Lua 5.1/LuaJIT programs that always
  terminate (every loop is bounded by a counter of its own, recursion by a depth argument)
  and end with ``return acc, iters``: a checksum of everything they computed and the number
  of metered events they went through (loop iterations, backward ``goto`` jumps and
  function entries), or with an error whose message holds both.

Every name a program declares is fresh, so a generated statement never shadows another; a
block may read and assign any numeric local in scope.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache

from hypothesis import strategies as st

__all__ = [
    "HARD_KEYWORDS",
    "Literal",
    "OPERATORS",
    "Program",
    "Soup",
    "junk",
    "long_brackets",
    "marker_soups",
    "names",
    "number_literals",
    "programs",
    "short_strings",
    "string_literals",
    "token_streams",
]

HARD_KEYWORDS = (
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "if", "in",
    "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
)  # fmt: skip
OPERATORS = (
    "+", "-", "*", "/", "%", "^", "#", "==", "~=", "<=", ">=", "<", ">", "=", "(", ")",
    "{", "}", "[", "]", ";", ":", "::", ",", ".", "..", "...",
)  # fmt: skip
NEWLINES = ("\n", "\r", "\r\n", "\n\r")

# Text that looks like code, for the inside of strings and comments.
_DECOYS = (
    "end", "do", "while true do", "repeat", "until", "function", "goto x", "::l::", "then",
    "return", "for i = 1, 1e9 do", "]]", "]=]", "]==]", "[[", "[=[", "[==[", "--", "--[[",
    "-", "'", '"', "\\", "__mb_n", "__mbx", "(", ")", "{", "}", "é", "日本", "x", "1", " ",
    "\t", ";",
)  # fmt: skip


@dataclass(frozen=True)
class Literal:
    """A literal's source text and, for strings, the bytes LuaJIT reads from it."""

    text: str
    value: bytes | None = None


def _normalize_newlines(text: str) -> str:
    return re.sub(r"\r\n|\n\r|\r|\n", "\n", text)


# -- strings -------------------------------------------------------------------------------

_SIMPLE_ESCAPES = {
    "n": b"\n", "t": b"\t", "r": b"\r", "a": b"\a", "b": b"\b", "f": b"\f", "v": b"\v",
    "\\": b"\\", '"': b'"', "'": b"'",
}  # fmt: skip
_SPACE = (" ", "\t", "\v", "\f", *NEWLINES)


_ESCAPE_KINDS = st.sampled_from(("simple", "decimal", "hex", "z", "unicode", "newline"))
_SIMPLE_ESCAPE_CHARS = st.sampled_from(sorted(_SIMPLE_ESCAPES))
_BYTES = st.integers(0, 255)
_SPACES = st.lists(st.sampled_from(_SPACE), max_size=4)
_CODE_POINTS = st.one_of(
    st.integers(0, 0x7F), st.integers(0x80, 0x7FF), st.integers(0x800, 0xD7FF),
    st.integers(0xE000, 0xFFFF), st.integers(0x10000, 0x10FFFF),
)  # fmt: skip
_LEADING_ZEROS = st.integers(0, 2)
_NEWLINE = st.sampled_from(NEWLINES)
_BOOL = st.booleans()


@st.composite
def _escape(draw: st.DrawFn) -> tuple[str, bytes]:
    kind = draw(_ESCAPE_KINDS)
    if kind == "simple":
        ch = draw(_SIMPLE_ESCAPE_CHARS)
        return "\\" + ch, _SIMPLE_ESCAPES[ch]
    if kind == "decimal":
        value = draw(_BYTES)
        # Three digits always: a shorter escape would swallow a digit that follows it.
        return f"\\{value:03d}", bytes([value])
    if kind == "hex":
        value = draw(_BYTES)
        digits = f"{value:02X}" if draw(_BOOL) else f"{value:02x}"
        return "\\x" + digits, bytes([value])
    if kind == "z":
        return "\\z" + "".join(draw(_SPACES)), b""
    if kind == "unicode":
        cp = draw(_CODE_POINTS)
        zeros = "0" * draw(_LEADING_ZEROS)
        return f"\\u{{{zeros}{cp:x}}}", chr(cp).encode()
    return "\\" + draw(_NEWLINE), b"\n"


def _plain(quote: str) -> st.SearchStrategy[tuple[str, bytes]]:
    other = "'" if quote == '"' else '"'
    texts = st.sampled_from([d for d in _DECOYS if d not in ("'", '"', "\\")] + [other])
    return texts.map(lambda t: (t, t.encode()))


_SHORT_PIECES = {q: st.lists(st.one_of(_plain(q), _escape()), max_size=6) for q in "\"'"}
_QUOTES = st.sampled_from(('"', "'"))


@st.composite
def short_strings(draw: st.DrawFn) -> Literal:
    """``"..."`` or ``'...'`` with any escapes, including ``\\z``, ``\\u{}`` and ``\\<newline>``."""
    quote = draw(_QUOTES)
    pieces = draw(_SHORT_PIECES[quote])
    text = quote + "".join(p[0] for p in pieces) + quote
    value = b""
    skipping = False  # after \z, whitespace that follows is skipped, whatever piece it is in
    for piece_text, piece_value in pieces:
        if piece_text.startswith("\\"):
            skipping = piece_text.startswith("\\z")
            value += piece_value
        elif skipping:
            kept = piece_text.lstrip(" \t\v\f\r\n")
            skipping = not kept
            value += kept.encode()
        else:
            value += piece_value
    return Literal(text, value)


_LONG_BODIES = st.lists(st.sampled_from(_DECOYS + NEWLINES), max_size=8)
_LEVELS = st.integers(0, 3)


@st.composite
def long_brackets(draw: st.DrawFn, *, prefix: str = "") -> Literal:
    """``[==[ ... ]==]`` with a body full of brackets and line breaks of every kind.

    The level is raised until the body cannot close the bracket early. ``value`` is what
    LuaJIT reads: the first line break dropped, every line break made ``\\n``.
    """
    body = "".join(draw(_LONG_BODIES))
    level = draw(_LEVELS)
    while True:
        close = "]" + "=" * level + "]"
        if (body + close).find(close) == len(body):
            break
        level += 1
    text = prefix + "[" + "=" * level + "[" + body + close
    first = re.match(r"\r\n|\n\r|\r|\n", body)
    value = body[first.end() :] if first else body
    return Literal(text, _normalize_newlines(value).encode())


def string_literals() -> st.SearchStrategy[Literal]:
    return st.one_of(short_strings(), long_brackets())


# -- numbers, names, junk --------------------------------------------------------------------

_NUMBER_PARTS = st.tuples(
    st.integers(0, 99999), st.integers(0, 999), st.integers(0, 20),
    st.sampled_from(("", "+", "-")), st.integers(0, 18),
)  # fmt: skip


@st.composite
def number_literals(draw: st.DrawFn, *, cdata: bool = True) -> Literal:
    """Numbers as LuaJIT reads them: ``3``, ``3.``, ``.5``, ``1e-3``, ``0xA.8p1``, ``1LL``..."""
    n, f, e, sign, which = draw(_NUMBER_PARTS)
    forms = [
        str(n), f"{n}.{f}", f"{n}.", f".{f}", f"{n}e{sign}{e}", f"{n}.{f}E{sign}{e}",
        f".{f}e{sign}{e}", f"0x{n:x}", f"0X{n:X}", f"0x{n:x}.{f:x}p{sign}{e}",
        f"0x.{f:x}P{sign}{e}", f"0x{n:x}p{sign}{e}",
    ]  # fmt: skip
    if cdata:
        forms += [f"{n}LL", f"{n}ll", f"{n}ULL", f"0x{n:x}ULL", f"0x{n:X}LL", f"{n}i", f"{n}I"]
    return Literal(forms[which % len(forms)])


def names() -> st.SearchStrategy[str]:
    """Identifiers: never a hard keyword; ``goto`` and non-ASCII names included."""
    plain = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)
    odd = st.sampled_from(("goto", "Goto", "END", "_end", "end_", "nil0", "é", "x日本", "_"))
    return st.one_of(plain, odd).filter(lambda s: s not in HARD_KEYWORDS)


_COMMENT_BODIES = st.lists(st.sampled_from(_DECOYS), max_size=5)
# Brackets that do not open a long comment: "--[==x" is still a line comment.
_NOT_LONG_BRACKETS = st.sampled_from(("", "[", "[=", "[==x", "-[[", "[ [", "[=="))


@st.composite
def _line_comment(draw: st.DrawFn) -> str:
    body = draw(_NOT_LONG_BRACKETS) + "".join(draw(_COMMENT_BODIES))
    if re.match(r"\[=*\[", body):
        body = " " + body
    return "--" + body + draw(_NEWLINE)


_JUNK = st.lists(
    st.one_of(
        st.sampled_from((" ", "\t", "\v", "\f", *NEWLINES)),
        _line_comment(),
        long_brackets(prefix="--").map(lambda lit: lit.text),
    ),
    max_size=3,
).map("".join)


def junk() -> st.SearchStrategy[str]:
    """Whitespace, line breaks of every kind, line comments and long comments."""
    return _JUNK


def _separator() -> st.SearchStrategy[str]:
    """Junk that always separates two tokens."""
    return _JUNK.map(lambda j: " " + j + " ")


# -- token streams -------------------------------------------------------------------------


def token_streams() -> st.SearchStrategy[list[tuple[str, str]]]:
    """Lists of ``(kind, text)`` with kind one of name, keyword, number, string, op."""
    token = st.one_of(
        names().map(lambda t: ("name", t)),
        st.sampled_from(HARD_KEYWORDS).map(lambda t: ("keyword", t)),
        number_literals().map(lambda lit: ("number", lit.text)),
        string_literals().map(lambda lit: ("string", lit.text)),
        st.sampled_from(OPERATORS).map(lambda t: ("op", t)),
    )
    return st.lists(token, max_size=30)


@dataclass(frozen=True)
class Soup:
    """``M(<literal>)`` calls in random junk, then ``error("x")``.

    ``literals`` are the literals passed to ``M``, in order.
    """

    source: str
    literals: tuple[Literal, ...]


@st.composite
def marker_soups(draw: st.DrawFn) -> Soup:
    literal = st.one_of(string_literals(), number_literals())
    literals = tuple(draw(st.lists(literal, max_size=6)))
    parts = []
    if draw(st.booleans()):
        parts.append("#!/usr/bin/env luajit" + draw(st.sampled_from(NEWLINES)))
    for lit in literals:
        # No junk between M and "(": LuaJIT refuses a call whose "(" starts a new line.
        parts += [draw(junk()), "M(", draw(junk()), lit.text, draw(junk()), ")"]
    parts += [draw(_separator()), 'error("x")']
    if draw(st.booleans()):
        parts.append(" -- the end, with no line break")
    return Soup("".join(parts), literals)


# -- programs ------------------------------------------------------------------------------

# Strategies are built once: building them per draw is most of the cost of a program.
_STRINGS = string_literals()
_SEPARATORS = _separator()
_LONG_COMMENTS = long_brackets(prefix="--")


@cache
def _integers(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high)


CHECKSUM_MOD = 2147483647
VALUE_MOD = 1009

PROGRAM_HEADER = (
    "local acc, iters = 0, 0\n"
    "local function h(s)\n"
    "  local x = #s\n"
    "  for i = 1, #s do x = (x * 7 + string.byte(s, i)) % 1009 end\n"
    "  return x\n"
    "end\n"
)


@dataclass(frozen=True)
class Program:
    """A generated program; ``ends_in_error`` when its last statement raises."""

    source: str
    ends_in_error: bool


@dataclass(frozen=True)
class _Scope:
    readable: tuple[str, ...] = ()  # numeric locals, parameters and loop variables
    writable: tuple[str, ...] = ()  # numeric locals and parameters
    in_loop: bool = False  # `break` allowed
    vararg: bool = True  # `...` allowed
    depth: int = 0

    def declare(self, name: str) -> _Scope:
        return replace(self, readable=self.readable + (name,), writable=self.writable + (name,))

    def read_only(self, *names_: str) -> _Scope:
        return replace(self, readable=self.readable + names_)

    def nested(self, **changes: object) -> _Scope:
        return replace(self, depth=self.depth + 1, **changes)  # type: ignore[arg-type]


class _Builder:
    def __init__(self, draw: st.DrawFn, max_depth: int, max_statements: int) -> None:
        self.draw = draw
        self.max_depth = max_depth
        self.max_statements = max_statements
        self.count = 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def pick(self, options: Sequence[str]) -> str:
        return options[self.small(0, len(options) - 1)]

    def small(self, low: int, high: int) -> int:
        return self.draw(_integers(low, high))

    def flip(self) -> bool:
        return self.draw(_BOOL)

    def string(self) -> str:
        return self.draw(_STRINGS).text

    def sep(self) -> str:
        # Mostly one space (what examples shrink to), sometimes comments and line breaks.
        if self.small(0, 3) < 3:
            return " "
        return self.draw(_SEPARATORS)

    # -- expressions ---------------------------------------------------------------------

    def int_text(self, n: int) -> str:
        """``n`` written as any number literal that reads as ``n``."""
        m = abs(n)
        forms = [str(m), f"0x{m:x}", f"0X{m:X}", f"{m}.0", f"{m}e0", f"{m}0e-1",
                 f"0x{m:x}p0", f"0x{2 * m:x}P-1", f"{m}.", f"tonumber({m}LL)"]  # fmt: skip
        text = self.pick(forms)
        return f"(-{text})" if n < 0 else text

    def leaf(self, scope: _Scope) -> str:
        kinds = ["int", "int", "string_hash", "string_len"]
        if scope.readable:
            kinds += ["var", "var", "var"]
        if scope.vararg:
            kinds.append("vararg_count")
        kind = self.pick(kinds)
        if kind == "var":
            text = self.pick(scope.readable)
        elif kind == "int":
            text = self.int_text(self.small(-20, 1008))
        elif kind == "string_hash":
            text = f"h({self.string()})"
        elif kind == "string_len":
            text = f"#{self.string()}"
        else:
            text = 'select("#", ...)'
        if self.small(0, 5) == 5:
            comment = self.draw(_LONG_COMMENTS).text
            text = f"{comment} {text}"
        return text

    def expr(self, scope: _Scope, depth: int = 2) -> str:
        # At most four leaves of at most ~1009 each: every value stays an exact integer.
        if depth == 0 or self.flip():
            return self.leaf(scope)
        op = self.pick(("+", "-", "*"))
        return f"({self.expr(scope, depth - 1)} {op} {self.expr(scope, depth - 1)})"

    def cond(self, scope: _Scope) -> str:
        cmp = self.pick(("<", "<=", ">", ">=", "==", "~="))
        text = f"{self.expr(scope, 1)} % 7 {cmp} {self.small(0, 6)}"
        shape = self.small(0, 3)
        if shape == 1:
            return f"not ({text})"
        if shape == 2:
            return f"{text} {self.pick(('and', 'or'))} {self.cond(scope)}"
        return text

    def value(self, scope: _Scope) -> str:
        return f"({self.expr(scope)}) % {VALUE_MOD}"

    def mix(self, term: str) -> str:
        return f"acc = (acc * 31 + {term}) % {CHECKSUM_MOD}"

    # -- statements ----------------------------------------------------------------------

    def block(self, scope: _Scope) -> tuple[str, _Scope]:
        parts = []
        for _ in range(self.small(0, self.max_statements)):
            text, scope = self.statement(scope)
            parts.append(text)
        return self.sep().join(parts), scope

    def body(self, scope: _Scope) -> str:
        return self.block(scope)[0]

    def statement(self, scope: _Scope) -> tuple[str, _Scope]:
        kinds = ["local", "mix", "mix_string"]
        if scope.writable:
            kinds.append("assign")
        if scope.in_loop:
            kinds.append("break")
        if scope.depth < self.max_depth:
            kinds += [
                "do", "if", "while", "numeric_for", "generic_for", "iterator_for", "repeat",
                "goto_loop", "continue", "skip", "recursion", "closure", "method", "varargs",
                "goto_variable", "table", "caught_error",
            ]  # fmt: skip
        kind = self.pick(kinds)
        if kind == "local":
            name = self.fresh("v")
            return f"local {name} = {self.value(scope)}", scope.declare(name)
        return getattr(self, "stmt_" + kind)(scope), scope

    def stmt_assign(self, scope: _Scope) -> str:
        return f"{self.pick(scope.writable)} = {self.value(scope)}"

    def stmt_mix(self, scope: _Scope) -> str:
        return self.mix(self.expr(scope))

    def stmt_mix_string(self, scope: _Scope) -> str:
        lit = self.string()
        if self.flip():
            lit = f"{lit} .. {self.string()}"
        return self.mix(f"h({lit})")

    def stmt_break(self, scope: _Scope) -> str:
        return f"if {self.cond(scope)} then break end"

    def stmt_do(self, scope: _Scope) -> str:
        return f"do{self.sep()}{self.body(scope.nested())}{self.sep()}end"

    def stmt_if(self, scope: _Scope) -> str:
        inner = scope.nested()
        text = f"if {self.cond(scope)} then{self.sep()}{self.body(inner)}"
        for _ in range(self.small(0, 2)):
            text += f"{self.sep()}elseif {self.cond(scope)} then{self.sep()}{self.body(inner)}"
        if self.flip():
            text += f"{self.sep()}else{self.sep()}{self.body(inner)}"
        return text + f"{self.sep()}end"

    def stmt_while(self, scope: _Scope) -> str:
        c = self.fresh("c")
        inner = scope.nested(in_loop=True).read_only(c)
        return (
            f"local {c} = 0{self.sep()}while {c} < {self.small(0, 3)} do{self.sep()}"
            f"{c} = {c} + 1 iters = iters + 1{self.sep()}{self.body(inner)}{self.sep()}end"
        )

    def stmt_numeric_for(self, scope: _Scope) -> str:
        i = self.fresh("i")
        first, last = self.small(-2, 3), self.small(-2, 4)
        step = self.pick(("", ", 1", ", 2", ", -1", ", 0x1", ", -2"))
        inner = scope.nested(in_loop=True).read_only(i)
        return (
            f"for {i} = {self.int_text(first)}, {self.int_text(last)}{step} do{self.sep()}"
            f"iters = iters + 1{self.sep()}{self.body(inner)}{self.sep()}end"
        )

    def stmt_generic_for(self, scope: _Scope) -> str:
        k, x = self.fresh("k"), self.fresh("x")
        items = ", ".join(self.value(scope) for _ in range(self.small(0, 3)))
        # Only array parts: their order is the same in every runtime.
        how = self.pick(("ipairs", "pairs"))
        inner = scope.nested(in_loop=True).read_only(k, x)
        return (
            f"for {k}, {x} in {how}({{{items}}}) do{self.sep()}"
            f"iters = iters + 1{self.sep()}{self.body(inner)}{self.sep()}end"
        )

    def stmt_iterator_for(self, scope: _Scope) -> str:
        it, n, i, x = self.fresh("it"), self.fresh("n"), self.fresh("i"), self.fresh("x")
        inner = scope.nested(in_loop=True).read_only(x)
        return (
            f"local function {it}({n}) iters = iters + 1 local {i} = 0{self.sep()}"
            f"return function() iters = iters + 1 {i} = {i} + 1 if {i} <= {n} then return {i} "
            f"end end end{self.sep()}"
            f"for {x} in {it}({self.small(0, 3)}) do{self.sep()}iters = iters + 1{self.sep()}"
            f"{self.body(inner)}{self.sep()}end"
        )

    def stmt_repeat(self, scope: _Scope) -> str:
        # The local `u` is declared in the body and read by `until`.
        r, u = self.fresh("r"), self.fresh("u")
        inner = scope.nested(in_loop=True).read_only(r)
        return (
            f"local {r} = 0{self.sep()}repeat{self.sep()}{r} = {r} + 1 iters = iters + 1"
            f"{self.sep()}{self.body(inner)}{self.sep()}local {u} = {r} * 2{self.sep()}"
            f"until {u} >= {2 * self.small(1, 3)}"
        )

    def stmt_goto_loop(self, scope: _Scope) -> str:
        g, top = self.fresh("g"), self.fresh("top")
        inner = scope.nested().read_only(g)
        return (
            f"do{self.sep()}local {g} = 0{self.sep()}::{top}::{self.sep()}{g} = {g} + 1"
            f"{self.sep()}{self.body(inner)}{self.sep()}"
            f"if {g} < {self.small(1, 3)} then iters = iters + 1 goto {top} end{self.sep()}end"
        )

    def stmt_continue(self, scope: _Scope) -> str:
        # `goto continue` to a label that ends the loop body, after a local: LuaJIT treats
        # a label at the end of a block as outside the scope of the block's locals.
        i, w, cont = self.fresh("i"), self.fresh("w"), self.fresh("continue")
        inner = scope.nested(in_loop=True).read_only(i, w)
        if self.flip():
            head = f"for {i} = 1, {self.small(0, 3)} do"
        else:
            head = (
                f"local {i} = 0{self.sep()}while {i} < {self.small(0, 3)} do"
                f"{self.sep()}{i} = {i} + 1"
            )
        return (
            f"{head}{self.sep()}iters = iters + 1{self.sep()}local {w} = {self.value(scope)}"
            f"{self.sep()}if {w} % 3 == {self.small(0, 2)} then goto {cont} end{self.sep()}"
            f"{self.body(inner)}{self.sep()}::{cont}::{self.sep()}end"
        )

    def stmt_skip(self, scope: _Scope) -> str:
        skip = self.fresh("skip")
        return (
            f"do{self.sep()}if {self.cond(scope)} then goto {skip} end{self.sep()}"
            f"{self.body(scope.nested())}{self.sep()}::{skip}::{self.sep()}end"
        )

    def function_scope(
        self, scope: _Scope, *params: str, vararg: bool = False, fixed: tuple[str, ...] = ()
    ) -> _Scope:
        """The scope of a function body: no `break` out of it; ``fixed`` params are read-only."""
        inner = scope.nested(in_loop=False, vararg=vararg).read_only(*fixed)
        for p in params:
            inner = inner.declare(p)
        return inner

    def stmt_recursion(self, scope: _Scope) -> str:
        f, n = self.fresh("f"), self.fresh("n")
        # The depth argument is read-only: the recursion always ends.
        body, inner = self.block(self.function_scope(scope, fixed=(n,)))
        return (
            f"local function {f}({n}){self.sep()}iters = iters + 1{self.sep()}{body}"
            f"{self.sep()}if {n} <= 0 then return {self.value(inner)} end{self.sep()}"
            f"return ({f}({n} - 1) + {self.expr(inner)}) % {VALUE_MOD}{self.sep()}end"
            f"{self.sep()}{self.mix(f'{f}({self.small(0, 3)})')}"
        )

    def stmt_closure(self, scope: _Scope) -> str:
        mk, a, c, d, f = (self.fresh(p) for p in ("mk", "a", "c", "d", "f"))
        inner = self.function_scope(scope, a, c, d)
        return (
            f"local {mk} = function({a}){self.sep()}iters = iters + 1 local {c} = {a}"
            f"{self.sep()}return function({d}) iters = iters + 1{self.sep()}"
            f"{self.body(inner)}{self.sep()}{c} = ({c} + {d}) % {VALUE_MOD} return {c} end"
            f"{self.sep()}end{self.sep()}local {f} = {mk}({self.value(scope)}){self.sep()}"
            + self.mix(f"{f}({self.value(scope)}) + {f}({self.value(scope)})")
        )

    def stmt_method(self, scope: _Scope) -> str:
        o, d, x = self.fresh("o"), self.fresh("d"), self.fresh("x")
        inner = self.function_scope(scope, d)
        return (
            f"local {o} = {{inner = {{v = {self.value(scope)}}}}}{self.sep()}"
            f"function {o}.inner:get({d}){self.sep()}iters = iters + 1{self.sep()}"
            f"{self.body(inner)}{self.sep()}return (self.v * 3 + {d}) % {VALUE_MOD} end"
            f"{self.sep()}function {o}.set({x}) iters = iters + 1 {o}.inner.v = {x} end"
            f"{self.sep()}{o}.set({self.value(scope)}){self.sep()}"
            + self.mix(f"{o}.inner:get({self.value(scope)})")
        )

    def stmt_varargs(self, scope: _Scope) -> str:
        v, s, i = self.fresh("va"), self.fresh("s"), self.fresh("i")
        inner = self.function_scope(scope, s, vararg=True)
        args = ", ".join(self.value(scope) for _ in range(self.small(0, 4)))
        return (
            f"local function {v}(...){self.sep()}iters = iters + 1 local {s} = "
            f'select("#", ...){self.sep()}for {i} = 1, select("#", ...) do iters = iters + 1 '
            f"{s} = ({s} + select({i}, ...)) % {VALUE_MOD} end{self.sep()}{self.body(inner)}"
            f"{self.sep()}return {s} end{self.sep()}{self.mix(f'{v}({args})')}"
        )

    def stmt_goto_variable(self, scope: _Scope) -> str:
        # `goto` is an ordinary name in LuaJIT unless a name follows it.
        inner = scope.nested().declare("goto")
        return (
            f"do{self.sep()}local goto = {self.value(scope)}{self.sep()}"
            f"goto = (goto * 7 + 1) % {VALUE_MOD}{self.sep()}{self.body(inner)}{self.sep()}"
            f"{self.mix('goto')}{self.sep()}end"
        )

    def stmt_table(self, scope: _Scope) -> str:
        t = self.fresh("t")
        items = [self.value(scope) for _ in range(self.small(1, 4))]
        key = self.string()
        return (
            f"local {t} = {{{', '.join(items)}, k = {self.value(scope)}, [ {key} ] = 5}}"
            f"{self.sep()}table.insert({t}, {self.value(scope)}){self.sep()}"
            f"table.sort({t}, function(a, b) iters = iters + 1 return a > b end){self.sep()}"
            + self.mix(f'#{t} + {t}[1] + {t}.k + {t}[ {key} ] + h(table.concat({t}, ","))')
        )

    def stmt_caught_error(self, scope: _Scope) -> str:
        # The message holds the line of the error: a moved line changes the checksum.
        ok, e = self.fresh("ok"), self.fresh("e")
        if self.flip():
            inner = self.function_scope(scope)
            raise_ = f'error("boom" .. {self.value(inner)})'
        else:
            raise_ = "local t = nil return t.field"
        return (
            f"local {ok}, {e} = pcall(function(){self.sep()}iters = iters + 1{self.sep()}"
            f"{raise_}{self.sep()}end){self.sep()}{self.mix(f'h({e})')}"
        )


@st.composite
def programs(draw: st.DrawFn, *, max_depth: int = 3, max_statements: int = 3) -> Program:
    """A valid, terminating program returning ``acc, iters`` (or raising with them)."""
    builder = _Builder(draw, max_depth, max_statements)
    head = draw(st.sampled_from(("", "\ufeff")))
    if draw(st.booleans()):
        head += "#!/usr/bin/env luajit" + draw(st.sampled_from(NEWLINES))
    body = builder.body(_Scope())
    ends_in_error = draw(st.integers(0, 4)) == 4
    if ends_in_error:
        end = 'error("end " .. acc .. " " .. iters)'
    else:
        end = "return acc, iters"
    tail = draw(st.sampled_from(("", "\n", " -- trailing comment, no line break")))
    source = f"{head}{PROGRAM_HEADER}{body}{builder.sep()}{end}{tail}"
    return Program(source, ends_in_error)
