"""Editor stubs: LuaLS annotations from the bindings' pydantic models, and ``moonbox stubs``.

Every rendered file goes through :func:`check_stubs`: it must load as Lua (LuaJIT) and
every ``---@`` line must parse against the grammar of the tags the generator emits, with
type expressions read by a small recursive-descent parser.
"""

from __future__ import annotations

import enum
import keyword
import re
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import lupa.luajit21
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, create_model
from typing_extensions import TypedDict

from moonbox.bindings import Binding, LuaNumber, Permissions, Registry, default_bindings
from moonbox.bindings._stubs import render_stubs
from moonbox.cli._stubs import stubs

# -- the checker -------------------------------------------------------------------------

LUA_KEYWORDS = frozenset(
    "and break do else elseif end false for function goto if in local nil not or repeat "
    "return then true until while".split()
)
BUILTIN_TYPES = frozenset(
    "nil any boolean string number integer function table thread userdata lightuserdata "
    "unknown".split()
)
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
TOKEN = re.compile(
    r"""[ \t]*(?:
        (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<int>-?[0-9]+)(?![0-9.])
      | (?P<str>"(?:[^"\\\n\r]|\\(?:[\\"'abfnrtv]|[0-9]{1,3}))*")
      | (?P<sym>\[\]|[|?\[\]()<>,:\#])
    )""",
    re.VERBOSE,
)
FUNCTION = re.compile(r"function ([A-Za-z_][A-Za-z0-9_]*)\(([A-Za-z0-9_, ]*)\) end\Z")


class StubSyntaxError(AssertionError):
    """A line the LuaLS grammar the generator promises does not accept."""


class TagParser:
    """One ``---@`` line: the tag's grammar, then an optional ``# description`` tail.

    Grammar (what the generator emits; a subset of LuaLS)::

        tag      := 'meta' | 'deprecated' | 'class' NAME
                  | 'field' KEY '?'? type tail | 'param' NAME '?'? type tail
                  | 'return' type tail | 'overload' funtype
        KEY      := NAME | '[' STRING ']'
        tail     := ε | '#' text
        type     := unit ('|' unit)* '?'?
        unit     := primary '[]'*
        primary  := funtype | 'table' '<' type ',' type '>' | STRING | INTEGER
                  | 'true' | 'false' | '(' type ')' | NAME
        funtype  := 'fun' '(' (NAME '?'? ':' type (',' NAME '?'? ':' type)*)? ')'
                    (':' type (',' type)*)?
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.names: set[str] = set()  # type names referenced

    def fail(self, why: str) -> StubSyntaxError:
        return StubSyntaxError(f"{why} at column {self.pos} of {self.text!r}")

    def peek(self) -> tuple[str, str] | None:
        match = TOKEN.match(self.text, self.pos)
        if match is None or match.end() == self.pos:
            return None
        kind = match.lastgroup
        assert kind is not None
        return kind, match.group(kind)

    def next(self) -> tuple[str, str]:
        match = TOKEN.match(self.text, self.pos)
        if match is None:
            raise self.fail("no token")
        self.pos = match.end()
        kind = match.lastgroup
        assert kind is not None
        return kind, match.group(kind)

    def accept(self, symbol: str) -> bool:
        if self.peek() == ("sym", symbol):
            self.next()
            return True
        return False

    def expect(self, symbol: str) -> None:
        if not self.accept(symbol):
            raise self.fail(f"expected {symbol!r}")

    def name(self, *, lua: bool = False) -> str:
        kind, value = self.next()
        if kind != "name" or (lua and value in LUA_KEYWORDS):
            raise self.fail(f"expected a name, got {value!r}")
        return value

    def tail(self) -> str:
        rest = self.text[self.pos:]
        if not rest.strip():
            return ""
        if not re.match(r" # \S", rest):
            raise self.fail("text after the type without '# '")
        return rest[3:]

    def end(self) -> None:
        if self.text[self.pos:].strip():
            raise self.fail("unexpected text")

    def type(self) -> None:
        self.unit()
        while self.accept("|"):
            self.unit()
        self.accept("?")

    def unit(self) -> None:
        kind, value = self.next()
        if (kind, value) == ("name", "fun"):
            self.funtype_rest()
        elif (kind, value) == ("name", "table") and self.peek() == ("sym", "<"):
            self.expect("<")
            self.type()
            self.expect(",")
            self.type()
            self.expect(">")
        elif kind in ("str", "int") or value in ("true", "false"):
            pass
        elif (kind, value) == ("sym", "("):
            self.type()
            self.expect(")")
        elif kind == "name":
            self.names.add(value)
        else:
            raise self.fail(f"expected a type, got {value!r}")
        while self.accept("[]"):
            pass

    def funtype_rest(self) -> None:
        self.expect("(")
        if not self.accept(")"):
            while True:
                self.name(lua=True)
                self.accept("?")
                self.expect(":")
                self.type()
                if self.accept(")"):
                    break
                self.expect(",")
        if self.accept(":"):
            self.type()
            while self.accept(","):
                self.type()

    def tag(self) -> tuple[str, str, bool]:
        """Parse the line; returns (tag, subject, optional)."""
        if not self.text.startswith("---@"):
            raise self.fail("not a tag line")
        self.pos = 4
        tag = self.name()
        subject, optional = "", False
        if tag in ("meta", "deprecated"):
            self.end()
        elif tag == "class":
            subject = self.name()
            if subject in BUILTIN_TYPES:
                raise self.fail("a class shadows a built-in type")
            self.end()
        elif tag == "field":
            if self.accept("["):
                kind, subject = self.next()
                if kind != "str":
                    raise self.fail("expected a string key")
                self.expect("]")
            else:
                subject = self.name(lua=True)
            optional = self.accept("?")
            self.type()
            self.tail()
        elif tag == "param":
            subject = self.name(lua=True)
            optional = self.accept("?")
            self.type()
            self.tail()
        elif tag == "return":
            self.type()
            self.tail()
        elif tag == "overload":
            if self.next() != ("name", "fun"):
                raise self.fail("an overload is a fun type")
            self.funtype_rest()
            self.end()
        else:
            raise self.fail(f"unknown tag {tag!r}")
        return tag, subject, optional


def parse_type(text: str) -> set[str]:
    """The non-built-in type names ``text`` refers to; raises unless it is one type."""
    parser = TagParser(text)
    parser.type()
    parser.end()
    return parser.names - BUILTIN_TYPES


def check_stubs(text: str) -> dict[str, list[str]]:
    """Check a stub file; returns each function's parameter names.

    (a) It loads and runs as Lua under LuaJIT, defining each documented function.
    (b) Every line is blank, a ``--`` comment, a ``---`` description, a ``---@`` tag
        that parses, or ``function name(params) end``; every type name is built in or a
        declared class, declared once; each function's block documents its parameters in
        order, then its returns, and at most one overload; class blocks stand apart from
        functions.
    """
    lua = lupa.luajit21.LuaRuntime()
    try:
        lua.execute(text)
    except lupa.luajit21.LuaError as exc:
        raise StubSyntaxError(f"not valid Lua: {exc}") from None

    lines = text.split("\n")
    assert lines[0] == "---@meta" and lines[-1] == "", "---@meta first, one final newline"
    assert "\r" not in text
    classes: set[str] = set()
    referenced: set[str] = set()
    functions: dict[str, list[str]] = {}
    block: list[tuple[str, str, bool]] = []  # tags of the current run of --- lines
    for line in lines[1:]:
        if line.startswith("---"):
            if re.match(r"---[ \t]*@", line):
                parser = TagParser(line)
                tag = parser.tag()
                referenced |= parser.names
                if tag[0] == "class":
                    assert tag[1] not in classes, f"class {tag[1]} declared twice"
                    classes.add(tag[1])
                block.append(tag)
            else:
                assert not re.match(r"---[ \t]*\|", line), f"reads as an enum line: {line!r}"
            continue
        match = FUNCTION.match(line)
        if match:
            name, params = match[1], [p for p in match[2].split(", ") if p]
            assert name not in LUA_KEYWORDS and name not in functions
            assert not any(t == "class" for t, _, _ in block), "a class bound to a function"
            assert [s for t, s, _ in block if t == "param"] == params
            tags = [t for t, _, _ in block]
            # One return per value (none for a function that returns nothing), all of them
            # after the params; a binding has one overload (its table form), a function of
            # the engine library none.
            returns = [i for i, t in enumerate(tags) if t == "return"]
            assert all(i > j for i in returns for j, t in enumerate(tags) if t == "param")
            assert tags.count("overload") <= 1
            assert all(IDENT.match(p) and p not in LUA_KEYWORDS for p in params)
            functions[name] = params
        else:
            assert line == "" or (line.startswith("--") and not line.startswith("---")), line
            if block and block[0][0] == "class":
                assert {t for t, _, _ in block} <= {"class", "field"}
                keys = [s for t, s, _ in block if t == "field"]
                assert len(keys) == len(set(keys)), f"a field twice in {block[0][1]}"
            else:
                assert not block, f"tags bound to nothing: {block}"
        block = []
    undefined = referenced - classes - BUILTIN_TYPES
    assert not undefined, f"undefined types {undefined}"
    for name in functions:
        assert lupa.luajit21.lua_type(lua.globals()[name]) == "function", name
    return functions


def test_checker_rejects_what_luals_would_not_read():
    good = "---@meta\n---@param a number\n---@return any\n---@overload fun(t: X): any\n"
    for bad in [
        "---@param a number |\n",
        "---@param a table<string>\n",
        "---@param a fun(: x)\n",
        "---@param end number\n",
        "---@param a number trailing words\n",
        "---@field [x] number\n",
        "---@return (number\n",
        "---@class string\n",
        "---@frobnicate\n",
        '---@param a "unterminated\n',
    ]:
        with pytest.raises(StubSyntaxError):
            TagParser(bad.rstrip("\n")).tag()
    assert parse_type("fun(a: integer?, b: (string|nil)[]): table<string, X[]>|nil") == {"X"}
    assert parse_type('"a\\"b"|-3|true|T?') == {"T"}
    with pytest.raises(AssertionError):
        check_stubs(good + "function f(a) end\n")  # class X undefined
    with pytest.raises(StubSyntaxError):
        check_stubs("---@meta\nfunction end() end\n")


# -- rendering a few bindings --------------------------------------------------------------


def _fn(call: Any, args: Any) -> None:
    return None


def bind(name: str, args: type[BaseModel], **options: Any) -> Binding:
    return Binding(name, args, _fn, **options)


def render(*bindings: Binding, permissions: Permissions | None = None) -> str:
    text = render_stubs(bindings, permissions or Permissions(mode="full"))
    check_stubs(text)
    return text


def lines_of(text: str) -> list[str]:
    return text.splitlines()


def test_default_registry():
    registry = Registry(default_bindings())
    try:
        text = render_stubs(registry, Permissions())
    finally:
        registry.close()
    functions = check_stubs(text)
    assert {"add", "report", "query"} <= set(functions)
    assert functions["add"] == ["a", "b"]
    lines = lines_of(text)
    assert lines[0] == "---@meta"
    assert any("Generated by moonbox" in line for line in lines[:4])
    assert "-- Permissions: mode auto." in lines
    assert "---@class AddArgs" in lines
    assert any(re.match(r"---@field a number( #|$)", line) for line in lines)
    assert any(re.match(r"---@param message\? any( #|$)", line) for line in lines)
    assert "---@return number" in lines  # from the annotation of its function
    assert "---@overload fun(named: AddArgs): number" in lines
    report_block = text.split("function add(a, b) end")[1].split("function report(")[0]
    assert "---@return" not in report_block  # -> None: it returns nothing
    assert "---@overload fun(named: ReportArgs)\n" in report_block
    assert "function add(a, b) end" in lines


class Empty(BaseModel):
    pass


def _permission_set() -> list[Binding]:
    return [
        bind("look", Empty, risk="read", group="world"),
        bind("build", Empty, risk="write", group="world"),
        bind("explode", Empty, risk="danger", group="world"),
        bind("wipe", Empty, risk="danger", group="store", explain_denial=True),
    ]


def test_readonly_hides_write_and_danger():
    text = render_stubs(_permission_set(), Permissions(mode="readonly"))
    functions = check_stubs(text)
    assert set(functions) == {"look", "wipe"}
    assert "-- Permissions: mode readonly." in lines_of(text)
    wipe = text[text.index("---@class WipeArgs"):]
    assert "Denied by these permissions: every call fails" in wipe
    assert "---@deprecated" in wipe


def test_modes_and_rules():
    text = render_stubs(_permission_set(), Permissions(mode="auto"))
    assert set(check_stubs(text)) == {"look", "build", "explode", "wipe"}
    explode = text[text.index("---@class ExplodeArgs"):text.index("function explode")]
    assert "Asks the host for approval" in explode
    assert "Asks the host" not in text[text.index("function explode"):]
    assert "---@deprecated" not in text
    permissions = Permissions(mode="full", rules={"look": "deny", "ex*": "ask", "b*": "deny",
                                                  "build": "allow"})
    text = render_stubs(_permission_set(), permissions)
    assert set(check_stubs(text)) == {"build", "explode", "wipe"}
    assert "-- Permissions: mode full; rules: b* deny, build allow, ex* ask, look deny." in text
    assert "Asks the host for approval" in text


def test_stubs_show_the_refusal_codes_a_mod_can_meet():
    from moonbox.bindings import Refusal

    bindings = [*_permission_set(),
                bind("dig", Empty, risk="write", codes=("terrain:bedrock",),
                     prepare=lambda c, a: Refusal("no")),
                bind("dig_quietly", Empty, risk="read", codes=("too_deep",))]
    text = render_stubs(bindings, Permissions(mode="auto"))
    check_stubs(text)
    head = text[: text.index("-- Group:")]
    for code in ("[invalid_arguments]", "[vetoed]", "[unavailable]", "[aborted]", "[failed]",
                 "[namespace:name]"):
        assert code in head, code
    explode = text[text.index("---@class ExplodeArgs"):text.index("function explode")]
    assert "refused with [not_approved], [approval_timed_out] or [approval_cancelled]." \
        in explode
    dig = text[text.index("---@class DigArgs"):text.index("function dig(")]
    assert "---Checks its target before it asks or runs: [refused]" in dig
    assert "---Its own codes: [terrain:bedrock]." in dig
    assert "---Its own codes: [too_deep]." in text
    # A denied stub says only that it is denied.
    text = render_stubs(bindings, Permissions(mode="readonly"))
    wipe = text[text.index("---@class WipeArgs"):]
    assert "Its own codes" not in wipe and "approval" not in wipe


def test_the_query_bindings_show_every_query_code():
    from moonbox.bindings import REFUSAL_CODES

    registry = Registry()
    try:
        text = render_stubs(registry, Permissions(mode="readonly"))
    finally:
        registry.close()
    query = text[text.index("---@class QueryArgs"):text.index("function query(")]
    for code in REFUSAL_CODES:
        assert f"[{code}]" in query, code
    assert "---@return QueryReadingResult" in text
    assert '---@field state "fresh"|"failed"|"refused"' in text


def test_binding_codes_are_words():
    with pytest.raises(ValueError, match="codes"):
        bind("x", Empty, codes=("Not A Code",))
    with pytest.raises(ValueError, match="codes"):
        bind("x", Empty, codes="one_string")  # type: ignore[arg-type]


def test_groups_sorted_then_names():
    text = render_stubs(_permission_set(), Permissions(mode="full"))
    order = [m[1] for m in re.finditer(r"^function (\w+)", text, re.M)]
    assert order == ["wipe", "build", "explode", "look"]  # group store, then world
    assert text.index("-- Group: store") < text.index("-- Group: world")


def test_nothing_granted_is_still_a_valid_file():
    text = render_stubs([bind("build", Empty, risk="write")], Permissions(mode="readonly"))
    assert check_stubs(text) == {}


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Pos(BaseModel):
    """A point on the map."""

    x: int
    y: int = Field(0, description="height")


class Everything(BaseModel):
    model_config = ConfigDict(extra="forbid")
    f: float
    sf: StrictFloat
    ln: LuaNumber
    i: int
    s: str
    b: bool
    a: Any
    opt: Optional[int] = None  # noqa: UP045 - the spelling is what is tested
    opt_req: int | None
    ints: list[int]
    mixed: list[int | str]
    holes: list[int | None]
    scores: dict[str, float]
    maybe_scores: dict[str, int | None]
    mode: Literal["fast", "slow"]
    odd: Literal['say "hi"', "a\\b", 3, True]
    color: Color
    level: Level = Level.LOW
    either: Union[int, str]  # noqa: UP007
    pos: Pos
    path: list[Pos] = []
    pair: tuple[int, str]


def _field(text: str, name: str) -> str:
    block = text[text.index("---@class EverythingArgs"):]
    line = next(line for line in lines_of(block) if re.match(rf"---@field {name}\??\s", line))
    return line


def test_type_mapping():
    text = render(bind("everything", Everything))
    expected = {
        "f": "---@field f number",
        "sf": "---@field sf number",
        "ln": "---@field ln number",
        "i": "---@field i integer",
        "s": "---@field s string",
        "b": "---@field b boolean",
        "a": "---@field a any",
        "opt": "---@field opt? integer",
        "opt_req": "---@field opt_req integer",  # nil from Lua is a missing argument
        "ints": "---@field ints integer[]",
        "mixed": "---@field mixed (integer|string)[]",
        "holes": "---@field holes (integer|nil)[]",
        "scores": "---@field scores table<string, number>",
        "maybe_scores": "---@field maybe_scores table<string, integer?>",
        "mode": '---@field mode "fast"|"slow"',
        "odd": '---@field odd "say \\"hi\\""|"a\\\\b"|3|true',
        "color": '---@field color "red"|"green"',
        "level": "---@field level? 1|2 # (default 1)",
        "either": "---@field either integer|string",
        "pos": "---@field pos Pos",
        "path": "---@field path? Pos[] # (default {})",
        "pair": "---@field pair (integer|string)[]",
    }
    for name, line in expected.items():
        assert _field(text, name) == line
    assert "---A point on the map.\n---@class Pos\n---@field x integer\n" \
           "---@field y? integer # height (default 0)\n" in text


def test_params_follow_field_order_and_optional_marks():
    class Spawn(BaseModel):
        kind: str = Field(description="what to spawn")
        at: Pos
        count: int = 1
        tag: str | None = None

    text = render(bind("spawn", Spawn, description="Spawn a thing."))
    lines = lines_of(text)
    start = lines.index("---Spawn a thing.")
    assert lines[start:] [:8] == [
        "---Spawn a thing.",
        "---",
        "---Risk: write; costs 1 step.",
        "---@param kind string # what to spawn",
        "---@param at Pos",
        "---@param count? integer # (default 1)",
        "---@param tag? string",
        "---@overload fun(named: SpawnArgs)",  # its function returns None: nothing
    ]
    assert lines[start + 8] == "function spawn(kind, at, count, tag) end"


def test_result_class_and_nested_models():
    class Cell(BaseModel):
        pos: Pos
        block: str | None

    class Scan(BaseModel):
        cells: list[Cell]
        total: int

    text = render(bind("scan_area", Pos, result=Scan, cost=3, risk="read"))
    lines = lines_of(text)
    for line in ["---@class ScanAreaArgs", "---@class ScanAreaResult",
                 "---@field cells Cell[]", "---@field total integer",
                 "---@class Cell", "---@field block? string",
                 "---@return ScanAreaResult",
                 "---@overload fun(named: ScanAreaArgs): ScanAreaResult",
                 "---Risk: read; costs 3 steps.", "function scan_area(x, y) end"]:
        assert line in lines, line
    # In a result every field is present: Pos.y has a default, yet is not optional there
    pos = text[text.index("---@class Pos"):]
    assert pos.startswith("---@class Pos\n---@field x integer\n---@field y integer # height\n")
    assert "---@field y? integer # height (default 0)" in text  # ScanAreaArgs, an argument


def test_a_model_shared_by_bindings_is_one_class_and_clashing_names_are_told_apart():
    class Item(BaseModel):
        name: str

    first = Item

    class Item(BaseModel):  # noqa: F811 - same name, other model
        count: int

    class Give(BaseModel):
        item: first

    class Take(BaseModel):
        item: Item

    class Trade(BaseModel):
        give: first
        take: Item

    text = render(bind("give", Give), bind("take", Take), bind("trade", Trade))
    assert text.count("---@class Item\n") == 1
    assert text.count("---@class ") == 3 + 2  # three Args, Item and the other Item
    assert re.search(r"---@class (\w+Item)\n---@field count integer", text)


def test_recursive_model():
    class Node(BaseModel):
        label: str
        children: list[Node] = []

    Node.model_rebuild()
    text = render(bind("tree", Node))
    assert "---@field children? TreeArgs[] # (default {})" in text


def test_lua_keywords_and_odd_field_names():
    model = create_model("Odd", **{"end": (int, ...), "end_": (int, ...), "x": (int, 0)})
    aliased = create_model("Aliased", inner=(create_model(
        "Inner", dash=(int, Field(alias="dash-key"))), ...))
    text = render(bind("odd", model), bind("aliased", aliased))
    assert '---@field ["end"] integer' in text
    assert '---@param end__ integer # (field "end")' in text
    assert "function odd(end__, end_, x) end" in text
    assert '---@field ["dash-key"] integer' in text


def test_keyword_binding_name_is_left_out_with_a_note():
    text = render(bind("end", Empty), bind("ok", Empty))
    assert set(check_stubs(text)) == {"ok"}
    assert "-- end: a Lua keyword" in text


def test_descriptions_cannot_inject_tags_or_break_lines():
    class Tricky(BaseModel):
        a: int = Field(description="first\n---@param b number\r\n| x")

    text = render(bind("tricky", Tricky, description="@return nothing\n| also\nok"),
                  permissions=Permissions(mode="full"))
    assert "---\\@return nothing" in text and "---\\| also" in text
    assert "---@param a integer # first ---@param b number | x" in text


def test_pascal_case_clash_between_binding_names():
    text = render(bind("foo_bar", Empty), bind("fooBar", Empty))
    assert "---@class FooBarArgs" in text and "---@class FooBar2Args" in text


def test_same_input_same_bytes():
    def make() -> str:
        registry = Registry([*_permission_set(), bind("everything", Everything)])
        try:
            return render_stubs(registry, Permissions(mode="auto", rules={"w*": "ask"}),
                                header="for the test server\nversion 1")
        finally:
            registry.close()

    first = make()
    assert make() == first
    assert "-- for the test server\n-- version 1\n" in first
    check_stubs(first)


# -- property: any model the strategies can build renders to valid stubs -------------------

LUA_ONLY_KEYWORDS = ["end", "function", "local", "nil", "then", "repeat", "until", "goto",
                     "do", "elseif"]
plain_names = st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True).filter(
    lambda n: not n.startswith("model") and not hasattr(BaseModel, n)
    and not keyword.iskeyword(n)
)
field_names = plain_names | st.sampled_from(LUA_ONLY_KEYWORDS)
texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=24)
model_names = st.sampled_from(["Pos", "Item", "Box[int]", "Ünï", "string", "AddArgs", "any"])
literal_values = st.one_of(texts, st.integers(-(2**60), 2**60), st.booleans())


@st.composite
def literals(draw: st.DrawFn) -> Any:
    values = draw(st.lists(literal_values, min_size=1, max_size=4))
    return Literal[tuple(values)]


@st.composite
def enums(draw: st.DrawFn) -> Any:
    values = draw(st.lists(texts, min_size=1, max_size=3, unique=True)
                  | st.lists(st.integers(-5, 5), min_size=1, max_size=3, unique=True))
    return enum.Enum("Choice", {f"m{i}": v for i, v in enumerate(values)})


@st.composite
def models(draw: st.DrawFn, types: st.SearchStrategy[Any]) -> type[BaseModel]:
    name = draw(model_names)
    specs = draw(st.lists(st.tuples(field_names, types, texts, st.booleans()), max_size=4,
                          unique_by=lambda spec: spec[0]))
    fields: dict[str, Any] = {}
    for field_name, annotation, description, has_default in specs:
        if has_default:
            fields[field_name] = (Optional[annotation], Field(None, description=description))  # noqa: UP045
        else:
            fields[field_name] = (annotation, Field(description=description))
    return create_model(name, __config__=ConfigDict(extra="forbid"), **fields)


base_types = st.one_of(
    st.sampled_from([int, float, StrictFloat, LuaNumber, str, bool, Any, bytes]),
    literals(), enums(),
)
types = st.recursive(
    base_types,
    lambda inner: st.one_of(
        inner.map(lambda t: list[t]),
        inner.map(lambda t: dict[str, t]),
        inner.map(lambda t: Optional[t]),  # noqa: UP045
        st.tuples(inner, inner).map(lambda ab: Union[ab[0], ab[1]]),  # noqa: UP007
        st.tuples(inner, inner).map(lambda ab: tuple[ab[0], ab[1]]),
        models(inner),
    ),
    max_leaves=6,
)
binding_names = plain_names | st.sampled_from(["foo_bar", "fooBar", "end", "add", "_x", "q1"])


@st.composite
def bindings(draw: st.DrawFn) -> Binding:
    return Binding(
        draw(binding_names),
        draw(models(types)),
        _fn,
        result=draw(st.none() | models(types)),
        risk=draw(st.sampled_from(["read", "write", "danger"])),
        group=draw(st.sampled_from(["general", "world", "store.io"])),
        description=draw(texts),
        explain_denial=draw(st.booleans()),
    )


@st.composite
def permission_sets(draw: st.DrawFn) -> Permissions:
    rules = draw(st.dictionaries(
        plain_names | plain_names.map(lambda n: n[:2] + "*"),
        st.sampled_from(["allow", "ask", "deny"]), max_size=3,
    ))
    return Permissions(mode=draw(st.sampled_from(["readonly", "ask", "auto", "full"])),
                       rules=rules)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.lists(bindings(), max_size=4, unique_by=lambda b: b.name), permission_sets(),
       st.none() | texts)
def test_any_models_render_to_valid_stubs(found: list[Binding], permissions: Permissions,
                                          header: str | None):
    text = render_stubs(found, permissions, header=header)
    functions = check_stubs(text)
    expected = {
        b.name for b in found
        if b.name not in LUA_KEYWORDS
        and (permissions.decide(b.name, b.risk) != "deny" or b.explain_denial)
    }
    assert set(functions) == expected
    for b in found:
        if b.name in functions:
            assert len(functions[b.name]) == len(b.args.model_fields)
    assert render_stubs(found, permissions, header=header) == text


# -- what a binding returns, from its function's annotation ---------------------------------


class Hit(TypedDict):
    """Where a ray stopped."""

    name: str
    distance: Annotated[float, Field(description="along the ray")]
    owner: str | None


def _returns(fn: Any) -> tuple[list[str], str]:
    text = render(Binding("probe", Empty, fn, risk="read"))
    block = text.split("function probe(")[0].rsplit("\n\n", 1)[1]
    returns = [line.removeprefix("---@return ") for line in block.splitlines()
               if line.startswith("---@return ")]
    overload = next(line for line in block.splitlines() if line.startswith("---@overload"))
    return returns, overload.removeprefix("---@overload fun(named: ProbeArgs)")


def test_returns_come_from_the_annotation_when_there_is_no_result_model():
    def none(call: Any, args: Any) -> None: ...
    def count(call: Any, args: Any) -> int: ...
    def pair(call: Any, args: Any) -> tuple[Annotated[str, Field(description="the name")],
                                            int]: ...
    def xyz(call: Any, args: Any) -> tuple[float, float, float] | tuple[None]: ...
    def hit(call: Any, args: Any) -> Hit | None: ...
    def many(call: Any, args: Any) -> tuple[int, ...]: ...
    def names(call: Any, args: Any) -> list[str]: ...

    assert _returns(none) == ([], "")
    assert _returns(count) == (["integer"], ": integer")
    assert _returns(pair) == (["string # the name", "integer"], ": string, integer")
    assert _returns(xyz) == (["number?"] * 3, ": number?, number?, number?")
    assert _returns(hit) == (["Hit?"], ": Hit?")
    assert _returns(many) == (["any"], ": any")  # how many: unknown
    assert _returns(names) == (["string[]"], ": string[]")
    assert _returns(lambda call, args: None) == (["any"], ": any")  # no annotation
    text = render(Binding("probe", Empty, hit, risk="read"))
    assert "---Where a ray stopped.\n---@class Hit\n---@field name string\n" \
        "---@field distance number # along the ray\n---@field owner? string\n" in text


# -- the whole mod API of a game ------------------------------------------------------------

MOD_API = {"on", "after", "every", "cancel", "spawn", "wait", "export", "import", "require",
           "emit", "now", "state_get", "state_set", "report", "coreai_world_spawn",
           "coreai_world_get", "coreai_world_pos"}


def test_the_raw_engine_bindings_are_those_the_engine_library_takes():
    from importlib import resources

    from moonbox.mods._stubs import RAW_ENGINE_BINDINGS

    runtime = resources.files("moonbox.engine").joinpath("mod_runtime.lua").read_text()
    raw = re.search(r"local RAW = \{([^}]*)\}", runtime)
    assert raw is not None
    assert set(re.findall(r'"(\w+)"', raw.group(1))) == RAW_ENGINE_BINDINGS


def test_cli_default_is_the_whole_mod_api_of_a_game():
    result = invoke()
    assert result.exit_code == 0, result.output
    functions = check_stubs(result.output)
    assert MOD_API <= set(functions)
    assert not {"engine_ready", "engine_call"} & set(functions)  # the library's own
    assert functions["on"] == ["event", "fn"] and functions["spawn"] == ["fn"]
    text = result.output
    spawn = text.split("function coreai_world_spawn(")[0].rsplit("\n\n", 1)[1]
    assert "---@return string # the entity's name" in spawn
    assert "---@overload fun(named: CoreaiWorldSpawnArgs): string, integer" in spawn
    assert "---@return EntityTable?" in text and "---@class EntityTable" in text
    assert "---@return integer # an id for cancel\nfunction on(event, fn) end" in text
    assert "---@overload fun(named: OnArgs" not in text  # no table form for the library's
    assert "---@return any\n---@overload" not in text.split("-- Group: world")[1]


def test_cli_readonly_leaves_out_writes_and_the_functions_that_need_them():
    result = invoke("--mode", "readonly", "--deny", "after")
    functions = set(check_stubs(result.output))
    assert not {"state_set", "emit", "export", "coreai_world_spawn", "after", "spawn"} \
        & functions
    assert {"on", "every", "wait", "import", "require", "state_get", "coreai_world_get"} \
        <= functions


def test_cli_stubs_for_a_mod_from_its_manifest(tmp_path: Path):
    manifest = tmp_path / "mod.toml"
    manifest.write_text('id = "keeper"\n')  # no [permissions]: readonly
    functions = set(check_stubs(invoke("--manifest", str(manifest)).output))
    assert "state_set" not in functions and "state_get" in functions
    manifest.write_text('id = "keeper"\n[permissions]\nmode = "auto"\n'
                        '[permissions.rules]\nemit = "deny"\n')
    functions = set(check_stubs(invoke("--manifest", str(manifest)).output))
    assert "state_set" in functions and "emit" not in functions
    # The host's policy still caps it.
    functions = set(check_stubs(invoke("--manifest", str(manifest), "--mode",
                                       "readonly").output))
    assert "state_set" not in functions
    manifest.write_text("id = 3\n")
    result = CliRunner().invoke(stubs, ["--manifest", str(manifest)])
    assert result.exit_code == 2 and "mod.toml" in result.output


# -- the command ---------------------------------------------------------------------------


def invoke(*args: str) -> Any:
    return CliRunner().invoke(stubs, list(args), catch_exceptions=False)


def test_cli_writes_to_stdout():
    result = invoke()
    assert result.exit_code == 0, result.output
    assert result.output.startswith("---@meta\n")
    assert {"add", "report", "query"} <= set(check_stubs(result.output))


def test_cli_permissions_options():
    result = invoke("--mode", "readonly", "--deny", "add", "--ask", "rep*")
    assert result.exit_code == 0, result.output
    functions = check_stubs(result.output)
    assert "add" not in functions and "report" in functions
    assert "rules: add deny, rep* ask" in result.output
    assert "Asks the host for approval" in result.output


@pytest.mark.parametrize("args, message", [
    (["--allow", "add", "--deny", "add"], "conflict"),
    (["--deny", "bad name"], "rule 'bad name'"),
    (["--mode", "sometimes"], "sometimes"),
    (["--registry", "nocolon"], "MODULE:ATTR"),
    (["--registry", "no_such_module_here:x"], "cannot import"),
    (["--registry", "moonbox:nothing_here"], "no attribute"),
    (["--registry", "moonbox:__version__"], "not a Registry"),
])
def test_cli_usage_errors_exit_2(args, message):
    result = CliRunner().invoke(stubs, args)
    assert result.exit_code == 2
    assert message in result.output


def test_cli_writes_a_whole_file(tmp_path: Path):
    out = tmp_path / "moonbox.lua"
    out.write_text("old contents")
    result = invoke("-o", str(out), "--mode", "full")
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("---@meta\n")
    check_stubs(out.read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["moonbox.lua"]  # no temp file left
    assert invoke("--mode", "full").output == out.read_text()


def test_cli_unwritable_output_leaves_no_file(tmp_path: Path):
    result = CliRunner().invoke(stubs, ["-o", str(tmp_path / "missing" / "stubs.lua")])
    assert result.exit_code == 2
    assert "No such file or directory" in result.output
    assert not (tmp_path / "missing").exists()
    assert list(tmp_path.iterdir()) == []


def test_cli_failed_replace_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    out = tmp_path / "moonbox.lua"
    out.write_text("old contents")

    def refuse(src: Any, dst: Any) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("moonbox.cli._stubs.os.replace", refuse)
    result = CliRunner().invoke(stubs, ["-o", str(out)])
    assert result.exit_code == 2 and "Permission denied" in result.output
    assert out.read_text() == "old contents"
    assert [p.name for p in tmp_path.iterdir()] == ["moonbox.lua"]


@pytest.fixture
def host_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A host module in the current directory, with a registry and a factory for one."""
    name = f"stubs_host_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "from pydantic import BaseModel\n"
        "from moonbox.bindings import Binding, Registry\n"
        "class TeleportArgs(BaseModel):\n"
        "    x: int\n"
        "    y: int\n"
        "def _teleport(call, args):\n"
        "    return None\n"
        "def make():\n"
        "    return Registry([Binding('teleport', TeleportArgs, _teleport, risk='danger',\n"
        "                             group='world', description='Move the player.')])\n"
        "registry = make()\n"
        "def broken():\n"
        "    raise RuntimeError('no world loaded')\n"
    )
    monkeypatch.chdir(tmp_path)
    yield name
    module = sys.modules.pop(name, None)
    if module is not None:
        module.registry.close()


def test_cli_registry_object_and_factory(host_module: str):
    for ref in (f"{host_module}:registry", f"{host_module}:make"):
        result = invoke("--registry", ref)
        assert result.exit_code == 0, result.output
        functions = check_stubs(result.output)
        assert functions["teleport"] == ["x", "y"]
        assert "add" not in functions  # the host's registry, not the defaults
        assert "Asks the host for approval" in result.output  # danger asks in auto
    result = invoke("--registry", f"{host_module}:make", "--mode", "readonly")
    assert "teleport" not in check_stubs(result.output)
    result = CliRunner().invoke(stubs, ["--registry", f"{host_module}:broken"])
    assert result.exit_code == 2 and "no world loaded" in result.output
