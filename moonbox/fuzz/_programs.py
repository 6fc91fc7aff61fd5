"""Lua programs composed from dangerous primitives, as strategies for the fuzzer.

Each primitive is a small template of Lua text with holes. A hole is filled by a
sub-program (a block of statements or an expression, drawn recursively up to a depth) or by
a hostile value (NaN, huge counts, patterns that backtrack, format strings with widths).

Programs are valid Lua by construction: the renderer knows where it is (inside a loop, inside
a vararg function) and only emits ``break``, ``goto`` and ``...`` where they are legal, and
every label is fresh. A small share of programs is then broken on purpose
(:func:`corrupt`); the fuzzer asks LuaJIT's own parser which programs it accepts, so the
sandbox's verdict is checked against the parser's in both directions.

More kinds of case go with the composed programs (:func:`fuzz_cases` mixes them in, see
:data:`SPECIAL_CASES`): *hostile sizes* (:func:`hostile_size_cases`), sources shaped to make
a pass of the host superlinear; *metering gaps* (:func:`metering_gap_cases`), programs that
do much work per step unless the meter weighs all of it; *colliding keys*, tables whose
number keys share one hash chain, handed to the host; *error values*, hostile values
raised; *source sizes*, sources at the size limit; *report floods* across resumes; and
*long operations*, single operations whose cost grows with their data. Each kind has the
invariants that catch it (:mod:`moonbox.fuzz._invariants`).
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Literal

from hypothesis import strategies as st

from ._invariants import COLLIDING_CALL, HOST_MARKERS, PLAIN_CALL, plain_twin

__all__ = [
    "CASE_MIX", "COLLIDING_CALL", "COLLIDING_USES", "ERROR_VALUES", "FuzzCase",
    "HOSTILE_SOURCES", "KINDS", "LONG_OPERATIONS", "METERING_GAPS", "PLAIN_CALL", "PROFILES",
    "Profile", "RAISES", "Render", "SOURCE_SHAPES", "SPECIAL_CASES", "VALID_HOSTILE_SOURCES",
    "colliding_keys_case", "composed_cases", "corrupt", "error_value_case", "fuzz_cases",
    "hostile_size_case", "hostile_size_cases", "long_operation_case", "metering_gap_case",
    "metering_gap_cases", "plain_twin", "programs", "report_flood_case", "source_size_case",
]

Profile = Literal["steps", "time", "memory"]
PROFILES: tuple[Profile, ...] = ("steps", "time", "memory")
"""Which limit is tight for a case: the step budget, the wall budget or the heap."""


@dataclass
class Ctx:
    """Where a piece of program is rendered: what is legal there.

    Attributes:
        names: the shared counter of fresh labels and names.
        vararg: ``...`` is legal (the main chunk and ``function(...)`` bodies).
        loop: the continue label of the innermost loop of this function, or ``None``
            outside loops (then ``break`` and ``goto`` are not emitted).
    """

    names: itertools.count = field(default_factory=itertools.count)
    vararg: bool = True
    loop: str | None = None

    def fresh(self, prefix: str = "L") -> str:
        return f"{prefix}{next(self.names)}"


Render = Callable[[Ctx], str]
"""A piece of program, rendered once its context is known."""

# Hole kinds of a template, written $1..$9 in its text:
#   e   expression, same context          b   block, same context
#   lb  block in this template's loop     fb  block of a new function (no varargs)
#   vb  block of a new vararg function    fe  expression in a new function (no varargs)
#   n   small count   k   huge count   s   string literal   p   pattern   f   format
#   r   a replacement for gsub (string, table or function)   h   a hostile value
# $C is the template's own fresh label (a loop's continue label), $V a fresh local name.
Kinds = tuple[str, ...]


def _const(text: str) -> Render:
    return lambda ctx: text


def lua_string(data: str) -> str:
    """A Lua string literal for any text. Characters below 256 stand for that byte (so
    ``"\\xff"`` is the byte 0xff, not valid UTF-8), the others for their UTF-8 bytes."""
    out = []
    for ch in data:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 32 <= code < 127:
            out.append(ch)
        elif code < 256:
            out.append(f"\\{code:03d}")
        else:
            out.append("".join(f"\\{b:03d}" for b in ch.encode("utf-8")))
    return '"' + "".join(out) + '"'


_HOLE = re.compile(r"\$([1-9CV])")


def _template(text: str, kinds: Kinds, parts: tuple[Render, ...]) -> Render:
    def render(ctx: Ctx) -> str:
        label = ctx.fresh("c") if "$C" in text else None
        local = ctx.fresh("v") if "$V" in text else None

        def fill(m: re.Match[str]) -> str:
            key = m.group(1)
            if key == "C":
                return label or ""
            if key == "V":
                return local or ""
            index = int(key) - 1
            kind = kinds[index]
            if kind == "lb":
                child = replace(ctx, loop=label)
            elif kind in ("fb", "fe"):
                child = replace(ctx, vararg=False, loop=None)
            elif kind == "vb":
                child = replace(ctx, vararg=True, loop=None)
            else:
                child = ctx
            return parts[index](child)

        return _HOLE.sub(fill, text)

    return render


# -- leaves ----------------------------------------------------------------------------------

NUMBERS = (
    "0", "1", "-1", "2", "3", "7", "42", "0.5", "-0.0", "1e308", "-1e308", "2^53", "2^63",
    "-2^63", "0/0", "1/0", "-1/0", "math.huge", "-math.huge", "0x7fffffff", "0xffffffff",
    "1e-320", "1LL", "-1LL", "0x10ULL", "3i", "255", "256", "65536", "2^31", "2^32",
)  # fmt: skip
COUNTS = (
    "0", "1", "2", "10", "100", "1000", "1e4", "1e5", "1e6", "1e7", "2^24", "2^30", "2^31",
    "2^53", "1e300", "math.huge", "-1", "-2^31", "0/0", "1/0", "0.5", "1e9",
)  # fmt: skip
PATTERNS = (
    ".", ".-", "(.-)", "%a+", "(%w+)", "^(.*)$", "a*a*a*a*a*a*b", "(.)", "(.)(.)", "%s*",
    "[^x]*", "((((((.-))))))", "%b()", "%f[%w]%w+", "(a*)*", ".-.-.-.-.-.-.-.-b", "x?",
    "[%z\\1-\\255]*", "()", "(()", "[", "%", "%1", "(%1)", ".-$", "%d+%.?%d*",
)  # fmt: skip
FORMATS = (
    "%s", "%d", "%5.2f", "%q", "%x", "%X", "%o", "%c", "%e", "%g", "%99d", "%-99s",
    "%.99f", "%s%s%s", "%99.99f", "%%", "%i", "%u", "%a", "%p", "%10s|%-10s", "%.3s", "%",
    "%z", "%s %d %f", "%099d",
)  # fmt: skip
STRINGS = ("", "x", "ab", "hello world", "a" * 40, "(())", "%", "\0", "\255\254", "é",
           "\n", "return 1", "__index", "__gc", "python", "dump", "_G", "\27LuaJ")


def counts() -> st.SearchStrategy[Render]:
    return st.sampled_from(COUNTS).map(_const)


def small() -> st.SearchStrategy[Render]:
    return st.integers(0, 40).map(lambda n: _const(str(n)))


def no_host_marker(text: str) -> bool:
    """Whether ``text`` holds none of the markers the checker takes for host internals."""
    return not any(marker in text for marker in HOST_MARKERS)


def strings() -> st.SearchStrategy[Render]:
    long_level = st.integers(0, 3)
    # Random text may hold a word of the checker's host markers (the text strategy draws
    # on constants it finds, the checker's own among them): a mod that reported it would
    # be taken for a leak of the host's internals.
    text = st.text(max_size=12).filter(no_host_marker)
    quoted = st.one_of(st.sampled_from(STRINGS), text).map(lambda s: _const(lua_string(s)))
    long = st.tuples(st.text(alphabet="ab]=[\n ", max_size=10), long_level).map(
        lambda p: _const(_long_string(*p))
    )
    return st.one_of(quoted, long)


def _long_string(body: str, level: int) -> str:
    eq = "=" * level
    if f"]{eq}]" in body or body.endswith("]" + eq) or body.endswith("]"):
        body = body.replace("]", "")
    return f"[{eq}[{body}]{eq}]"


def patterns() -> st.SearchStrategy[Render]:
    bombs = st.integers(1, 40).map(lambda k: _const(f'(".-"):rep({k}) .. "x"'))
    return st.one_of(st.sampled_from(PATTERNS).map(lambda p: _const(lua_string(p))), bombs)


def formats() -> st.SearchStrategy[Render]:
    return st.sampled_from(FORMATS).map(lambda f: _const(lua_string(f)))


HOSTILE_VALUES = (
    "0/0", "1/0", "-1/0", "2^63", "-0.0", "1LL", "string.rep(\"x\", 2^20)",
    "string.rep(\"\\0\\255\", 1000)",
    "(function() local t = {} t.self = t return t end)()",
    "(function() local t = {} for i = 1, 100 do t = {t} end return t end)()",
    "(function() local t = {} for i = 1, 1000 do t = {t} end return t end)()",
    "(function() local t = {} for i = 1, 1e5 do t[i] = i end return t end)()",
    "(function() local s = {} local t = {} for i = 1, 40 do t = {t, t, s} end return t end)()",
    "setmetatable({}, {__index = function() while true do end end, __len = function() error(\"len\") end})",
    "setmetatable({}, {__tostring = function() return {} end, __pairs = function() error(\"p\") end})",
    "{[0/0 ~= 0/0 and 1 or 2] = 0/0, [1/0] = -1/0, [true] = print}",
    "{f = print, co = coroutine.create(print), [print] = 1}",
    "print", "coroutine.create(print)", "coroutine.running()", "_G", "string",
)  # fmt: skip
"""Values a binding or the host should refuse or copy safely: NaN, infinities, huge and
deep and cyclic and shared tables, functions, coroutines, metatables that loop or fail."""


def hostile() -> st.SearchStrategy[Render]:
    return st.sampled_from(HOSTILE_VALUES).map(_const)


NAMES = ("a", "b", "t", "s", "f", "co", "x", "mt", "hoard")

LEAF_EXPRESSIONS = (
    "nil", "true", "false", "{}", "{1, 2, 3}", "a", "b", "t", "s", "f", "co", "x", "hoard",
    "_G", "string", "math", "table", "coroutine", "bit", "print", "report", "add", "pcall",
    "error", "tostring", "setmetatable", "getmetatable", "select", "unpack", "next", "pairs",
    "coroutine.yield", "coroutine.running()", "string.rep", "string.format", "string.gsub",
    "table.sort", "table.concat", "function() end", "function(...) return ... end",
    "coroutine.create(print)", "(\"x\"):rep(1000)", "{n = 1, [0] = 0, [-1] = -1}",
)  # fmt: skip


def _vararg_leaf(ctx: Ctx) -> str:
    return "..." if ctx.vararg else "nil"


def leaves() -> st.SearchStrategy[Render]:
    return st.one_of(
        st.sampled_from(NUMBERS).map(_const),
        st.sampled_from(LEAF_EXPRESSIONS).map(_const),
        strings(),
        st.just(_vararg_leaf),
    )


# -- expressions -----------------------------------------------------------------------------

EXPRESSIONS: tuple[tuple[str, Kinds], ...] = (
    # operators
    ("($1) .. ($2)", ("e", "e")),
    ("($1) + ($2)", ("e", "e")),
    ("($1) % ($2)", ("e", "e")),
    ("($1) ^ ($2)", ("e", "e")),
    ("-($1)", ("e",)),
    ("#($1)", ("e",)),
    ("not ($1)", ("e",)),
    ("($1) == ($2)", ("e", "e")),
    ("($1) < ($2)", ("e", "e")),
    ("($1) <= ($2)", ("e", "e")),
    ("($1) and ($2) or ($3)", ("e", "e", "e")),
    ("($1)[ $2 ]", ("e", "e")),
    ("($1)($2)", ("e", "e")),
    ("($1):upper()", ("e",)),
    ("{$1, $2, k = $3, [ $4 ] = $5}", ("e", "e", "e", "e", "e")),
    ("{$1}", ("e",)),
    ("(function() $1 end)()", ("fb",)),
    ("(function(...) $1 return ... end)($2)", ("vb", "e")),
    ("function(a, b) $1 return $2 end", ("fb", "fe")),
    # the library, with ordinary and hostile arguments
    ("string.rep($1, $2)", ("s", "k")),
    ("string.rep($1, $2, $3)", ("s", "k", "s")),
    ("string.rep($1, $2)", ("e", "e")),
    ("string.format($1, $2, $3)", ("f", "e", "e")),
    ("string.format($1, string.rep(\"x\", $2))", ("f", "k")),
    ("string.format(\"%\" .. $1 .. \"d\", 1)", ("k",)),
    ("string.gsub($1, $2, $3)", ("e", "p", "r")),
    ("string.gsub(string.rep(\"ab\", $1), $2, $3, $4)", ("k", "p", "r", "e")),
    ("string.find(string.rep(\"a\", $1), $2)", ("k", "p")),
    ("string.match(string.rep(\"a\", $1) .. \"c\", $2)", ("k", "p")),
    ("string.find($1, $2, $3, $4)", ("e", "p", "e", "e")),
    ("string.byte(string.rep(\"x\", $1), 1, -1)", ("k",)),
    ("string.byte($1, $2, $3)", ("e", "e", "e")),
    ("string.char($1, $2)", ("e", "e")),
    ("string.sub($1, $2, $3)", ("e", "e", "e")),
    ("string.reverse(string.rep(\"ab\", $1))", ("k",)),
    ("string.len($1)", ("e",)),
    ("string.lower($1)", ("e",)),
    ("tostring($1)", ("e",)),
    ("tonumber($1, $2)", ("e", "e")),
    ("tonumber(string.rep(\"9\", $1))", ("k",)),
    ("table.concat($1, $2)", ("e", "e")),
    ("table.concat({string.rep(\"x\", $1), string.rep(\"y\", $2)}, string.rep(\",\", $3))",
     ("k", "k", "n")),
    ("select($1, $2, $3)", ("e", "e", "e")),
    ("select(\"#\", unpack({}, 1, $1))", ("k",)),
    ("unpack($1, $2, $3)", ("e", "e", "e")),
    ("unpack({1, 2, 3}, $1, $2)", ("k", "k")),
    ("math.floor($1)", ("e",)),
    ("math.max($1, $2)", ("e", "e")),
    ("math.random($1, $2)", ("e", "e")),
    ("math.fmod($1, $2)", ("e", "e")),
    ("bit.lshift($1, $2)", ("e", "e")),
    ("bit.tohex($1, $2)", ("e", "e")),
    ("bit.bxor($1, $2)", ("e", "e")),
    ("next($1)", ("e",)),
    ("rawget($1, $2)", ("e", "e")),
    ("rawequal($1, $2)", ("e", "e")),
    ("type($1)", ("e",)),
    ("getmetatable($1)", ("e",)),
    ("setmetatable({}, {__index = $1, __call = $2})", ("e", "e")),
    ("pcall($1, $2)", ("e", "e")),
    ("select(2, pcall(error, $1))", ("e",)),
    ("select(2, xpcall(function() $1 end, function(e) return e end))", ("fb",)),
    ("coroutine.wrap(function(...) $1 return $2 end)($3)", ("vb", "fe", "e")),
    ("coroutine.resume(coroutine.create(function(...) $1 end), $2)", ("vb", "e")),
    ("coroutine.status($1)", ("e",)),
    ("collectgarbage($1)", ("e",)),
    # binding calls with hostile arguments
    ("add($1, $2)", ("e", "e")),
    ("report($1)", ("e",)),
    ("select(2, pcall(report, $1, $2))", ("e", "e")),
    ("select(2, pcall(add, $1))", ("e",)),
    ("select(2, pcall(report, $1))", ("h",)),
    ("select(2, pcall(add, $1, $2))", ("h", "h")),
    ("select(2, pcall(print, $1, $2))", ("h", "h")),
    ("$1", ("h",)),
    # hostile values
    ("(function() local t = {} t.self = t t[t] = t return t end)()", ()),
    ("(function() local t = {} for i = 1, $1 do t = {t} end return t end)()", ("n",)),
    ("(function() local t = {} for i = 1, $1 do t = {t, t} end return t end)()", ("n",)),
    ("(function() local t = {} for i = 1, $1 do t[i] = i end return t end)()", ("k",)),
    ("setmetatable({}, {__tostring = function() $1 return $2 end})", ("fb", "fe")),
    ("setmetatable({}, {__index = function(t, k) $1 return $2 end})", ("fb", "fe")),
    ("setmetatable({}, {__len = function() $1 return $2 end, __eq = function() return true end})",
     ("fb", "fe")),
    ("setmetatable({}, {__metatable = $1, __gc = function() $2 end})", ("e", "fb")),
    ("coroutine.create(function(...) $1 end)", ("vb",)),
)  # fmt: skip

# Replacements for gsub: strings with captures, tables, callbacks that do work.
REPLACEMENTS: tuple[tuple[str, Kinds], ...] = (
    ('"%1%1"', ()),
    ('"%0%0%0%0"', ()),
    ('"%2"', ()),
    ("{a = 1, x = 2}", ()),
    ("function(c) $1 return $2 end", ("fb", "fe")),
    ("function(c) return c .. c end", ()),
    ("$1", ("e",)),
)


# -- statements ------------------------------------------------------------------------------

STATEMENTS: tuple[tuple[str, Kinds], ...] = (
    # assignments and calls
    ("local $V = $1", ("e",)),
    ("x = $1", ("e",)),
    ("t = $1", ("e",)),
    ("a, b = $1, $2", ("e", "e")),
    ("hoard = $1", ("e",)),
    ("local _ = $1", ("e",)),
    ("pcall(function() local _ = ($1)[ $2 ] end)", ("fe", "fe")),
    ("pcall(function() ($1)[ $2 ] = $3 end)", ("fe", "fe", "fe")),
    ("report($1)", ("e",)),
    ("report($1)", ("h",)),
    ("add($1, $2)", ("h", "e")),
    ("print($1, $2)", ("e", "e")),
    ("error($1)", ("h",)),
    ("coroutine.yield($1)", ("h",)),
    ("if $1 then $2 else $3 end", ("e", "b", "b")),
    ("do $1 end", ("b",)),
    # loops of every shape
    ("for i = 1, $1 do do $2 end ::$C:: end", ("k", "lb")),
    ("for i = $1, $2, $3 do do $4 end ::$C:: end", ("e", "e", "e", "lb")),
    ("for i = $1, 1, -1 do do $2 end ::$C:: end", ("k", "lb")),
    ("for i = 1, $1, 0.5 do do $2 end ::$C:: end", ("n", "lb")),
    ("while true do do $1 end ::$C:: end", ("lb",)),
    ("local $V = 0 while $V < $1 do $V = $V + 1 do $2 end ::$C:: end", ("k", "lb")),
    ("repeat do $1 end ::$C:: until false", ("lb",)),
    ("local $V = 0 repeat $V = $V + 1 do $2 end ::$C:: until $V >= $1", ("k", "lb")),
    ("do local $V = 0 ::$C:: $V = $V + 1 do $2 end if $V < $1 then goto $C end end", ("k", "b")),
    ("do ::$C:: do $1 end goto $C end", ("b",)),
    ("for k, v in pairs($1) do do $2 end ::$C:: end", ("e", "lb")),
    ("for k, v in ipairs($1) do do $2 end ::$C:: end", ("e", "lb")),
    ("for k, v in next, $1 do do $2 end ::$C:: end", ("e", "lb")),
    ("for w in string.gmatch(string.rep(\"ab \", $1), $2) do do $3 end ::$C:: end",
     ("k", "p", "lb")),
    ("for v in function() return 1 end do do $1 end ::$C:: end", ("lb",)),
    ("for i = 1, $1 do for j = 1, $2 do do $3 end ::$C:: end end", ("k", "k", "lb")),
    # recursion: plain, tail, mutual, through library callbacks
    ("local function r(n) $1 return 1 + r(n + 1) end local _ = r(0)", ("fb",)),
    ("local function r(n) $1 return r(n + 1) end r(0)", ("fb",)),
    ("local function r(n) if n > $1 then return n end return r(n + 1) end local _ = r(0)", ("k",)),
    ("local f1, f2 f1 = function(n) $1 return f2(n + 1) end f2 = function(n) return f1(n + 1) end "
     "pcall(f1, 0)", ("fb",)),
    ("local function r(n) return (string.gsub(\"a\", \"a\", function() $1 return r(n + 1) end)) end "
     "pcall(r, 0)", ("fb",)),
    ("local function r(n) return tostring(setmetatable({}, {__tostring = function() return r(n + 1) "
     "end})) end pcall(r, 0)", ()),
    ("local r r = setmetatable({}, {__index = function(t, k) $1 return r[k] end}) pcall(function() "
     "return r.x end)", ("fb",)),
    ("local p = {} local q = setmetatable({}, {__index = p}) setmetatable(p, {__index = q}) "
     "pcall(function() return q.x end)", ()),
    ("local function r(n) return pcall(r, n + 1) end r(0)", ()),
    ("local function r(n) local co = coroutine.create(r) return coroutine.resume(co, n + 1) end "
     "r(0)", ()),
    # closures: chains and captured state
    ("local g = function() return 1 end for i = 1, $1 do local h = g g = function() return h() + 1 "
     "end end pcall(g)", ("k",)),
    ("local fs = {} for i = 1, $1 do fs[i] = function() $2 return i end end", ("k", "fb")),
    # protected calls, errors, error objects
    ("pcall(function() $1 end)", ("fb",)),
    ("pcall(pcall, pcall, function() $1 end)", ("fb",)),
    ("xpcall(function() $1 end, function(e) $2 return e end)", ("fb", "fb")),
    ("local ok, e = pcall(error, $1) report(ok)", ("e",)),
    ("error($1)", ("e",)),
    ("error($1, $2)", ("e", "e")),
    ("error(setmetatable({}, {__tostring = function() $1 return $2 end, __index = function() $3 "
     "end}))", ("fb", "fe", "fb")),
    ("pcall(error, setmetatable({}, {__tostring = function() $1 end}))", ("fb",)),
    ("assert($1, $2)", ("e", "e")),
    # coroutines
    ("co = coroutine.create(function(...) $1 coroutine.yield($2) $3 end) "
     "coroutine.resume(co, $4) coroutine.resume(co) coroutine.resume(co)",
     ("vb", "fe", "vb", "e")),
    ("local w = coroutine.wrap(function(...) while true do $1 coroutine.yield($2) end end) "
     "for i = 1, $3 do w() end", ("vb", "fe", "k")),
    ("local c1 = coroutine.create(function() local c2 = coroutine.create(function() $1 "
     "coroutine.yield(1) end) coroutine.resume(c2) coroutine.yield(coroutine.resume(c2)) end) "
     "coroutine.resume(c1) coroutine.resume(c1)", ("fb",)),
    ("local c = coroutine.create(function() pcall(coroutine.yield, $1) end) "
     "coroutine.resume(c) coroutine.resume(c)", ("fe",)),
    ("coroutine.wrap(function() table.sort({3, 2, 1}, function(a, b) coroutine.yield() return a < "
     "b end) end)()", ()),
    ("coroutine.yield($1)", ("e",)),
    ("local c = coroutine.running() if c then coroutine.resume(c) end", ()),
    ("for i = 1, $1 do hoard = coroutine.create(function() $2 end) coroutine.resume(hoard) end",
     ("n", "fb")),
    # metatables on tables, every event
    ("mt = {__index = function(t, k) $1 return k end, __newindex = function(t, k, v) $2 end, "
     "__call = function(self, ...) $3 return ... end, __tostring = function() return $4 end, "
     "__concat = function(a, b) return $5 end, __eq = function() return true end, "
     "__lt = function() $6 return true end, __le = function() return false end, "
     "__len = function() return $7 end, __unm = function() return $8 end, "
     "__gc = function() $9 end}",
     ("fb", "fb", "vb", "fe", "fe", "fb", "fe", "fe", "fb")),
    ("local o = setmetatable({}, mt) local o2 = setmetatable({}, mt) "
     "pcall(function() local _ = o.x o.y = 1 o(1, 2) local _ = tostring(o) local _ = o .. \"s\" "
     "local _ = o == o2 local _ = o < o2 local _ = o <= o2 local _ = #o local _ = -o end)", ()),
    ("t = setmetatable({}, {__index = t, __mode = \"kv\", __metatable = $1})", ("e",)),
    ("pcall(setmetatable, $1, $2)", ("e", "e")),
    ("setmetatable(_G, {__index = function(t, k) $1 return $2 end, "
     "__newindex = function(t, k, v) $3 end})", ("fb", "fe", "fb")),
    # string bombs
    ("s = \"x\" for i = 1, $1 do s = s .. s end", ("n",)),
    ("s = string.rep($1, $2, $3)", ("s", "k", "s")),
    ("s = string.format(\"%s%s%s%s\", s, s, s, s)", ()),
    ("s = string.gsub(string.rep(\"x\", $1), \".\", function(c) $2 return c .. c end)",
     ("k", "fb")),
    ("local _ = string.find(string.rep(\"a\", $1), (\".-\"):rep($2) .. \"b\")", ("k", "n")),
    ("local _ = string.rep(\"x\", 1e6):rep(1e6)", ()),
    ("local _ = (\"x\"):rep(2^20):upper():lower():reverse()", ()),
    ("local parts = {} for i = 1, $1 do parts[i] = tostring(i) end s = table.concat(parts, $2)",
     ("k", "s")),
    # table bombs
    ("hoard = {} for i = 1, $1 do hoard[i] = {i} end", ("k",)),
    ("hoard = {} for i = 1, $1 do hoard[#hoard + 1] = $2 end", ("k", "e")),
    ("t = {} for i = 1, $1 do table.insert(t, 1, i) end", ("k",)),
    ("t = {} t[ $1 ] = 1 t[ $2 ] = 2 local _ = #t, table.maxn(t)", ("k", "k")),
    ("local _ = select(\"#\", unpack({}, 1, $1))", ("k",)),
    ("local big = {} for i = 1, $1 do big[i] = i end local _ = select(-1, unpack(big))", ("k",)),
    ("local st = {} for i = 1, $1 do st[i] = (i * 7919) % 1000 end table.sort(st, function(a, b) $2 "
     "return $3 end)", ("k", "fb", "fe")),
    ("local st = {} for i = 1, $1 do st[i] = i end pcall(table.sort, st, function() return true "
     "end)", ("k",)),
    ("pcall(table.sort, {3, 1, 2, $1, $2})", ("e", "e")),
    ("pcall(table.concat, {1, {}, 3})", ()),
    ("t = {} t[0/0 ~= 0/0 and 1 or 2] = 1 pcall(rawset, t, 0/0, 1)", ()),
    # varargs
    ("local function va(...) $1 return select(\"#\", ...), ... end local _ = va(unpack({1, 2, 3}, 1, "
     "$2))", ("vb", "k")),
    ("local _ = (function(...) return select($1, ...) end)(1, 2, 3)", ("e",)),
    ("local function va(...) return ... end for i = 1, $1 do local _ = va(1, 2, 3, 4, 5, 6, 7, 8) "
     "end", ("k",)),
    # escape attempts
    ("pcall(function() local mt = getmetatable(\"\") x = mt and mt.__index end)", ()),
    ("pcall(function() x = (\"\").dump or string.dump or rawget(string, \"dump\") end)", ()),
    ("pcall(function() x = load or loadstring or dofile or loadfile or require end)", ()),
    ("pcall(function() x = debug or jit or ffi or io or os or package or python end)", ()),
    ("pcall(function() x = getfenv or setfenv or newproxy or gcinfo or module end)", ()),
    ("pcall(function() x = rawget(_G, \"python\") or _G.python or _G[\"py\" .. \"thon\"] end)", ()),
    ("pcall(function() x = report.__globals__ or report.__class__ end)", ()),
    ("pcall(function() x = getmetatable(report) or getmetatable(add) end)", ()),
    ("pcall(function() x = rawget(string, \"rep\") rawset(string, \"dump\", 1) end)", ()),
    ("pcall(function() string.rep = nil math.pi = 3 _G.string = nil end)", ()),
    ("pcall(setmetatable, \"\", {__index = function() $1 end})", ("fb",)),
    ("pcall(function() x = collectgarbage(\"stop\") end)", ()),
    ("pcall(function() local c = coroutine.running() x = c and coroutine.resume(c) end)", ()),
    ("pcall(function() x = _G._G._G._G[\"_G\"] x.pcall = nil end)", ()),
    ("pcall(function() x = tostring(print) .. tostring({}) .. tostring(report) end)", ()),
    ("pcall(function() x = string.format(\"%p %p\", {}, print) end)", ()),
    ("pcall(function() x = 1LL + 2LL local _ = getmetatable(1LL) end)", ()),
    # output floods through the bindings
    ("for i = 1, $1 do report($2) end", ("k", "e")),
    ("for i = 1, $1 do pcall(add, $2, $3) end", ("k", "e", "e")),
    ("report(string.rep(\"r\", $1))", ("k",)),
    ("print(setmetatable({}, {__tostring = function() $1 return $2 end}))", ("fb", "fe")),
)  # fmt: skip

RETURNS: tuple[tuple[str, Kinds], ...] = (
    ("return $1", ("e",)),
    ("return $1, $2", ("e", "e")),
    ("return $1", ("h",)),
    ("return {$1, k = $2}", ("h", "h")),
    ("return unpack($1)", ("e",)),
    ("return hoard", ()),
    ("return t, s, x", ()),
    ("return (function() local t = {} t.self = t return t end)()", ()),
    ("return setmetatable({}, {__index = function() $1 end, __len = function() $2 end, "
     "__pairs = function() $3 end})", ("fb", "fb", "fb")),
    ("return print, coroutine.create(print), report", ()),
    ("return string.rep(\"x\", $1)", ("k",)),
    ("return {(function() local d = {} for i = 1, $1 do d = {d} end return d end)()}", ("n",)),
    ("return (function() local r = {} for i = 1, $1 do r[i] = {i, tostring(i)} end return r end)()",
     ("k",)),
    ("return {[0/0 ~= 0/0 and 1 or 2] = 1, [true] = false, [1.5] = 2, [{}] = 3}", ()),
)  # fmt: skip


def _kind(kind: str, depth: int) -> st.SearchStrategy[Render]:
    if kind in ("e", "fe"):
        return expressions(depth - 1)
    if kind in ("b", "lb", "fb", "vb"):
        return blocks(depth - 1)
    if kind == "n":
        return small()
    if kind == "k":
        return counts()
    if kind == "s":
        return strings()
    if kind == "p":
        return patterns()
    if kind == "f":
        return formats()
    if kind == "h":
        return hostile()
    if kind == "r":
        return st.one_of([_from(t, depth) for t in REPLACEMENTS])
    raise ValueError(f"unknown hole kind {kind!r}")


def _from(template: tuple[str, Kinds], depth: int) -> st.SearchStrategy[Render]:
    text, kinds = template
    if not kinds:
        return st.just(_const(text))
    return st.tuples(*[_kind(k, depth) for k in kinds]).map(
        lambda parts: _template(text, kinds, parts)
    )


@cache
def expressions(depth: int) -> st.SearchStrategy[Render]:
    """An expression; below depth 1, a leaf (a value, a name, a library function)."""
    if depth <= 0:
        return leaves()
    return st.one_of(leaves(), st.one_of([_from(t, depth) for t in EXPRESSIONS]))


def _break(ctx: Ctx) -> str:
    return "do break end" if ctx.loop else "local _ = nil"


def _continue(ctx: Ctx) -> str:
    return f"goto {ctx.loop}" if ctx.loop else "local _ = nil"


def _join(parts: list[Render]) -> Render:
    return lambda ctx: "\n".join(p(ctx) for p in parts)


@cache
def statements(depth: int) -> st.SearchStrategy[Render]:
    """One statement (which may hold blocks), or a loop exit where one is legal."""
    simple = st.sampled_from(STATEMENTS[:6])  # plain assignments when out of depth
    if depth <= 0:
        return simple.flatmap(lambda t: _from(t, 1))
    return st.one_of(
        st.one_of([_from(t, depth) for t in STATEMENTS]),
        st.sampled_from([_break, _continue]),
    )


@cache
def blocks(depth: int) -> st.SearchStrategy[Render]:
    """A block of zero to three statements."""
    return st.lists(statements(depth), max_size=3 if depth > 0 else 1).map(_join)


def programs(max_depth: int = 3) -> st.SearchStrategy[str]:
    """A whole valid program: statements, then perhaps a hostile return."""
    body = st.lists(statements(max_depth), min_size=1, max_size=6)
    ret = st.one_of(st.none(), st.one_of([_from(t, max_depth) for t in RETURNS]))

    def render(parts: tuple[list[Render], Render | None]) -> str:
        stmts, tail = parts
        ctx = Ctx()
        lines = [s(ctx) for s in stmts]
        if tail is not None:
            lines.append(tail(ctx))
        return "\n".join(lines) + "\n"

    return st.tuples(body, ret).map(render)


# -- deliberately broken programs -----------------------------------------------------------

CORRUPTIONS = (
    "append_end", "append_paren", "drop_end", "bad_local", "unclosed_string",
    "undefined_label", "unclosed_long_string", "stray_operator", "duplicate_label",
)  # fmt: skip


def corrupt(source: str, how: str) -> str:
    """Break a program in one of a few ways; the parser, not this function, says whether the
    result is still valid (dropping an ``end`` inside a string, say, changes nothing)."""
    if how == "append_end":
        return source + "end\n"
    if how == "append_paren":
        return source + ")\n"
    if how == "drop_end":
        i = source.rfind("end")
        return source if i < 0 else source[:i] + source[i + 3:]
    if how == "bad_local":
        return "local = 1\n" + source
    if how == "unclosed_string":
        return source + '\nlocal _ = "unclosed\n'
    if how == "undefined_label":
        return "goto nowhere_to_go\n" + source
    if how == "unclosed_long_string":
        return source + "\nlocal _ = [==[ never closed ]=]\n"
    if how == "stray_operator":
        return source + "\nlocal _ = 1 + \n"
    if how == "duplicate_label":
        return "::twice:: ::twice::\n" + source
    raise ValueError(f"unknown corruption {how!r}")


@dataclass(frozen=True, slots=True)
class FuzzCase:
    """One program to run, with the limit that is tight for it.

    Attributes:
        source: the Lua source text.
        profile: ``steps``, ``time`` or ``memory`` (see :data:`PROFILES`).
        corruption: how the program was broken on purpose, or ``None`` for a valid one.
        kind: which generator made it (one of :data:`KINDS`); the checker adds the
            invariants of that kind to the ones every program keeps.
    """

    source: str
    profile: Profile
    corruption: str | None = None
    kind: str = "composed"


def composed_cases(max_depth: int = 3) -> st.SearchStrategy[FuzzCase]:
    """Composed programs: about 4% of them deliberately broken."""
    # Drawn from a list, not as an integer: integer draws lean towards their bounds.
    broken = st.sampled_from((*[False] * 24, True))
    how = st.sampled_from(CORRUPTIONS)

    def make(parts: tuple[str, Profile, bool, str]) -> FuzzCase:
        source, profile, is_broken, corruption = parts
        if is_broken:
            return FuzzCase(corrupt(source, corruption), profile, corruption)
        return FuzzCase(source, profile)

    return st.tuples(programs(max_depth), st.sampled_from(PROFILES), broken, how).map(make)


# -- hostile sizes ---------------------------------------------------------------------------
#
# Sources shaped to make a pass of the host superlinear in their size, valid Lua or not:
# 16,000 `function` tokens before one `()` once held a load for 20 s while the planner
# scanned ahead for each one's parameter list. Generated at up to tens of thousands of
# pieces, such a pass shows as a `hang` (the worker does not answer within its deadline); a
# wrong verdict on them as `syntax-verdict`. The linearity tests (tests/sandbox) double each
# family and count the host's work.


def _repeat(piece: str) -> Callable[[int], str]:
    return lambda n: piece * n


HOSTILE_SOURCES: dict[str, Callable[[int], str]] = {
    # Parameter lists: each `function` used to scan ahead to the next `(` and `)`.
    "functions_then_one_paren": lambda n: "function " * n + "()",
    "functions_then_nothing": lambda n: "local x = " + "function " * n,
    "open_parameter_lists": lambda n: "function(" * n + ")",
    "parameters_without_close": lambda n: "function f(" + "a, " * n,
    "local_functions_then_one_body": lambda n: "local function f" * n + "() end",
    "functions_with_bodies": _repeat("local f = function() end\n"),
    # Nesting: blocks, functions, brackets, conditions.
    "nested_blocks": lambda n: "do " * n + "end " * n,
    "nested_blocks_unclosed": _repeat("do "),
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
    "many_ends": _repeat("end "),
    "many_untils": _repeat("until x "),
    # goto and labels.
    "labels_and_gotos": lambda n: "".join(f"::l{i}:: goto l{i} " for i in range(n)),
    "gotos_to_one_label": lambda n: "::top:: " + "goto top " * n,
    "gotos_then_labels": lambda n: "do " + "goto l " * n + "::l:: end",
    "goto_names": _repeat("goto "),
    "label_openers": _repeat(":: "),
    # Long brackets, comments and strings.
    "long_string_of_level_n": lambda n: "return [" + "=" * n + "["
    + ("]" + "=" * (n - 1) + "]") * 8 + "]" + "=" * n + "]",
    "unterminated_long_string_of_level_n": lambda n: "return [" + "=" * n + "[" + "]=]" * n,
    "long_comments": _repeat("--[==[ c ]=] ]==] x = 1\n"),
    "unterminated_long_comment": lambda n: "--[===[" + " ]==] ]=]" * n,
    "comment_openers_without_bracket": _repeat("--[====x\n"),
    "invalid_long_delimiter": lambda n: "x = [" + "=" * n,
    "many_long_strings": _repeat("x = [[a]] .. [=[b]=] .. [==[c]==]\n"),
    "unterminated_string": lambda n: 'x = "' + "a\\z   \\\n" * n,
    "unterminated_string_at_line_end": _repeat('x = "abc\\"'),
    "escapes": lambda n: 'x = "' + "\\x41\\u{41}\\065\\z \\n" * n + '"',
    # Tokens: numbers, names, operators, statement soup.
    "long_number": lambda n: "x = 0x" + "f" * n + "p+1",
    "long_name": lambda n: "x" * n + " = 1",
    "concatenation_chain": lambda n: "x = " + "a .. " * n + "a",
    "comparisons": _repeat("x = s < s\n"),
    "statements_on_one_line": _repeat("x = 1; "),
    "calls_after_literals": _repeat("x = 1 (f)(a) "),
    "method_calls": _repeat("a:b'c'{d}:e()"),
    "alternating_function_end": _repeat("function end "),
    "alternating_do_until": _repeat("do until "),
}
"""Hostile source families: each maps a size to a source of that many repeated pieces."""

VALID_HOSTILE_SOURCES = frozenset({
    "gotos_then_labels", "labels_and_gotos",
    "long_string_of_level_n", "long_comments", "comment_openers_without_bracket",
    "many_long_strings", "escapes", "long_number", "long_name", "comparisons",
    "statements_on_one_line", "calls_after_literals", "method_calls",
})  # fmt: skip
"""The families that are valid Lua at every size up to :data:`HOSTILE_SIZE_MAX` (LuaJIT
refuses the others at some: past its limits of nesting, locals or jump length, or always)."""

HOSTILE_SIZE_MAX = 20_000


def _size(rnd: random.Random, large_from: int, most: int) -> int:
    """Two sizes in three from the large end (where a superlinear pass or an unweighed step
    shows), one spread over the small ones (where LuaJIT's limits are)."""
    if rnd.random() < 2 / 3:
        return rnd.randint(large_from, most)
    return int(large_from ** rnd.random())


def hostile_size_case(rnd: random.Random) -> FuzzCase:
    """A hostile-size source of up to :data:`HOSTILE_SIZE_MAX` pieces; one of a family that
    may be invalid is marked as broken on purpose (LuaJIT's parser judges it)."""
    family = rnd.choice(sorted(HOSTILE_SOURCES))
    size = _size(rnd, HOSTILE_SIZE_MAX // 8, HOSTILE_SIZE_MAX)
    broken = None if family in VALID_HOSTILE_SOURCES else f"hostile size: {family}"
    return FuzzCase(HOSTILE_SOURCES[family](size), rnd.choice(PROFILES), broken, "hostile-size")


def hostile_size_cases() -> st.SearchStrategy[FuzzCase]:
    """Cases of :func:`hostile_size_case`."""
    return st.integers(0, 2**64).map(lambda salt: hostile_size_case(random.Random(salt)))


# -- metering gaps ---------------------------------------------------------------------------
#
# Programs that do much work per step unless the meter weighs all of what they run: a loop
# condition of thousands of calls, a goto loop over thousands of statements, a long
# straight-line body called in a loop, the top level of a long chunk. Most first run a cheap
# loop that grows the meter's poll interval to its largest (2^17 steps): work the meter
# under-charges then runs a whole interval without the clock being read, and the resume
# ends seconds after its wall budget, a `wall-time` violation. (Before loop conditions were
# weighed, a while loop of 3,000 calls in its condition ended 3 s after a 0.2 s budget.)

WARM_UP = "for _ = 1, 3e6 do end\n"
"""A cheap loop that grows the meter's poll interval to its largest."""


def _calls(k: int) -> str:
    return " + ".join(f"math.sin(i + {j})" for j in range(k))


def _statements(k: int) -> str:
    return "".join(f"x = x + math.sin(i + {j})\n" for j in range(k))


METERING_GAPS: dict[str, Callable[[int], str]] = {
    "while_condition": lambda k: f"local i = 0\nwhile ({_calls(k)}) < 1e300 do i = i + 1 end\n",
    "repeat_condition": lambda k: f"local i = 0\nrepeat i = i + 1 until ({_calls(k)}) > 1e300\n",
    "while_condition_in_a_function": lambda k: (
        f"local function cond(i) return ({_calls(k)}) < 1e300 end\n"
        "local i = 0\nwhile cond(i) do i = i + 1 end\n"),
    "nested_loop_conditions": lambda k: (
        f"local i = 0\nwhile true do\n  repeat i = i + 1 until ({_calls(k // 2 + 1)}) > -1e300\n"
        f"  while ({_calls(k // 2 + 1)}) > 1e300 do end\nend\n"),
    "goto_loop": lambda k: f"local i, x = 0, 0\n::top::\ni = i + 1\n{_statements(k)}goto top\n",
    "goto_loop_in_a_block": lambda k: (
        f"local i, x = 0, 0\ndo\n  ::top::\n  i = i + 1\n  if i > 0 then\n{_statements(k)}"
        "  end\n  goto top\nend\n"),
    "function_body": lambda k: (
        f"local i, x = 0, 0\nlocal function f()\n{_statements(k)}end\n"
        "while true do i = i + 1 f() end\n"),
    "loop_body": lambda k: f"local i, x = 0, 0\nwhile true do\ni = i + 1\n{_statements(k)}end\n",
    "elseif_chain": lambda k: (
        "local i, x = 0, 0\nwhile true do\n  i = i + 1\n  if i < 0 then x = 0\n"
        + "".join(f"  elseif i == {-j - 1} then x = {j}\n" for j in range(k))
        + "  else x = x + math.sin(i) end\nend\n"),
    "top_level": lambda k: f"local i, x = 1, 0\n{_statements(k)}return x\n",
}
"""Shapes of metering-gap programs: each maps a size to a program (valid Lua)."""

METERING_GAP_MAX = 3_500
"""Calls or statements at most: past ~6,000 LuaJIT refuses a loop as too long a jump."""


def metering_gap_case(rnd: random.Random) -> FuzzCase:
    """A metering-gap program, three in four after :data:`WARM_UP` and under the ``time``
    profile (the warm-up alone would use up the ``steps`` profile's budget)."""
    shape = METERING_GAPS[rnd.choice(sorted(METERING_GAPS))]
    size = _size(rnd, METERING_GAP_MAX // 2, METERING_GAP_MAX)
    if rnd.random() < 3 / 4:
        return FuzzCase(WARM_UP + shape(size), "time", kind="metering-gap")
    return FuzzCase(shape(size), rnd.choice(PROFILES), kind="metering-gap")


def metering_gap_cases() -> st.SearchStrategy[FuzzCase]:
    """Cases of :func:`metering_gap_case`."""
    return st.integers(0, 2**64).map(lambda salt: metering_gap_case(random.Random(salt)))


# -- colliding keys ---------------------------------------------------------------------------
#
# Tables whose number keys share one hash chain (colliding_keys.lua), handed to the host:
# returned, yielded, nested, passed to the bindings, raised. A host walk that re-finds each
# key along the chain is quadratic: with ~6,000 keys and the values' item limit (100,000
# entries) filled with copies of the table, one resume's values cost the host ~5-9x what a
# walk by slot costs. The checker runs each program's twin too, the same program with keys
# that do not collide (PLAIN_CALL for COLLIDING_CALL), and compares the host's times
# (`host-time`): both run under the same load, so the comparison holds on a busy machine.
# Building the table costs the mod about one quadratic walk (~0.05 s), in one resume: the
# inserts are charged like cheap ones (documented as not protected, docs/threat-model.md).

COLLIDING_KEY_COUNTS = (5_000, 6_500)
"""How many colliding keys a table gets, at least and at most."""
VALUE_ITEMS = 100_000
"""The item limit of values crossing to the host (``ValueLimits.max_items``)."""


@cache
def colliding_keys_lua() -> str:
    """The Lua functions ``colliding_keys(count)`` and ``plain_keys(count)``
    (``colliding_keys.lua``)."""
    from importlib import resources

    return resources.files("moonbox.fuzz").joinpath("colliding_keys.lua").read_text()


COLLIDING_USES: dict[str, Callable[[int], str]] = {
    "returned": lambda copies: "return " + ", ".join(["t"] * copies) + "\n",
    "returned_nested": lambda copies: "return {" + ", ".join(["t"] * copies) + "}\n",
    "returned_under_string_keys": lambda copies: "return {" + ", ".join(
        f"k{i} = t" for i in range(copies)) + "}\n",
    "yielded_each_resume": lambda copies: (
        "coroutine.yield(" + ", ".join(["t"] * copies) + ")\n"
        "coroutine.yield(" + ", ".join(["t"] * copies) + ")\n"
        "return " + ", ".join(["t"] * copies) + "\n"),
    "yielded_then_grown": lambda copies: (
        "coroutine.yield(" + ", ".join(["t"] * copies) + ")\n"
        "for i = 1, #keys do t[-keys[i] * 3] = i end\n"  # the negations of new keys: another chain
        "return t\n"),
    "mixed_with_array_part": lambda copies: (
        "for i = 1, 1000 do t[i] = i end\n"
        "return " + ", ".join(["t"] * max(1, copies - 1)) + "\n"),
    "reported": lambda copies: "for i = 1, 3 do report(t) end\nreturn 1\n",
    "printed_in_pcall": lambda copies: "for i = 1, 3 do pcall(print, t) end\nreturn 1\n",
    "binding_argument_refused": lambda copies: (
        "for i = 1, 3 do pcall(add, t, 1) end\nreturn select(2, pcall(add, 1, t))\n"),
    "raised": lambda copies: "error(t)\n",
    "raised_in_pcall_then_returned": lambda copies: (
        "local ok, e = pcall(error, t)\nreturn " + ", ".join(["e"] * copies) + "\n"),
    "as_values_not_keys": lambda copies: (
        "local v = {}\nfor k in pairs(t) do v[#v + 1] = k end\n"
        "return " + ", ".join(["t"] * max(1, copies // 2)) + ", v\n"),
}
"""What a colliding-keys program does with its table ``t`` (and its keys, ``keys``), given
how many copies of the table fit under the item limit."""


def colliding_keys_case(rnd: random.Random) -> FuzzCase:
    """A table of colliding number keys, handed to the host in one of :data:`COLLIDING_USES`."""
    use = rnd.choice(sorted(COLLIDING_USES))
    count = rnd.randrange(*COLLIDING_KEY_COUNTS) // 2 * 2
    copies = max(1, VALUE_ITEMS // (count + 1000) - 1)
    source = (colliding_keys_lua()
              + f"{COLLIDING_CALL}{count})\n"
              + "local t = {}\n"
              + "for i = 1, #keys do t[keys[i]] = i end\n"
              + COLLIDING_USES[use](copies))
    return FuzzCase(source, "time" if rnd.random() < 0.8 else "memory", kind="colliding-keys")


# -- error values -----------------------------------------------------------------------------
#
# Errors raised with values the host must not trust: huge tables, huge strings, strings
# just past the message limit, tables whose __tostring (or other metamethods) would record
# that they ran, functions, coroutines, errors raised again through pcall, xpcall,
# coroutines and levels. The host gets a message of at most 4 KiB (+ "...") whatever the
# value, never runs a metamethod of the mod to make it (`error-value`: the flag
# `metamethod_ran` stays nil), and stays alive. The programs never convert their error
# values themselves, so a set flag can only be the host's doing.

FLAGGED = ("setmetatable({}, {__tostring = function() metamethod_ran = 'tostring' "
           "return 'from tostring' end, __index = function() metamethod_ran = 'index' end, "
           "__len = function() metamethod_ran = 'len' return 1 end, "
           "__concat = function() metamethod_ran = 'concat' return '' end, "
           "__eq = function() metamethod_ran = 'eq' return true end, "
           "__call = function() metamethod_ran = 'call' end, "
           "__metatable = 'locked'})")
"""A table each of whose metamethods records that it ran."""

ERROR_VALUES: dict[str, Callable[[random.Random], str]] = {
    "string_at_the_limit": lambda r: f"string.rep('e', {4096 + r.randint(-40, 40)})",
    "huge_string": lambda r: f"string.rep('e', {r.choice((1 << 16, 1 << 20, 3 << 20))})",
    "huge_multibyte_string": lambda r: f"string.rep('\\226\\156\\147', {r.randint(1365, 1 << 18)})",
    "string_of_nul_and_high_bytes": lambda r: f"string.rep('\\0\\255', {r.randint(2000, 1 << 16)})",
    "huge_table": lambda r: (f"(function() local t = {{}} for i = 1, {r.choice((1000, 95_000))} "
                             "do t[i] = string.rep('x', 16) end return t end)()"),
    "flagged_table": lambda r: FLAGGED,
    "flagged_table_holding_a_huge_string": lambda r: (
        f"(function() local t = {FLAGGED} rawset(t, 1, string.rep('x', 1048576)) return t end)()"),
    "function": lambda r: r.choice(("print", "function() metamethod_ran = 'function' end")),
    "coroutine": lambda r: "coroutine.create(function() metamethod_ran = 'coroutine' end)",
    "number": lambda r: r.choice(("0/0", "1/0", "-0.0", "2^63", "1LL", "42")),
    "boolean_or_nil": lambda r: r.choice(("true", "false", "nil")),
}
"""Values to raise: each maps a generator to a Lua expression."""

RAISES: dict[str, Callable[[str, random.Random], str]] = {
    "top_level": lambda v, r: f"error({v})\n",
    "with_a_level": lambda v, r: (
        f"local function f() error({v}, {r.choice((0, 1, 2, 3, 50))}) end\nf()\n"),
    "assert": lambda v, r: f"assert(false, {v})\n",
    "through_pcall": lambda v, r: f"local ok, e = pcall(error, {v})\nerror(e, 0)\n",
    "nested_pcalls_with_levels": lambda v, r: (
        "local function f(n)\n"
        f"  if n == 0 then error({v}, {r.choice((1, 2))}) end\n"
        "  local ok, e = pcall(f, n - 1)\n"
        f"  error(e, {r.choice((0, 1, 2))})\n"
        f"end\nf({r.randint(1, 40)})\n"),
    "xpcall_handler_returns_it": lambda v, r: (
        f"local ok, e = xpcall(function() error({v}) end, function(e) return e end)\n"
        "error(e)\n"),
    "xpcall_handler_raises_it": lambda v, r: (
        f"xpcall(function() error('first') end, function() error({v}) end)\n"
        "error('after the handler')\n"),
    "from_a_coroutine": lambda v, r: (
        f"local co = coroutine.create(function() error({v}) end)\n"
        "local ok, e = coroutine.resume(co)\nerror(e)\n"),
    "from_coroutine_wrap": lambda v, r: f"coroutine.wrap(function() error({v}) end)()\n",
    "in_a_metamethod": lambda v, r: (
        f"local o = setmetatable({{}}, {{__index = function() error({v}) end}})\n"
        "local _ = o.x\n"),
    "in_a_sort_comparator": lambda v, r: (
        f"table.sort({{3, 1, 2}}, function() error({v}) end)\n"),
    "in_a_gsub_callback": lambda v, r: f"string.gsub('abc', '.', function() error({v}) end)\n",
    "after_a_yield": lambda v, r: f"coroutine.yield(1)\nerror({v})\n",
    "returned_after_pcall": lambda v, r: f"local ok, e = pcall(error, {v})\nreturn ok, e\n",
    "yielded_after_pcall": lambda v, r: (
        f"local ok, e = pcall(error, {v})\ncoroutine.yield(e)\nreturn 1\n"),
    "binding_refuses_it": lambda v, r: f"add({v}, 1)\n",
    "binding_refusal_caught_then_raised": lambda v, r: (
        f"local ok, e = pcall(add, 1, {v})\nerror(e, 0)\n"),
}
"""Ways to raise (or hand over) a value ``v``: each maps it to statements."""

LONG_TOKEN_SYNTAX_ERRORS: dict[str, Callable[[int], str]] = {
    # LuaJIT's message quotes the token it stopped at: the whole of a long one.
    "unfinished_string": lambda n: 'x = "' + "a" * n + "\n",
    "malformed_number": lambda n: "x = 1" + "2" * n + "z\n",
    "unfinished_string_with_escapes": lambda n: 'x = "' + "\\065" * (n // 4) + "\n",
}
"""Sources refused as syntax errors whose message would quote a token of ``n`` bytes."""


def error_value_case(rnd: random.Random) -> FuzzCase:
    """A program that raises (or hands over) a hostile error value, or, one in forty, a
    syntax error at a long token."""
    if rnd.random() < 0.025:
        shape = LONG_TOKEN_SYNTAX_ERRORS[rnd.choice(sorted(LONG_TOKEN_SYNTAX_ERRORS))]
        return FuzzCase(shape(rnd.choice((5000, 100_000))), rnd.choice(PROFILES),
                        "syntax error at a long token", "error-value")
    value = ERROR_VALUES[rnd.choice(sorted(ERROR_VALUES))](rnd)
    raise_ = RAISES[rnd.choice(sorted(RAISES))]
    return FuzzCase(raise_(value, rnd), rnd.choice(("time", "time", "memory", "steps")),
                    kind="error-value")


# -- sources at the size limit -------------------------------------------------------------
#
# Sources just under, at and over MAX_SOURCE_BYTES (4 MiB), counted in UTF-8 bytes: a
# comment, a long string, code made of few long tokens, multi-byte characters that put the
# bytes over while the characters stay under. Over the limit is a SourceTooLarge with the
# exact size (`source-limit`), at or under it never is; no crash, and the sandbox goes on.
# Code of many small statements near the limit is left out: instrumenting and compiling
# 4 MiB of it takes the host 10-16 s (linear, but past the fuzzer's hang deadline).


def _source_limit() -> int:
    from .._errors import MAX_SOURCE_BYTES

    return MAX_SOURCE_BYTES


def _fill_to(head: str, tail: str, filler: str, size: int) -> str:
    """``head`` + filler + ``tail`` of exactly ``size`` UTF-8 bytes (the filler is repeated,
    then padded with spaces, which are whitespace in code and text in comments and strings)."""
    fixed = len((head + tail).encode("utf-8"))
    unit = len(filler.encode("utf-8"))
    count, pad = divmod(max(0, size - fixed), unit)
    return head + filler * count + " " * pad + tail


SOURCE_SHAPES: dict[str, Callable[[int], str]] = {
    "comment": lambda n: _fill_to("--", "", "x", n),
    "long_comment_then_code": lambda n: _fill_to("--[[", "]] return 1\n", "c", n),
    "long_string": lambda n: _fill_to("return #[==[", "]==]\n", "s", n),
    "multibyte_long_string": lambda n: _fill_to("return #[[", "]]\n", "\u00e9", n),
    "multibyte_comment": lambda n: _fill_to("--", "\nreturn 1\n", "\u2713", n),
    "code_of_long_lines": lambda n: _fill_to(
        "local t = {}\n", "\nreturn #t\n",
        't[#t + 1] = "' + "v" * 1000 + '"\n', n),
}
"""Shapes of big sources: each maps a size in UTF-8 bytes to a source of (about) that size."""

SOURCE_SIZE_OFFSETS = (-4096, -2, -1, 0, 1, 2, 3, 4096, 1 << 20)
"""Sizes around the limit, as offsets from it."""


def source_size_case(rnd: random.Random) -> FuzzCase:
    """A source just under, at or over the source size limit."""
    size = _source_limit() + rnd.choice(SOURCE_SIZE_OFFSETS)
    shape = rnd.choice(sorted(SOURCE_SHAPES))
    return FuzzCase(SOURCE_SHAPES[shape](size), rnd.choice(("time", "steps")),
                    kind="source-size")


# -- report floods ---------------------------------------------------------------------------
#
# A program that reports (report, print, inside pcall and its own coroutines) many lines in
# each of three resumes, and yields how many it sent. The caps apply per resume: every
# resume keeps its first line ("resume <n>") and at most MAX_REPORTS lines, and each line
# it sent is either kept or counted as dropped, with REPORTS_DROPPED last when any was
# (`reports`).

FLOOD_LINES: dict[str, str] = {
    "report": "report('line ' .. i)",
    "report_wide": "report(string.rep('w', 5000))",
    "report_number": "report(i)",
    "print": "print('p', i, nil)",
    "pcall_report": "pcall(report, i)",
    "report_in_a_coroutine": "coroutine.wrap(function() report(i) end)()",
    "report_then_yield_inside": "coroutine.wrap(function() report(i) coroutine.yield() end)()",
}
"""One reported line, by statement (``i`` is its number)."""


def report_flood_case(rnd: random.Random) -> FuzzCase:
    """Three resumes of report floods, each of its own size and kind of line."""
    parts = ["local function flood(resume, count, line)\n"
             "  report('resume ' .. resume)\n"
             "  for i = 2, count do line(i) end\n"
             "  return count\n"
             "end\n"]
    for resume in (1, 2, 3):
        count = rnd.choice((1, 10, 999, 1000, 1001, 1002, 1500, 5000, rnd.randint(1, 3000)))
        line = FLOOD_LINES[rnd.choice(sorted(FLOOD_LINES))]
        call = f"flood({resume}, {count}, function(i) {line} end)"
        parts.append(f"coroutine.yield({call})\n" if resume < 3 else f"return {call}\n")
    return FuzzCase("".join(parts), "time", kind="report-flood")


# -- long single operations -----------------------------------------------------------------
#
# One VM instruction or library call whose cost grows with its data: a native sort of
# 4,096 references to one long string (each comparison a full memcmp), comparisons of long
# strings in straight-line code or in a loop after the meter's poll interval has grown,
# table.maxn over a big hash part. Sized so that one operation (or a straight line of them,
# which the meter charges like cheap lines) costs ~0.25-0.6 s here: whatever ends past its
# wall budget and the stall margin is a time trip after the fact (`late-end`), and the
# resume ends within the budget, the stall margin and the usual margin. Rare: they are slow.
# (A loop of table.maxn over 20,000-50,000 hash nodes, after the warm-up, ran 2.4-3 s under a
# 0.2 s budget; over 200,000 nodes, 72-120 s: see tests/sandbox/test_fuzz_found.py. It is
# charged by its table's sizes now. A loop of comparisons of two long strings kept out of
# the JIT's traces ran a whole poll window, ~46 s, until the alarm.)

# Calls that keep a loop out of the JIT's traces (each aborts a trace), so its steps run
# in the interpreter, where the alarm reaches them (moonbox/sandbox/_alarm.py).
OUT_OF_TRACES = ("coroutine.resume(co)", "pcall(error)", "pcall(error, i)",
                 "coroutine.wrap(function() end)()")

LONG_OPERATIONS: dict[str, Callable[[random.Random], str]] = {
    "native_sort_of_one_long_string": lambda r: (
        f"local s = string.rep('x', {r.randint(48, 112) << 10})\n"
        "local t = {}\nfor i = 1, 4096 do t[i] = s end\n"
        "table.sort(t)\nreturn #t\n"),
    "native_sort_of_two_long_strings": lambda r: (
        f"local a = string.rep('x', {r.randint(48, 112) << 10})\nlocal b = a .. 'y'\n"
        "local t = {}\nfor i = 1, 4096 do t[i] = i % 2 == 0 and a or b end\n"
        "table.sort(t)\nreturn #t\n"),
    "straight_line_comparisons": lambda r: (
        "local s = string.rep('x', 4194304)\nlocal x\n"
        + "x = s < s\n" * r.randint(300, 600) + "return x\n"),
    "straight_line_comparisons_after_warm_up": lambda r: (
        WARM_UP + "local s = string.rep('x', 4194304)\nlocal x\n"
        + "x = s <= s\n" * r.randint(300, 600) + "return x\n"),
    "comparisons_in_a_loop_after_warm_up": lambda r: (
        WARM_UP + f"local s = string.rep('x', {r.randint(1, 8) << 20})\nlocal x\n"
        "for i = 1, 1e9 do x = s < s end\n"),
    "maxn_in_a_loop_after_warm_up": lambda r: (
        f"local h = {{}}\nfor i = 1, {r.randint(20, 50) * 1000} do h[i * 2 + 0.5] = i end\n"
        + WARM_UP + "local x\nfor i = 1, 1e9 do x = table.maxn(h) end\n"),
    "costly_steps_out_of_traces_after_warm_up": lambda r: (
        WARM_UP + f"local a = string.rep('x', {r.randint(1, 8) << 20})\n"
        "local b = a .. 'b'\na = a .. 'a'\n"
        "local co = coroutine.create(function() end)\ncoroutine.resume(co)\n"
        "local x\nfor i = 1, 1e9 do\n  x = a < b\n  "
        + r.choice(OUT_OF_TRACES) + "\nend\n"),
}
"""Programs of long single operations: each maps a generator to a program."""


def long_operation_case(rnd: random.Random) -> FuzzCase:
    """A program of one of :data:`LONG_OPERATIONS`, under the ``time`` profile."""
    make = LONG_OPERATIONS[rnd.choice(sorted(LONG_OPERATIONS))]
    return FuzzCase(make(rnd), "time", kind="long-operation")


SPECIAL_CASES: dict[str, Callable[[random.Random], FuzzCase]] = {
    "hostile-size": hostile_size_case,
    "metering-gap": metering_gap_case,
    "colliding-keys": colliding_keys_case,
    "error-value": error_value_case,
    "source-size": source_size_case,
    "report-flood": report_flood_case,
    "long-operation": long_operation_case,
}
"""The kinds of case besides composed programs, each with its generator."""

KINDS = ("composed", *SPECIAL_CASES)

CASE_MIX = (*["composed"] * 60, *["hostile-size"] * 4, *["metering-gap"] * 4,
            *["colliding-keys"] * 3, *["error-value"] * 5, "source-size",
            *["report-flood"] * 2, "long-operation")
"""Of 80 cases: 60 composed programs, and the special kinds (the slow ones rare)."""


def fuzz_cases(max_depth: int = 3) -> st.SearchStrategy[FuzzCase]:
    """Cases: mostly composed programs (:func:`composed_cases`), the others of the kinds of
    :data:`SPECIAL_CASES` in the proportions of :data:`CASE_MIX`."""
    # The special kinds come from a generator seeded with the whole draw: drawn by hypothesis
    # (which explores by changing a few choices at a time) the same source came back for
    # many draws in a row, and the first family of each list far more often than the others.
    kind = st.sampled_from(CASE_MIX)

    def pick(drawn: tuple[str, FuzzCase, int]) -> FuzzCase:
        which, composed, salt = drawn
        if which == "composed":
            return composed
        return SPECIAL_CASES[which](random.Random(f"{salt}:{composed.source}"))

    return st.tuples(kind, composed_cases(max_depth), st.integers(0, 2**32)).map(pick)
