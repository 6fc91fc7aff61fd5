"""The Lua tokenizer reads source exactly as LuaJIT 2.1 does.

The instrumenter trusts it to find every loop and every reserved name, so each lexical rule
of ``lj_lex.c`` has a unit test here, and the property tests use a raw LuaJIT runtime as the
oracle: LuaJIT must read the same literals and report the same lines as the tokenizer.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lua_programs import (
    HARD_KEYWORDS,
    OPERATORS,
    Literal,
    Soup,
    marker_soups,
    number_literals,
    string_literals,
    token_streams,
)
from lupa import luajit21

from moonbox.sandbox._tokenizer import KEYWORDS, LuaTokenError, TokenKind, tokenize

NAME, KEYWORD, NUMBER, STRING, OP = (
    TokenKind.NAME, TokenKind.KEYWORD, TokenKind.NUMBER, TokenKind.STRING, TokenKind.OP,
)  # fmt: skip

PROPERTY = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def kinds_texts(src: str) -> list[tuple[TokenKind, str]]:
    return [(t.kind, t.text) for t in tokenize(src)]


def texts(src: str) -> list[str]:
    return [t.text for t in tokenize(src)]


def lines(src: str) -> list[tuple[str, int]]:
    return [(t.text, t.line) for t in tokenize(src)]


# -- the oracle ----------------------------------------------------------------------------

_ORACLE = r"""
local ORACLE = {}

-- Compiles and runs `src` with `M(v)` recording the line of each call and its argument.
function ORACLE.markers(src)
  local lines, values = {}, {}
  local function M(v)
    lines[#lines + 1] = debug.getinfo(2, "l").currentline
    values[#values + 1] = v
  end
  local f, err = load(src, "=soup", "t", setmetatable({M = M}, {__index = _G}))
  if not f then return false, err end
  local ok, msg = pcall(f)
  return ok, msg, lines, values
end

-- What `return <text>` evaluates to, with its type.
function ORACLE.literal(text)
  local f, err = load("return " .. text, "=literal")
  if not f then return "error", err end
  local v = f()
  if type(v) == "number" then return "number", string.format("%.17g", v) end
  return type(v), type(v) == "string" and v or tostring(v)
end

return ORACLE
"""


@pytest.fixture(scope="module")
def oracle():
    """A raw LuaJIT runtime, nothing from moonbox in it."""
    rt = luajit21.LuaRuntime(encoding=None)
    return rt.execute(_ORACLE)


def lua_table_list(table) -> list:
    return [table[i] for i in range(1, len(table) + 1)]


# -- long strings and long comments ---------------------------------------------------------


@pytest.mark.parametrize("level", range(6))
def test_long_string_of_every_level(level: int) -> None:
    eq = "=" * level
    # Inside: an opening bracket and the closing brackets of every other level.
    others = " ".join("]" + "=" * k + "]" for k in range(7) if k != level)
    literal = f"[{eq}[a [[ {others} [=[ b]{eq}]"
    assert kinds_texts(f"x = {literal} y") == [
        (NAME, "x"), (OP, "="), (STRING, literal), (NAME, "y"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "literal",
    [
        "[[]]",
        "[[ [[ ]]",  # an opening bracket inside is just text (no nesting in 5.1 mode)
        "[=[ ]] ]=]",  # ]] inside a level-1 string
        "[==[ ]=] ]] ]===] ]==]",
        "[=[]]=]",  # the close is found at the second ']'
        "[=[]=]",
        "[[\n]]",
        "[[x]=]]",
    ],
)
def test_long_string_ends_at_its_own_level(literal: str) -> None:
    assert kinds_texts(literal + " z") == [(STRING, literal), (NAME, "z")]


@pytest.mark.parametrize("level", range(4))
def test_long_comment_of_every_level_hides_code(level: int) -> None:
    eq = "=" * level
    others = " ".join("]" + "=" * k + "]" for k in range(5) if k != level)
    src = f"a --[{eq}[ while true do end {others} --]{eq}x goto x ]{eq}] b"
    assert texts(src) == ["a", "b"]


def test_long_comment_right_before_a_token() -> None:
    assert texts("--[[x]]y --[==[]==]z") == ["y", "z"]


@pytest.mark.parametrize(
    "opener",
    ["--[", "--[=", "--[==x", "---[[", "-- [[", "--[ [", "--=[["],
)
def test_not_a_long_bracket_makes_a_line_comment(opener: str) -> None:
    # Only "--" directly followed by a complete long bracket opens a long comment.
    assert lines(f"{opener} stuff ]] do\nnext") == [("next", 2)]


def test_long_string_lines_count_every_break_kind() -> None:
    src = "a = [[\n1\r\n2\n\r3\r4\n\n5]] b"
    # LF, CR LF, LF CR, CR, LF, LF: six line breaks.
    assert lines(src)[-1] == ("b", 7)


def test_line_after_multiline_long_comment() -> None:
    src = "--[==[\n\n]]\n]==] a\n--[[\r\n]] b"
    assert lines(src) == [("a", 4), ("b", 6)]


# -- line comments and line breaks ----------------------------------------------------------


@pytest.mark.parametrize(
    ("newline", "expected_line"), [("\n", 2), ("\r", 2), ("\r\n", 2), ("\n\r", 2)]
)
def test_line_comment_ends_at_every_line_break(newline: str, expected_line: int) -> None:
    assert lines(f'a -- comment "]] do{newline}b') == [("a", 1), ("b", expected_line)]


@pytest.mark.parametrize(
    ("breaks", "count"),
    [("\n\n", 2), ("\r\r", 2), ("\r\n\r\n", 2), ("\n\r\n\r", 2), ("\r\n\n", 2), ("\n\r\r", 2),
     ("\r\n\r", 2), ("\n\r\n", 2)],
)  # fmt: skip
def test_line_break_pairs_count_once(breaks: str, count: int) -> None:
    assert lines(f"a{breaks}b") == [("a", 1), ("b", 1 + count)]


def test_comment_at_end_without_line_break() -> None:
    assert texts("return x -- the end") == ["return", "x"]
    assert texts("return x --[[ a long comment ]]") == ["return", "x"]


def test_whitespace_kinds() -> None:
    assert lines("a\tb\vc\fd e") == [("a", 1), ("b", 1), ("c", 1), ("d", 1), ("e", 1)]


# -- short strings --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "literal",
    [
        r'"\n"', r'"\\"', r'"\""', r"'\''", r"""'"'""", r'''"'"''', r'"\a\b\f\n\r\t\v"',
        r'"\0"', r'"\65"', r'"\065"', r'"\255"', r'"\0651"', r'"\x41"', r'"\xfF"',
        r'"\u{48}"', r'"\u{10FFFF}"', r'"\u{0000048}"', '"\\z   \n\t  x"', '"\\z"',
        '"a\\\nb"', '"a\\\rb"', '"a\\\r\nb"', '"a\\\n\rb"', r'"\\\""', r'"-- not a comment"',
        r'"]]"', r'"[["', '"é日本"', r'"\\"',
    ],
)  # fmt: skip
def test_short_string_escapes(literal: str, oracle) -> None:
    assert kinds_texts(literal + " z") == [(STRING, literal), (NAME, "z")]
    kind, _ = oracle.literal(literal.encode())
    assert kind == b"string"  # and LuaJIT agrees it is one valid string


def test_escaped_backslash_before_quote_ends_the_string() -> None:
    assert texts(r'"a\\" b "c"') == [r'"a\\"', "b", '"c"']


def test_escaped_quote_does_not_end_the_string() -> None:
    assert texts(r'"a\" b" c') == [r'"a\" b"', "c"]


@pytest.mark.parametrize("newline", ["\n", "\r", "\r\n", "\n\r"])
def test_backslash_newline_lines(newline: str) -> None:
    src = f'a = "x\\{newline}y" b'
    assert lines(src) == [("a", 1), ("=", 1), (f'"x\\{newline}y"', 1), ("b", 2)]


def test_backslash_z_skips_line_breaks_and_counts_them() -> None:
    src = 'a = "x\\z\n\r\n  \r\r y" b'
    # \z skips LF CR (one break), LF, CR, CR: four line breaks.
    assert lines(src)[-1] == ("b", 5)


def test_other_quote_inside_a_string() -> None:
    assert texts("'\"' \"'\"") == ["'\"'", '"\'"']


# -- numbers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ("3", "3"), ("3.", "3"), (".5", "0.5"), ("3.25", "3.25"), ("1e10", "10000000000"),
        ("1e-3", "0.001"), ("1E+5", "100000"), ("1e+5", "100000"), ("0x1F", "31"),
        ("0XfF", "255"), ("0xA.8p1", "21"), ("0x1p-2", "0.25"), ("0x.8P+1", "1"),
        ("2.5e-1", "0.25"),
    ],
)  # fmt: skip
def test_numbers(literal: str, value: str, oracle) -> None:
    assert kinds_texts(f"x={literal};") == [
        (NAME, "x"), (OP, "="), (NUMBER, literal), (OP, ";"),
    ]  # fmt: skip
    assert oracle.literal(literal.encode()) == (b"number", value.encode())


@pytest.mark.parametrize(
    ("literal", "shown"),
    [("1LL", "1LL"), ("0x10ULL", "16ULL"), ("12i", "0+12i"), ("7ull", "7ULL"), ("3I", "0+3i")],
)
def test_cdata_numbers_are_one_token(literal: str, shown: str, oracle) -> None:
    assert kinds_texts(f"({literal})") == [(OP, "("), (NUMBER, literal), (OP, ")")]
    assert oracle.literal(literal.encode()) == (b"cdata", shown.encode())


@pytest.mark.parametrize(
    ("src", "expected"),
    [
        ("1e-3-1", ["1e-3", "-", "1"]),  # the sign belongs to the exponent only
        ("0x1p-2-1", ["0x1p-2", "-", "1"]),
        ("0xe+1", ["0xe", "+", "1"]),  # 'e' is a hex digit, not an exponent
        ("0x1e-1", ["0x1e", "-", "1"]),
        ("1-1", ["1", "-", "1"]),
        ("3..2", ["3..2"]),  # one (malformed) number, as LuaJIT reads it
        ("3 .. 2", ["3", "..", "2"]),
        ("a.b", ["a", ".", "b"]),
        ("a..b", ["a", "..", "b"]),
        ("..5", ["..", "5"]),
        ("1--x", ["1"]),
        ("x[1]", ["x", "[", "1", "]"]),
        ("3e", ["3e"]),
    ],
)
def test_number_boundaries(src: str, expected: list[str]) -> None:
    assert texts(src) == expected


# -- operators, keywords, names -------------------------------------------------------------


@pytest.mark.parametrize("op", OPERATORS)
def test_every_operator(op: str) -> None:
    assert kinds_texts(f"a {op} b") == [(NAME, "a"), (OP, op), (NAME, "b")]


@pytest.mark.parametrize(
    ("src", "expected"),
    [
        ("a...b", ["a", "...", "b"]),
        ("....", ["...", "."]),
        ("===", ["==", "="]),
        ("~==", ["~=", "="]),
        ("<==", ["<=", "="]),
        (">==", [">=", "="]),
        (":::", ["::", ":"]),
        ("::a::", ["::", "a", "::"]),
        ("a:b()", ["a", ":", "b", "(", ")"]),
        ("-1", ["-", "1"]),
        ("t[#t+1]", ["t", "[", "#", "t", "+", "1", "]"]),
    ],
)
def test_longest_operator_wins(src: str, expected: list[str]) -> None:
    assert texts(src) == expected


@pytest.mark.parametrize("word", HARD_KEYWORDS)
def test_keywords(word: str) -> None:
    assert kinds_texts(word) == [(KEYWORD, word)]


def test_goto_is_a_name_token() -> None:
    # LuaJIT parses `goto` as a statement only when a name follows; the instrumenter decides.
    assert "goto" in KEYWORDS
    assert kinds_texts("goto continue") == [(NAME, "goto"), (NAME, "continue")]
    assert kinds_texts("local goto = 1") == [
        (KEYWORD, "local"), (NAME, "goto"), (OP, "="), (NUMBER, "1"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "name", ["End", "END", "_end", "end_", "nil0", "do1", "_", "__mb", "é", "x日本", "Ünïcode"]
)
def test_names_that_look_like_keywords_or_are_not_ascii(name: str) -> None:
    assert kinds_texts(f"{name} end") == [(NAME, name), (KEYWORD, "end")]


def test_offsets_cover_the_token_text() -> None:
    src = 'local s = [==[\r\n]]==] --[[c]] x = "\\z\n y" .. 0x1p4'
    for tok in tokenize(src):
        assert src[tok.start : tok.end] == tok.text


# -- header line ----------------------------------------------------------------------------


@pytest.mark.parametrize("newline", ["\n", "\r", "\r\n", "\n\r"])
def test_first_line_starting_with_hash_is_skipped(newline: str) -> None:
    src = f"#!/usr/bin/env luajit do ]] 'x{newline}return 1"
    assert lines(src) == [("return", 2), ("1", 2)]


def test_hash_line_alone() -> None:
    assert tokenize("#!/usr/bin/env luajit") == []


def test_hash_elsewhere_is_the_length_operator() -> None:
    assert texts(" #t") == ["#", "t"]
    assert texts("x = #t") == ["x", "=", "#", "t"]


def test_hash_not_on_first_line_is_an_operator() -> None:
    assert kinds_texts("\n#t") == [(OP, "#"), (NAME, "t")]


# -- lexical errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("src", "line"),
    [
        ('x = "abc', 1),
        ("x = 'abc", 1),
        ('x = "abc\nd"', 1),
        ('x = "abc\\', 1),
        ('\n\nx = "ab\\"', 3),
        ("x = [[abc", 1),
        ("x = [==[abc]=]", 1),
        ("x = [==[abc]]", 1),
        ("\n--[[abc", 2),
        ("--[==[ ]] ]=]", 1),
        ("x = [=abc", 1),
        ("x = [==", 1),
        ("x = a ~ b", 1),
        ("\n\nx = @", 3),
        ("x = $", 1),
        ("x = a ! b", 1),
        ("x = `", 1),
        ("x = a | b", 1),
        ("x = \\", 1),
    ],
)
def test_lexical_errors(src: str, line: int, oracle) -> None:
    with pytest.raises(LuaTokenError) as info:
        tokenize(src)
    assert info.value.line == line
    assert str(info.value).startswith(f"line {line}: ")
    ok, _msg, *_ = oracle.markers(src.encode())
    assert ok is False  # LuaJIT refuses it too


@pytest.mark.parametrize("src", ["[=[ ]=]", "x = '\\z'", "x = [[]]", "--[==[]==]", ""])
def test_complete_brackets_are_not_errors(src: str) -> None:
    tokenize(src)


# -- properties -----------------------------------------------------------------------------


@PROPERTY
@given(token_streams().filter(lambda toks: not toks or toks[0][1] != "#"))
def test_tokens_joined_by_spaces_read_back_the_same(toks: list[tuple[str, str]]) -> None:
    # (A '#' first would make the whole line a '#!' header.)
    src = " ".join(text for _, text in toks)
    assert [(t.kind.value, t.text) for t in tokenize(src)] == toks


@PROPERTY
@given(literals=st.lists(string_literals(), min_size=1, max_size=4))
def test_string_literals_are_one_token_and_read_as_luajit_reads_them(
    literals: list[Literal], oracle
) -> None:
    src = " , ".join(lit.text for lit in literals)
    assert [t.text for t in tokenize(src) if t.kind is STRING] == [lit.text for lit in literals]
    for lit in literals:
        assert oracle.literal(lit.text.encode()) == (b"string", lit.value)


@PROPERTY
@given(literal=number_literals())
def test_number_literals_are_one_token_luajit_accepts(literal: Literal, oracle) -> None:
    assert kinds_texts(literal.text) == [(NUMBER, literal.text)]
    kind, value = oracle.literal(literal.text.encode())
    assert kind in (b"number", b"cdata"), value
    if kind == b"number":
        text = literal.text
        expected = float.fromhex(text) if text[:2].lower() == "0x" else float(text)
        assert float(value) == expected


@PROPERTY
@given(soup=marker_soups())
def test_lines_match_luajit(soup: Soup, oracle) -> None:
    """Every token line the tokenizer gives matches the line LuaJIT's debug info reports."""
    ok, msg, lua_lines, values = oracle.markers(soup.source.encode())
    assert ok is False and lua_lines is not None, msg  # it compiled and reached error("x")
    toks = tokenize(soup.source)
    markers = [t for t in toks if t.kind is NAME and t.text == "M"]
    assert [t.line for t in markers] == lua_table_list(lua_lines)
    # The literal inside each M( ... ) is exactly the one generated.
    args = [toks[toks.index(m) + 2].text for m in markers]
    assert args == [lit.text for lit in soup.literals]
    for lit, value in zip(soup.literals, lua_table_list(values), strict=True):
        if lit.value is not None:
            assert value == lit.value
    # And the final error("x") is reported at the tokenizer's line.
    error_token = [t for t in toks if t.kind is NAME and t.text == "error"][-1]
    assert msg == f"soup:{error_token.line}: x".encode()
