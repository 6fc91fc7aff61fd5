"""Source instrumentation changes nothing but the step count.

For every loop shape and construct, the instrumented chunk compiles, returns exactly what the
original returns, and reports errors at the same lines; every loop iteration, backward
``goto`` and function entry passes a check; reserved names are refused. The property tests
run random valid programs (``lua_programs.programs``) both ways in a raw LuaJIT runtime and
through :class:`moonbox.Sandbox`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lua_programs import Program, Soup, marker_soups, programs
from lupa import luajit21

from moonbox import Budget, HostError, Sandbox, ScriptError
from moonbox.sandbox import _instrument
from moonbox.sandbox._instrument import (
    PLAN_CACHE_MAX_BYTES,
    RESERVED_PREFIX,
    SEGMENT_TOKENS,
    TOKENS_PER_STEP,
    ReservedNameError,
    _plan_of,
    _PlanCache,
    _plans,
    check_text,
    instrument,
)
from moonbox.sandbox._tokenizer import TokenKind, tokenize

CELL, POLL, SLOW = "__mb_n", "__mb_p", "__mb_s"
HUGE_WINDOW = 2.0**40

PROPERTY = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- the harness: raw LuaJIT, nothing from moonbox but the instrumented text ----------------

_HARNESS = r"""
local ffi = require("ffi")
local H = {}

-- ok|type:value|... or error|type:value, plus the lines M() was called from.
local function describe(marks, ok, ...)
  local out = { ok and "ok" or "error" }
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    if type(v) == "number" then
      out[#out + 1] = string.format("number:%.17g", v)
    else
      out[#out + 1] = type(v) .. ":" .. tostring(v)
    end
  end
  if #marks > 0 then out[#out + 1] = "marks:" .. table.concat(marks, ",") end
  return table.concat(out, "|")
end

local function fresh_env(marks)
  local env = setmetatable({}, { __index = _G })
  env.M = function(v) marks[#marks + 1] = debug.getinfo(2, "l").currentline return v end
  return env
end

function H.raw(src, name, ...)
  local marks = {}
  local f, err = load(src, name, "t", fresh_env(marks))
  if not f then return "syntax|" .. err end
  return describe(marks, pcall(f, ...))
end

-- Runs the wrapper with a step window of `window`; the slow path refills it. Returns the
-- result and the steps taken (every check executed).
function H.instrumented(wrapped, name, window, ...)
  local marks = {}
  local maker, err = load(wrapped, name, "t", fresh_env(marks))
  if not maker then return "syntax|" .. err, 0 end
  local cell = ffi.new("double[2]", window, 0)
  local poll = ffi.cast("double*", cell) + 1  -- the poll flag, never raised here
  local spent = 0
  local function slow()
    spent = spent + (window - cell[0])
    cell[0] = window
  end
  -- The chunk returns the mod's main function, called as main(cell, poll, slow, ...).
  local main = maker()
  local result = describe(marks, pcall(main, cell, poll, slow, ...))
  return result, spent + (window - cell[0])
end

return H
"""


@pytest.fixture(scope="module")
def harness():
    """A raw LuaJIT runtime with the JIT on, as a mod would get it minus moonbox."""
    return luajit21.LuaRuntime(encoding=None).execute(_HARNESS)


def _text(value: bytes) -> str:
    return value.decode("utf-8", "surrogateescape")


def run_raw(harness, src: str, *args: object, name: str = "=prog") -> str:
    return _text(harness.raw(src.encode("utf-8", "surrogateescape"), name.encode(), *args))


def run_instrumented(
    harness, src: str, *args: object, window: float = HUGE_WINDOW, name: str = "=prog"
) -> tuple[str, int]:
    wrapped = instrument(src, cell=CELL, poll=POLL, slow=SLOW).source
    result, steps = harness.instrumented(
        wrapped.encode("utf-8", "surrogateescape"), name.encode(), window, *args
    )
    return _text(result), int(steps)


def run_both(harness, src: str, *args: object, window: float = HUGE_WINDOW) -> tuple[str, int]:
    """Run raw and instrumented; assert they agree; return the result and the steps."""
    raw = run_raw(harness, src, *args)
    assert not raw.startswith("syntax|"), raw
    inst, steps = run_instrumented(harness, src, *args, window=window)
    assert inst == raw
    return raw, steps


def luajit_lines(text: str) -> int:
    return len(re.findall(r"\r\n|\n\r|\r|\n", text))


# -- every construct returns what it returned before ------------------------------------------

CONSTRUCTS = {
    "while": ("local i, s = 0, 0 while i < 10 do i = i + 1 s = s + i end return s", "ok|number:55"),
    "numeric_for": (
        "local s = 0 for i = 1, 10, 3 do s = s + i end\n"
        "for i = 3, 1, -1 do s = s * 10 + i end for i = 1, 0 do s = -1 end return s",
        "ok|number:22321",
    ),
    "float_for": ("local s = 0 for x = 0.5, 2.5, 0.5 do s = s + x end return s", "ok|number:7.5"),
    "generic_for": (
        'local s = "" for k, v in ipairs({"a", "b", "c"}) do s = s .. k .. v end\n'
        "for k in next, {7} do s = s .. k end return s",
        "ok|string:1a2b3c1",
    ),
    "iterator_for": (
        "local function upto(n) local i = 0 return function() i = i + 1\n"
        "if i <= n then return i end end end\n"
        "local s = 0 for i in upto(4) do s = s + i end return s",
        "ok|number:10",
    ),
    "repeat_until_local": (
        "local n = 0 repeat local m = n * 2 n = n + 1 until m >= 6 return n",
        "ok|number:4",
    ),
    "repeat_until_upvalue": (
        "local fs = {} local i = 0\n"
        "repeat local j = i fs[#fs + 1] = function() return j end i = i + 1 until j >= 2\n"
        "return fs[1]() + fs[2]() * 10 + fs[3]() * 100",
        "ok|number:210",
    ),
    "goto_backward": (
        "local i = 0 ::top:: i = i + 1 if i < 5 then goto top end return i",
        "ok|number:5",
    ),
    "goto_forward": ("local x = 1 goto skip x = 2 ::skip:: return x", "ok|number:1"),
    "goto_continue_for": (
        "local s = 0 for i = 1, 5 do local odd = i % 2 == 1\n"
        "if odd then goto continue end s = s + i ::continue:: end return s",
        "ok|number:6",
    ),
    "goto_continue_while": (
        "local i, s = 0, 0 while i < 6 do i = i + 1 local keep = i % 3 ~= 0\n"
        "if not keep then goto continue end local d = i * 2 s = s + d\n"
        "::continue::\nend return s",
        "ok|number:24",
    ),
    "goto_continue_repeat": (
        "local i = 0 repeat i = i + 1 local done = i >= 3\n"
        "if not done then goto continue end ::continue:: until done return i",
        "ok|number:3",
    ),
    "label_at_end_of_block": (
        "do goto done local x = 1 ::done:: end\n"
        "for i = 1, 2 do goto next ::next:: end\n"
        "do ::a:: end do ::a:: end return 1",
        "ok|number:1",
    ),
    "nested_gotos": (
        "local n = 0 for i = 1, 3 do for j = 1, 3 do if j == 2 then goto next_i end\n"
        "n = n + 1 end ::next_i:: end return n",
        "ok|number:3",
    ),
    "break": (
        "local n = 0 while true do n = n + 1 if n == 4 then break end end\n"
        "for i = 1, 10 do if i > 2 then break end n = n + 1 end return n",
        "ok|number:6",
    ),
    "nested_functions": (
        "local function outer(n) local function inner(m) return m * 2 end\n"
        "return inner(n) + 1 end return outer(20)",
        "ok|number:41",
    ),
    "recursion": (
        "local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end\n"
        "return fib(15)",
        "ok|number:610",
    ),
    "mutual_tail_calls": (
        "local even, odd\n"
        "function even(n) if n == 0 then return true end return odd(n - 1) end\n"
        "function odd(n) if n == 0 then return false end return even(n - 1) end\n"
        "return even(10000), odd(7)",
        "ok|boolean:true|boolean:true",
    ),
    "methods": (
        "local a = {b = {v = 3}}\n"
        "function a.b:c(x) return self.v + x end\n"
        "function a.b.d(x) return x * 2 end\n"
        "return a.b:c(4), a.b.d(5)",
        "ok|number:7|number:10",
    ),
    "global_function": ("function g(x) return x + 1 end return g(1)", "ok|number:2"),
    "closures": (
        "local function counter() local c = 0 return function() c = c + 1 return c end end\n"
        "local a, b = counter(), counter() a() a() b() return a(), b()",
        "ok|number:3|number:2",
    ),
    "anonymous_function_as_argument": (
        "local t = {3, 1, 2} table.sort(t, function(x, y) return x > y end)\n"
        "return table.concat(t, ',')",
        "ok|string:3,2,1",
    ),
    "varargs_function": (
        "local function f(...) local n = select('#', ...) return n, ... end return f(1, nil, 3)",
        "ok|number:3|number:1|nil:nil|number:3",
    ),
    "return_at_end": ("return 1, 2", "ok|number:1|number:2"),
    "empty_return": ("local x = 1 return", "ok"),
    "return_semicolon": ("return 'x';", "ok|string:x"),
    "empty_chunk": ("", "ok"),
    "comment_at_end_without_newline": ("return 1 -- done", "ok|number:1"),
    "long_comment_at_end": ("local x = 1 --[[ c ]] return x --", "ok|number:1"),
    "shebang": ("#!/usr/bin/env luajit\nreturn 1", "ok|number:1"),
    "shebang_crlf": ("#!/usr/bin/env luajit -- do\r\nreturn 2", "ok|number:2"),
    "shebang_only": ("#!/usr/bin/env luajit", "ok"),
    "bom": ("\ufeffreturn 3", "ok|number:3"),
    "bom_and_shebang": ("\ufeff#!lua\nreturn 4", "ok|number:4"),
    "goto_as_variable": ("local goto = 1; goto = goto + 1 return goto", "ok|number:2"),
    "goto_as_field_and_function": (
        "local t = {goto = 3} t.goto = t.goto + 1\n"
        "local r local function goto(s) r = s end goto 'called'\n"
        "return t.goto, r",
        "ok|number:4|string:called",
    ),
    "goto_variable_then_goto_statement": (
        "local goto = 5 local x = goto goto done ::done:: return x",
        "ok|number:5",
    ),
    "code_in_strings_and_comments": (
        'local s = "while true do end" local t = [[ for i=1,2 do ]]\n'
        "--[==[ repeat until false ]] goto x ]==] -- function() end\n"
        "local u = 'goto top' .. [=[ ]] do ]=] return #s + #t + #u",
        "ok|number:46",
    ),
    "string_call_syntax": (
        "local function f(x) return type(x) end return f'a', f[[b]], f{1}",
        "ok|string:string|string:string|string:table",
    ),
    "statement_starting_with_parenthesis": (
        "local t = {} local f = function() t[1] = 9 end;\n(f)() return t[1]",
        "ok|number:9",
    ),
    "cdata_numbers": (
        "return tonumber(2LL + 0x10ULL), 0xA.8p1, 1e+5",
        "ok|number:18|number:21|number:100000",
    ),
    "hot_nested_loops": (
        "local s = 0 for i = 1, 20000 do local j = 0 while j < 3 do j = j + 1 s = s + j end end\n"
        "return s",
        "ok|number:120000",
    ),
    "coroutines": (
        "local co = coroutine.wrap(function(a) for i = 1, 3 do a = a + coroutine.yield(i) end\n"
        "return a end) local s = co(10) s = s + co(1) + co(1) return s + co(1)",
        "ok|number:19",
    ),
    "metamethods": (
        "local mt = {__index = function(t, k) return k * 2 end,\n"
        "__add = function(a, b) return 100 end}\n"
        "local t = setmetatable({}, mt) return t[21], t + t",
        "ok|number:42|number:100",
    ),
    # Statement starts the planner must tell from the middle of an expression: checks go
    # before each (test_checks_at_every_statement_start_change_nothing runs them all so).
    "parenthesised_statements_after_a_complete_one": (
        "local t = {} local function f() t[#t + 1] = 1 end\n"
        "local a (f)() local b = 1 (f)() b = 's' (f)() b = nil (f)() b = {} (f)() b = ... (f)()\n"
        "b = function() end (f)() do end (f)() ;(f)() return #t",
        "ok|number:9",
    ),
    "calls_that_continue_an_expression": (
        "local function f(s) return function(t) return s .. #t end end\n"
        "local g = function(x) return x end local x = g (f)'a'{1, 2}\n"
        "local y = -g(g) (3) return x, y",
        "ok|string:a2|number:-3",
    ),
    "method_chains_and_string_calls": (
        "local o = {v = 1} function o:inc(n) self.v = self.v + (n or 1) return self end\n"
        "o:inc():inc'2' o:inc({} and 3) return o.v",
        "ok|number:7",
    ),
    "until_then_a_parenthesised_call": (
        "local n = 0 local function f() n = n * 10 end\n"
        "repeat n = n + 1 until n > 2 (f)() return n",
        "ok|number:30",
    ),
    "until_then_a_semicolon": ("local n = 0 repeat n = n + 1 until n > 2; n = n * 10 return n",
                               "ok|number:30"),
    "until_with_a_call_and_a_function": (
        "local n = 0 local done = function() return n >= 2 end\n"
        "repeat n = n + 1 until done (nil) repeat n = n + 1 until (function() return n >= 5 end)()\n"
        "return n",
        "ok|number:5",
    ),
    "while_condition_with_a_function": (
        "local i = 0 while (function() return i < 3 end)() do i = i + 1 end return i",
        "ok|number:3",
    ),
    "table_separators_and_functions": (
        "local t = {1; 2, f = function() local a = 1; return a + 2 end;}\n"
        "return t[1] + t[2] + t.f()",
        "ok|number:6",
    ),
    "labels_in_a_row_at_the_end_of_a_block": (
        "do goto a local x = 1 ::a:: ::b:: end\n"
        "local n = 0 for i = 1, 3 do if i == 2 then goto c end local y = i n = n + y ::c:: end\n"
        "return n",
        "ok|number:4",
    ),
    "local_names_then_statements": (
        "local a local b, c local d = 1 local e, f = 2, 3 e = e + f return d + e",
        "ok|number:6",
    ),
    "if_chains_with_labels": (
        "local n = 0 if n == 1 then n = 10 elseif n == 0 then ::l:: n = n + 1\n"
        "if n < 3 then goto l end else n = 20 end return n",
        "ok|number:3",
    ),
    "return_with_a_semicolon_in_a_function": (
        "local function f() return 1; end local function g() return; end\n"
        "return f(), g()",
        "ok|number:1",
    ),
}


@pytest.mark.parametrize(("src", "expected"), CONSTRUCTS.values(), ids=CONSTRUCTS.keys())
def test_construct_returns_what_it_returned(harness, src: str, expected: str) -> None:
    result, _ = run_both(harness, src)
    assert result == expected


@pytest.mark.parametrize(("src", "expected"), CONSTRUCTS.values(), ids=CONSTRUCTS.keys())
def test_construct_with_a_tiny_window(harness, src: str, expected: str) -> None:
    # A window of one step: the slow path runs at every other check, from inside JIT traces.
    big, steps = run_both(harness, src)
    small, small_steps = run_both(harness, src, window=1)
    assert small == big == expected
    assert small_steps == steps


def test_top_level_varargs(harness) -> None:
    src = "local a, b = ... return select('#', ...), a, b, ..."
    result, _ = run_both(harness, src, 1, 2, 3)
    assert result == "ok|number:3|number:1|number:2|number:1|number:2|number:3"


def _wrapper() -> tuple[str, str]:
    """The text the instrumenter puts before and after the mod's source."""
    empty = instrument("", cell=CELL, poll=POLL, slow=SLOW).source
    head, newline, tail = empty.partition("\n")
    return head, newline + tail


def test_wrapper_adds_no_line() -> None:
    head, tail = _wrapper()
    assert luajit_lines(head) == 0 and luajit_lines(tail) == 1
    assert CELL in head and SLOW in head
    src = "local s = [[\r\n\n]]\nfor i = 1, 2 do\r  goto x ::x::\n end --\n\rreturn 1"
    out = instrument(src, cell=CELL, poll=POLL, slow=SLOW).source
    assert out.startswith(head) and out.endswith(tail)
    assert luajit_lines(out) == luajit_lines(src) + 1  # only the wrapper's closing line


def test_the_check_text() -> None:
    assert check_text("N", "P", "S") == " N[0]=N[0]-1 if N[0]<P[0] then S()end "
    assert check_text("N", "P", "S", 7) == " N[0]=N[0]-7 if N[0]<P[0] then S()end "
    assert "\n" not in check_text(CELL, POLL, SLOW) and "\r" not in check_text(CELL, POLL, SLOW)


# -- where the checks go --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("src", "checks"),
    [
        ("", 0),
        ("return 1", 0),
        ("while true do end", 1),
        ("for i = 1, 2 do end", 1),
        ("for k, v in pairs(t) do end", 1),
        ("repeat until true", 1),
        ("do end", 1),
        ("local function f() end", 1),
        ("local f = function(a, b) end", 1),
        ("function a.b:c(x) end", 1),
        ("::a:: goto a", 1),
        ("if x then goto a end ::a::", 1),
        ("local goto = 1 goto = goto + 1", 0),
        ("local goto = 5 local x = goto goto done ::done::", 1),
        ("goto 'x'", 0),  # a call of a function named goto
        ("goto {1}", 0),
        ("t.goto = 1 t:goto(2)", 0),
        ("local s = 'do' --[[ while true do end ]] s = [==[ repeat ]==]", 0),
        ('-- function f() end\nlocal s = "goto x"', 0),
        ("while a do for i = 1, 2 do repeat local f = function() end until b end end", 4),
    ],
)
def test_check_count(src: str, checks: int) -> None:
    assert instrument(src, cell=CELL, poll=POLL, slow=SLOW).checks == checks


@pytest.mark.parametrize(
    ("src", "steps"),
    [
        ("for i = 1, 100 do end", 100),
        ("local i = 0 while i < 100 do i = i + 1 end", 100),
        ("local i = 0 repeat i = i + 1 until i == 100", 100),
        ("local i = 0 ::top:: i = i + 1 if i < 100 then goto top end", 99),
        ("for k, v in ipairs({1, 2, 3, 4, 5}) do end", 5),
        ("local function f(n) if n > 0 then return f(n - 1) end end f(49)", 50),
        # the call that returns at a leading `if ... then return ... end` passes no check
        ("local function f(n) if n == 0 then return 0 end return f(n - 1) end f(49)", 49),
        ("local function f(n) if n == 0 then return 0 end return 1 + f(n - 1) + f(0) end\n"
         "f(49)", 49),
        ("local function f(x) return x + 1 end for i = 1, 10 do f(i) end", 20),  # call-free
        ("local t = setmetatable({}, {__index = function(t, k) return k end})\n"
         "for i = 1, 10 do local _ = t[i] end", 20),
        ("local t = {5, 4, 3} local n = 0\n"
         "table.sort(t, function(a, b) n = n + 1 return a < b end) return n", None),
        ("for i = 1, 1000000 do end", 1000000),
        ("for i = 1, 10 do for j = 1, 10 do end end", 110),
        ("local n = 0 for i = 1, 10 do if i % 2 == 0 then goto continue end n = n + 1\n"
         "::continue:: end", 15),
    ],
)  # fmt: skip
def test_each_iteration_goto_and_call_takes_one_step(harness, src: str, steps: int | None) -> None:
    for window in (HUGE_WINDOW, 1, 3, 1000):
        result, used = run_both(harness, src, window=window)
        if steps is None:  # a C function calling back: one step per call of the comparator
            assert used == int(result.split(":")[-1])
        else:
            assert used == steps


# `goto` after every token that can end a statement: LuaJIT reads each as a goto statement,
# so each must carry a check (a goto loop that the meter does not see would run forever).
# Each entry: the text before `goto top`, the text after it, and the steps of 50 rounds.
GOTO_AFTER = {
    "name": ("x = i", "", 49),
    "number": ("x = 1", "", 49),
    "string": ("x = 's'", "", 49),
    "long_string": ("x = [[s]]", "", 49),
    "close_paren": ("x = (i)", "", 49),
    "call": ("tostring(i)", "", 49),
    "close_bracket": ("x = t[1]", "", 49),
    "close_brace": ("x = {}", "", 49),
    "nil": ("x = nil", "", 49),
    "true": ("x = true", "", 49),
    "false": ("x = false", "", 49),
    "vararg": ("x = ...", "", 49),
    "end": ("x = function() end", "", 49),
    "semicolon": ("x = 1;", "", 49),
    "label": ("::inner::", "", 49),
    "then": ("if true then", " end", 49),
    "else": ("if false then else", " end", 49),
    "do": ("do", " end", 49 * 2),
    "repeat": ("repeat", " until true", 49 * 2),
    "goto_variable": ("local goto = 1 x = goto", "", 49),
    "line_break": ("x = 1\n", "", 49),
    "comment": ("x = 1 --[[ c ]]", "", 49),
}


@pytest.mark.parametrize(("before", "after", "steps"), GOTO_AFTER.values(), ids=GOTO_AFTER.keys())
def test_goto_after_every_statement_end_is_metered(
    harness, before: str, after: str, steps: int
) -> None:
    src = (
        "local t, x, i = {0}, 0, 0 ::top:: i = i + 1\n"
        f"if i < 50 then {before} goto top{after} end return i"
    )
    assert run_both(harness, src) == ("ok|number:50", steps)


def test_goto_loop_at_the_start_of_a_function_body_is_metered(harness) -> None:
    src = (
        "local i = 0 local function f() goto top ::top:: i = i + 1\n"
        "if i < 50 then goto top end end f() return i"
    )
    assert run_both(harness, src) == ("ok|number:50", 1 + 1 + 49)


def test_goto_as_the_first_statement_of_the_chunk_is_metered(harness) -> None:
    assert run_both(harness, "goto a ::a:: return 1") == ("ok|number:1", 1)


# -- line numbers ---------------------------------------------------------------------------

ERROR_LINES = {
    "plain": ("local x = 1\nlocal y = 2\nerror('boom')", 3),
    "after_long_string": ("local s = [[\n\n\n]]\nerror('boom')", 5),
    "after_long_comment": ("--[==[\n]]\n]==] error('boom')", 3),
    "crlf": ("local x = 1\r\nlocal y = 2\r\n\r\nerror('boom')", 4),
    "cr_only": ("local x = 1\rlocal y = 2\rerror('boom')", 3),
    "lfcr": ("local x = 1\n\rerror('boom')", 2),
    "after_backslash_newline": ('local s = "a\\\nb\\\r\nc"\nerror("boom")', 4),
    "after_z": ('local s = "a\\z\n\n   b"\nerror("boom")', 4),
    "in_loop": ("for i = 1, 3 do\n  if i == 2 then\n    error('boom')\n  end\nend", 3),
    "in_goto_loop": ("local i = 0\n::top::\ni = i + 1\nif i == 3 then error('boom') end\ngoto top", 4),
    "in_nested_function": (
        "local function f()\n  local function g()\n    error('boom')\n  end\n  g()\nend\nf()", 3),
    "runtime_error": ("local t = nil\n\nreturn t.x", 3),
    "arith_on_upvalue": ("local u\nlocal function f()\n  return u + 1\nend\nreturn f()", 3),
    "error_level_2": ("local function f()\n  error('boom', 2)\nend\n\nf()", 5),
    "shebang": ("#!/usr/bin/env luajit\nerror('boom')", 2),
    "shebang_crlf": ("#!/usr/bin/env luajit\r\n\r\nerror('boom')", 3),
    "shebang_cr": ("#!/usr/bin/env luajit\rerror('boom')", 2),
    "bom": ("\ufeff\nerror('boom')", 2),
    "first_line": ("error('boom')", 1),
    "after_function_header_line": ("local function f(a,\n  b)\n  error('boom')\nend\nf()", 3),
    "repeat_until": ("repeat\n  local x = 1\nuntil error('boom')", 3),
}  # fmt: skip


@pytest.mark.parametrize(("src", "line"), ERROR_LINES.values(), ids=ERROR_LINES.keys())
def test_error_lines_are_unchanged(harness, src: str, line: int) -> None:
    result, _ = run_both(harness, src)
    assert result.startswith(f"error|string:prog:{line}: "), result


# A stack overflow is raised at the first instruction of the function being entered, and
# LuaJIT reports the line of that instruction. The function-entry check is inserted right
# after the parameter list, so it becomes the first instruction and the overflow moves to the
# line of the ")" (inserting it just before the body's first token would keep the line).
STACK_OVERFLOWS = {
    "body_on_next_line": ("local function f(n)\n  return f(n + 1) + 1\nend\nreturn f(1)", 2),
    "local_first": (
        "local function f(n)\n  local x = n + 1\n  return f(x) + 1\nend\nreturn f(1)",
        2,
    ),
    "leading_return": (
        "local function f(n)\n  if n < 0 then return 0 end\n  return f(n + 1) + 1\nend\n"
        "return f(1)",
        2,
    ),
    "multiline_header": ("local function f(\n  n\n)\n\n  return 1 + f(n)\nend\nreturn f(1)", 5),
    "metamethod": (
        "local t = setmetatable({}, {__index = function(t, k)\n  return t[k + 1]\nend})\n"
        "return t[1]",
        2,
    ),
}


# Found by these tests: the entry check used to sit right after the parameter list, where
# LuaJIT then reported the overflow. It now sits on the body's first line.
@pytest.mark.parametrize(("src", "line"), STACK_OVERFLOWS.values(), ids=STACK_OVERFLOWS.keys())
def test_stack_overflow_line_is_unchanged(harness, src: str, line: int) -> None:
    assert run_raw(harness, src) == f"error|string:prog:{line}: stack overflow"
    assert run_instrumented(harness, src)[0] == f"error|string:prog:{line}: stack overflow"


def test_stack_overflow_on_the_header_line_is_unchanged(harness) -> None:
    src = "local function f(n) return f(n + 1) + 1 end\nreturn f(1)"
    assert run_both(harness, src)[0] == "error|string:prog:1: stack overflow"


def test_marker_lines_are_unchanged(harness) -> None:
    src = "M(1)\nlocal s = [[\n]] M(2)\nfor i = 1, 2 do\n  M(i)\nend\n--[[\n]]M(3)"
    result, _ = run_both(harness, src)
    assert result == "ok|marks:1,3,5,5,8"


# -- reserved names -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("src", "name", "line"),
    [
        ("__mb = 1", "__mb", 1),
        ("x = __mbx", "__mbx", 1),
        ("local a\nlocal __mb_n = 2", "__mb_n", 2),
        ("t = {}\n\nt.__mb_n = 1", "__mb_n", 3),
        ("t = {__mb_s = 1}", "__mb_s", 1),
        ("t:__mb_call()", "__mb_call", 1),
        ("local s = [[\n\n]] __mb_s()", "__mb_s", 3),
        ("--[[\n]] ::__mb::", "__mb", 2),
        ("goto __mb_label", "__mb_label", 1),
        ("function f(a, __mb)\nend", "__mb", 1),
        ("function __mb.x() end", "__mb", 1),
        ("for __mbi = 1, 2 do end", "__mbi", 1),
        ("local s = 'a\\\n' .. __mbq", "__mbq", 2),
        ("#!/bin/lua __mb\n__mb_n()", "__mb_n", 2),
    ],
)
def test_reserved_names_are_refused_with_their_line(src: str, name: str, line: int) -> None:
    with pytest.raises(ReservedNameError) as info:
        instrument(src, cell=CELL, poll=POLL, slow=SLOW)
    assert (info.value.name, info.value.line) == (name, line)
    assert str(info.value).startswith(f"line {line}: the name '{name}' is reserved")


@pytest.mark.parametrize(
    "src",
    [
        'return "__mb_n"',
        "return '__mbx' .. [[__mb]] .. [==[\n__mb_s()]==]",
        "-- __mb_n = 1\nreturn 1",
        "--[[ local __mb = 1 ]] return 1",
        'local t = {["__mb_n"] = 1} return t["__mb_n"]',
        "local _mb, __m, mb__, __MB, x__mb = 1, 2, 3, 4, 5 return x__mb",
        "#!/usr/bin/lua __mb_n\nreturn 1",
    ],
)
def test_reserved_text_inside_strings_and_comments_is_fine(harness, src: str) -> None:
    run_both(harness, src)


def test_reserved_prefix() -> None:
    assert RESERVED_PREFIX == "__mb"


def test_meter_names_must_be_reserved() -> None:
    with pytest.raises(ValueError, match="reserved prefix"):
        instrument("return 1", cell="n", poll="__mb_p", slow="__mb_s")
    with pytest.raises(ValueError, match="reserved prefix"):
        instrument("return 1", cell="__mb_n", poll="p", slow="__mb_s")
    with pytest.raises(ValueError, match="reserved prefix"):
        instrument("return 1", cell="__mb_n", poll="__mb_p", slow="slow")


def test_sandbox_refuses_a_reserved_name_as_a_syntax_error() -> None:
    with Sandbox() as sb:
        with pytest.raises(ScriptError) as info:
            sb.load("local x = 1\n-- __mb_n in a comment is fine\nlocal __mb_n = 2", "@mods/a.lua")
        assert (info.value.kind, info.value.line, info.value.chunk) == ("syntax", 3, "@mods/a.lua")
        assert "__mb_n" in info.value.message
        assert sb.run("return '__mb_n'").value == "__mb_n"


def test_non_utf8_identifier_bytes(harness) -> None:
    # LuaJIT reads every byte from 0x80 up as part of a name, as the tokenizer does.
    src = b"local \xff\xfe = 7 for i = 1, 2 do \xff\xfe = \xff\xfe + i end return \xff\xfe"
    text = src.decode("utf-8", "surrogateescape")
    result, steps = run_both(harness, text)
    assert (result, steps) == ("ok|number:10", 2)
    with Sandbox() as sb:
        assert sb.run(src).value == 10


# -- LuaJIT's compiler limits ---------------------------------------------------------------
#
# The wrapper adds a function level and every check is one more block and a reference to three
# upvalues, so a mod right at one of LuaJIT's compile-time limits can exceed it once
# instrumented (docs/metering.md). Below the limit nothing changes; at it, the sandbox refuses
# the mod with a syntax error that names the cause, never a HostError.


def _upvalues(count: int) -> str:
    names = [f"u{i}" for i in range(count)]
    # f calls something: its checks name the cell, the poll flag and the slow path (a
    # function that calls nothing names the cell alone, see below)
    return (f"local {', '.join(names)}\n"
            f"local function f() return tostring({' + '.join(names)}) end\nreturn 1")


def _nested_blocks(depth: int) -> str:
    return "do " * depth + "end " * depth + "return 1"


def _long_loop_body(blocks: int) -> str:
    return "local x = 0 while x < 1 do x = x + 1 " + "do x = x + 1 end " * blocks + "end return x"


def _compiles(harness, src: str) -> tuple[bool, bool]:
    raw = run_raw(harness, src)
    inst, _ = run_instrumented(harness, src)
    return not raw.startswith("syntax|"), not inst.startswith("syntax|")


@pytest.mark.parametrize(
    "src",
    [_upvalues(57), _nested_blocks(150), _long_loop_body(2000)],
    ids=["57_upvalues", "150_nested_blocks", "2000_checks_in_a_loop"],
)
def test_below_luajits_limits_instrumented_code_compiles(harness, src: str) -> None:
    assert _compiles(harness, src) == (True, True)


AT_THE_LIMIT = {
    "58_upvalues": (_upvalues(58), 2),  # 58 + the cell, the poll flag, the slow path > 60
    "195_nested_blocks": (_nested_blocks(195), 1),  # over 200 syntax levels
    "8000_checks_in_a_loop": (_long_loop_body(8000), 1),  # the backward jump is too long
}


@pytest.mark.parametrize(("src", "line"), AT_THE_LIMIT.values(), ids=AT_THE_LIMIT.keys())
def test_at_luajits_limits_the_sandbox_refuses_with_a_syntax_error(
    harness, src: str, line: int
) -> None:
    assert _compiles(harness, src) == (True, False)  # the original is fine, the wrapped not
    with Sandbox() as sb:
        out = sb.run(src, "@mods/big.lua")
    assert out.status == "error"
    assert isinstance(out.error, ScriptError) and not isinstance(out.error, HostError)
    assert (out.error.kind, out.error.line) == ("syntax", line)
    assert "once instrumented" in out.error.message


# -- properties -----------------------------------------------------------------------------


def _iters(result: str) -> int:
    # "ok|number:<acc>|number:<iters>"
    return int(float(result.split("|")[2].split(":")[1]))


@settings(PROPERTY, max_examples=300)
@given(program=programs(), window=st.sampled_from((HUGE_WINDOW, 1, 2, 7, 1000)))
def test_instrumented_program_returns_what_the_original_returns(
    harness, program: Program, window: float
) -> None:
    raw = run_raw(harness, program.source)
    assert not raw.startswith("syntax|"), raw  # the generator makes valid programs
    inst, steps = run_instrumented(harness, program.source, window=window)
    assert inst == raw
    if program.ends_in_error:
        assert raw.startswith("error|string:prog:")
    else:
        assert raw.startswith("ok|number:")
        # Every loop iteration, backward goto and function entry passed a check.
        assert steps >= _iters(raw)


@settings(PROPERTY, max_examples=150)
@given(program=programs())
def test_instrumentation_only_inserts_checks(program: Program) -> None:
    """Token for token, the instrumented text is the original plus checks, on the same lines."""
    inst = instrument(program.source, cell=CELL, poll=POLL, slow=SLOW)
    src = program.source.removeprefix("\ufeff")
    original = [(t.kind, t.text, t.line) for t in tokenize(src)]
    # A full check, and the entry of a function that calls nothing (its charge alone).
    forms = [[(t.kind, t.text) for t in tokenize(check_text(CELL, POLL, SLOW, w))]
             for w in (1, -1)]
    weight_at = forms[0].index((TokenKind.OP, "-")) + 1  # the check's weight: any positive int

    def check_length(out: list, i: int) -> int:
        for check in forms:
            got = [(t.kind, t.text) for t in out[i : i + len(check)]]
            if len(got) == len(check) and got[weight_at][1].isdigit():
                got[weight_at] = check[weight_at]
                if got == check:
                    return len(check)
        return 0

    head, tail = _wrapper()
    out = tokenize(inst.source)[len(tokenize(head)) : -len(tokenize(tail))]
    kept, found, i = [], 0, 0
    while i < len(out):
        length = check_length(out, i)
        if length:
            found += 1
            i += length
            continue
        kept.append((out[i].kind, out[i].text, out[i].line))
        i += 1
    assert kept == original
    assert found == inst.checks


# -- a check at every statement start ---------------------------------------------------------
#
# Long blocks get checks at statement starts, which the planner tells from the middle of an
# expression by itself. With a segment of one token and a step of one token, every statement
# start it finds gets a check: a start it got wrong would change what a program does.


@contextmanager
def checks_at_every_statement_start() -> Iterator[None]:
    saved = _instrument.SEGMENT_TOKENS, _instrument.TOKENS_PER_STEP
    _instrument.SEGMENT_TOKENS = _instrument.TOKENS_PER_STEP = 1
    _plans.clear()
    try:
        yield
    finally:
        _instrument.SEGMENT_TOKENS, _instrument.TOKENS_PER_STEP = saved
        _plans.clear()


@pytest.mark.parametrize(("src", "expected"), CONSTRUCTS.values(), ids=CONSTRUCTS.keys())
def test_checks_at_every_statement_start_change_nothing(harness, src: str, expected: str) -> None:
    with checks_at_every_statement_start():
        result, _ = run_both(harness, src)
    assert result == expected


@pytest.mark.parametrize(
    ("src", "checks"),
    [
        ("x = 1 y = 2 z = 3", 3),
        ("x = 1; y = 2; z = f(a, b) (g)()", 3),  # `(g)` calls what `f(a, b)` returned
        ("local a local b = c (d)() e()", 3),  # `c (d)()` is a call
        ("local a (d)() e()", 3),  # after a local's names, `(` starts a statement
        ("x = 1 (d)() y = 's' (d)() z = {} (d)()", 6),  # and after a literal
        ("x = {a = 1; b = function() end}", 2),  # and the function's entry
        ("return (f)(x)", 1),
        ("repeat until x y = 1", 3),  # and the loop's own
        ("::a:: x = 1 goto a", 2),  # none before a label; the goto's joins the statement's
    ],
)
def test_the_statement_starts_found(src: str, checks: int) -> None:
    with checks_at_every_statement_start():
        assert len(_weights(src)) == checks


@settings(PROPERTY, max_examples=200)
@given(program=programs())
def test_programs_with_a_check_at_every_statement_start_run_as_before(
    harness, program: Program
) -> None:
    raw = run_raw(harness, program.source)
    with checks_at_every_statement_start():
        inst, _ = run_instrumented(harness, program.source)
    assert inst == raw


@settings(PROPERTY, max_examples=100)
@given(soup=marker_soups())
def test_marker_soups_report_the_same_lines(harness, soup: Soup) -> None:
    raw, _ = run_both(harness, soup.source)
    assert raw.startswith("error|string:prog:")


@pytest.fixture(scope="module")
def big_sandbox():
    with Sandbox(Budget(steps=10**12, wall_s=30)) as sb:
        yield sb


@settings(PROPERTY, max_examples=80)
@given(program=programs())
def test_sandbox_runs_programs_like_raw_luajit(harness, big_sandbox, program: Program) -> None:
    raw = run_raw(harness, program.source)
    out = big_sandbox.run(program.source, "=prog")
    if raw.startswith("ok|"):
        assert out.status == "done", out.error
        expected = [float(part.split(":", 1)[1]) for part in raw.split("|")[1:]]
        assert [float(v) for v in out.values] == expected
        assert out.stats.steps >= _iters(raw)
    else:
        assert out.status == "error"
        match = re.fullmatch(r"error\|string:prog:(\d+): (.*)", raw, re.DOTALL)
        assert match, raw
        assert (out.error.chunk, out.error.line, out.error.message) == (
            "=prog", int(match.group(1)), match.group(2),
        )  # fmt: skip


def _weights(src: str) -> list[int]:
    """The weight of each check, full checks and call-free entries alike."""
    source = instrument(src, cell=CELL, poll=POLL, slow=SLOW).source
    return [int(w) for w in re.findall(r"\[0\]-(\d+) ", source)]


def _entries(src: str) -> list[str]:
    """Each check in order: "full", or "charge" for the entry of a function that calls
    nothing."""
    source = instrument(src, cell=CELL, poll=POLL, slow=SLOW).source
    return ["full" if m.group(1) else "charge"
            for m in re.finditer(r"\[0\]-\d+ (if)?", source)]


def _placed(src: str) -> str:
    """The source with each full check shown as @, each call-free entry as ~."""
    source = instrument(src, cell=CELL, poll=POLL, slow=SLOW).source
    source = re.sub(r" \S+\[0\]=\S+\[0\]-\d+ if \S+\[0\]<\S+\[0\] then \S+\(\)end ", "@",
                    source)
    source = re.sub(r" \S+\[0\]=\S+\[0\]-\d+ ", "~", source)
    return source.split("...) ", 1)[1].rsplit("\nend", 1)[0]


@pytest.mark.parametrize(
    ("src", "placed"),
    [
        # one statement that calls: after it
        ("for i = 1, 3 do f(i) end", "for i = 1, 3 do f(i) @end"),
        ("while x do x = g(x) end", "while x do x = g(x) @end"),
        ("for i = 1, 3 do if p(i) then break end end", "for i = 1, 3 do if p(i) then break end @end"),
        # anything else: after `do`
        ("for i = 1, 3 do x = i end", "for i = 1, 3 do@ x = i end"),
        ("for i = 1, 3 do f(i) g(i) end", "for i = 1, 3 do@ f(i) g(i) end"),
        ("while f() do x = 1 end", "while f() do@ x = 1 end"),  # the condition's call
        ("for i = 1, 3 do return f(i) end", "for i = 1, 3 do@ return f(i) end"),
        ("for i = 1, 3 do for j = 1, 3 do f(j) end end",
         "for i = 1, 3 do@ for j = 1, 3 do f(j) @end end"),
        ("for i = 1, 3 do local h = function() g() end end",
         "for i = 1, 3 do@ local h = function() @g() end end"),
        ("for i = 1, 3 do if f(i) then goto c end ::c:: end",
         "for i = 1, 3 do@ if f(i) then @goto c end ::c:: end"),
        ("repeat f() until x", "repeat@ f() until x"),
    ],
)  # fmt: skip
def test_where_a_loop_check_goes(src: str, placed: str) -> None:
    assert _placed(src) == placed


@pytest.mark.parametrize(
    ("src", "kinds"),
    [
        ("local function f(x) return x * 2 end", ["charge"]),
        ("local function f(x) return g(x) end", ["full"]),
        ("local function f(x) return x:m() end", ["full"]),  # a method call
        ('local function f() return g "s" end', ["full"]),  # a call with a string
        ("local function f() return g {} end", ["full"]),  # a call with a table
        ("local function f() return (g)() end", ["full"]),
        ("local function f(t) return t[1], {t}, (t) end", ["charge"]),  # no call at all
        # loops keep their own checks; the function around them calls nothing
        ("local function f(t) for i = 1, 3 do t[i] = i end end", ["charge", "full"]),
        ("local function f() ::a:: goto a end", ["charge", "full"]),
        # a nested function's calls are its own
        ("local function f() return function() g() end end", ["charge", "full"]),
        ("local function f() g() return function() end end", ["full", "charge"]),
        ("local function f() local h = function() end h() end", ["full", "charge"]),
    ],
)
def test_only_a_function_that_calls_nothing_enters_without_a_test(src: str, kinds: list[str]) -> None:
    assert _entries(src) == kinds


@pytest.mark.parametrize(
    ("src", "placed"),
    [
        # a leading `if ... then return ... end` that calls nothing: the check after it
        ("local function f(n) if n < 2 then return n end return f(n - 1) end",
         "local function f(n) if n < 2 then return n end@ return f(n - 1) end"),
        ("local function f(n) if n < 2 then return end return f(n - 1) end",
         "local function f(n) if n < 2 then return end@ return f(n - 1) end"),
        ("local function f(n) if n < 2 then return n; end return f(n - 1) end",
         "local function f(n) if n < 2 then return n; end@ return f(n - 1) end"),
        ("local function f(t) if t.n then return {t[1]}, (t) end return f(t) end",
         "local function f(t) if t.n then return {t[1]}, (t) end@ return f(t) end"),
        ("local function f(m, n) if m == 0 then return n end if n == 0 then return m end "
         "return f(m - 1, n) end",
         "local function f(m, n) if m == 0 then return n end if n == 0 then return m end@ "
         "return f(m - 1, n) end"),
        # one that calls, makes a function, has another branch or more statements: before it
        ("local function f(m, n) if m == 0 then return n end if n == 0 then return f(m) end "
         "return f(m - 1, n) end",
         "local function f(m, n) if m == 0 then return n end@ if n == 0 then return f(m) end "
         "return f(m - 1, n) end"),
        ("local function f(n) if g(n) then return n end return f(n) end",
         "local function f(n) @if g(n) then return n end return f(n) end"),
        ("local function f(n) if n then return g 's' end return f(n) end",
         "local function f(n) @if n then return g 's' end return f(n) end"),
        ("local function f(n) if n then return function() end end return f(n) end",
         "local function f(n) @if n then return function() ~end end return f(n) end"),
        ("local function f(n) if n then return 1 else return 2 end return f(n) end",
         "local function f(n) @if n then return 1 else return 2 end return f(n) end"),
        ("local function f(n) if n then return 1 elseif n then return 2 end return f(n) end",
         "local function f(n) @if n then return 1 elseif n then return 2 end return f(n) end"),
        ("local function f(n) if n then x = 1 return 1 end return f(n) end",
         "local function f(n) @if n then x = 1 return 1 end return f(n) end"),
        ("local function f(n) if n then if n then return 1 end end return f(n) end",
         "local function f(n) @if n then if n then return 1 end end return f(n) end"),
        ("local function f(n) if n then goto e end return f(n) ::e:: end",
         "local function f(n) @if n then @goto e end return f(n) ::e:: end"),
        ("local function f(n) local m = n if m then return m end return f(m) end",
         "local function f(n) @local m = n if m then return m end return f(m) end"),
        ("local function f(n) if n then return n end g() end",
         "local function f(n) if n then return n end@ g() end"),
        # a function that calls nothing: its charge stays at its entry
        ("local function f(n) if n then return n end return -n end",
         "local function f(n) ~if n then return n end return -n end"),
    ],
)  # fmt: skip
def test_where_an_entry_check_goes(src: str, placed: str) -> None:
    assert _placed(src) == placed


def test_a_long_leading_return_keeps_the_check_before_it() -> None:
    """The code before an entry's check is at most TOKENS_PER_STEP tokens: a call that
    returns there is a bounded part of its caller's step."""
    def src(terms: int) -> str:
        value = " + ".join(["n"] * terms)
        return f"local function f(n) if n then return {value} end return f(n) end"

    fits = (TOKENS_PER_STEP - 6) // 2  # `if n then return` and `end` are 5 tokens, `n +` 2
    assert _placed(src(fits)).startswith("local function f(n) if")
    assert _placed(src(fits + 2)).startswith("local function f(n) @if")


def test_a_check_charges_the_weight_of_its_straight_line_body() -> None:
    """A big loop-free body costs more than one step, spread over checks at most a segment
    apart; an ordinary one costs exactly one."""
    big = "local x = 0\n" + "x = x + 1\n" * 200
    src = f"local function f()\n{big}return x\nend\nreturn f() + (function() return 1 end)()"
    *in_f, anonymous = _weights(src)
    body = 4 + 5 * 200 + 2 + 1  # `local x = 0`, 200 x `x = x + 1`, `return x`, `end`
    assert anonymous == 1
    assert len(in_f) >= body // SEGMENT_TOKENS
    assert max(in_f) <= 1 + (SEGMENT_TOKENS + 5) // TOKENS_PER_STEP  # a segment and a statement
    # Together, one step per TOKENS_PER_STEP tokens (each check rounds down) and the entry.
    assert 1 + body // TOKENS_PER_STEP - len(in_f) < sum(in_f) <= 1 + body // TOKENS_PER_STEP


def test_nested_bodies_are_weighed_apart() -> None:
    loop_body = "y = y + 1 " * 40
    src = f"local y = 0 for i = 1, 3 do {loop_body} end return y"
    assert _weights(src) == [1 + (5 * 40 + 1) // TOKENS_PER_STEP]  # the loop body alone


# -- the plan cache -------------------------------------------------------------------------
# Where the checks go is kept per source; each sandbox names the meter its own way.


def _fresh(src: str, cell: str, poll: str, slow: str) -> str:
    _plans.clear()
    try:
        return instrument(src, cell=cell, poll=poll, slow=slow).source
    finally:
        _plans.clear()


@settings(PROPERTY, max_examples=60)
@given(program=programs(), suffix=st.text("0123456789abcdef", min_size=1, max_size=12))
def test_a_cached_plan_instruments_as_a_fresh_one(program: Program, suffix: str) -> None:
    cell, poll, slow = f"__mb_n{suffix}", f"__mb_p{suffix}", f"__mb_s{suffix}"
    first = instrument(program.source, cell=CELL, poll=POLL, slow=SLOW)  # planned, or from the cache
    instrument(program.source, cell=CELL, poll=POLL, slow=SLOW)  # seen twice: kept
    assert program.source in _plans or _PlanCache.bytes_of(program.source, _plan_of(
        program.source)) > PLAN_CACHE_MAX_BYTES // 4
    again = instrument(program.source, cell=cell, poll=poll, slow=slow)  # from the cache
    assert again.source == _fresh(program.source, cell, poll, slow)
    assert first.source == _fresh(program.source, CELL, POLL, SLOW)
    assert again.checks == first.checks


def test_a_source_that_fails_is_refused_every_time() -> None:
    src = f"local {RESERVED_PREFIX}x = 1 for i = 1, 3 do end"
    for _ in range(2):
        with pytest.raises(ReservedNameError):
            instrument(src, cell=CELL, poll=POLL, slow=SLOW)


def test_a_source_seen_once_is_not_kept() -> None:
    cache = _PlanCache(max_bytes=1 << 20)
    for i in range(100):  # one-off texts (a package's modules under a one-off name)
        cache.plan(f"local v = {i} for i = 1, 3 do end")
    assert len(cache) == 0
    src = "for i = 1, 3 do end return 1"
    first = cache.plan(src)
    assert src not in cache
    assert cache.plan(src) == first and src in cache  # the second sight keeps it
    assert cache.plan(src) is cache.plan(src)


def test_the_cache_is_bounded_in_bytes_and_entries() -> None:
    cache = _PlanCache(max_bytes=400_000, max_entries=50)
    loops = "do end " * 2_000  # 14k characters, 2,000 checks: ~46k bytes kept each
    top_level = 2_000 // SEGMENT_TOKENS + 1  # and the checks of the chunk's top level
    for i in range(30):  # a mod loading many large distinct sources, each twice
        for _ in range(2):
            assert len(cache.plan(f"local v = {i} {loops}")[1]) == 2_000 + top_level
        assert cache.bytes <= 400_000
    assert 1 <= len(cache) <= 8
    huge = "do end " * 10_000  # past a quarter of the room: planned, never kept
    for _ in range(2):
        assert len(cache.plan(huge)[1]) >= 10_000
    assert huge not in cache
    for i in range(200):  # many small ones: the entry cap holds
        for _ in range(2):
            cache.plan(f"return {i}")
    assert len(cache) == 50


def test_what_the_cache_holds_is_what_it_counts() -> None:
    """Memory measured, not estimated: tiny distinct sources, each seen twice, cannot make
    the cache hold more than its bound (each entry's own objects are counted)."""
    import tracemalloc

    cache = _PlanCache(max_bytes=1 << 20, max_entries=100_000)
    sources = [f"x={n}" for n in range(20_000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for src in sources:
            cache.plan(src)
            cache.plan(src)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert cache.bytes <= 1 << 20
    assert held <= 1.25 * (1 << 20) + 600_000  # + the seen-once hashes (4,096 at most)
