"""moonbox/sandbox/patterns.lua matches exactly as LuaJIT's native string functions do.

patterns.lua re-implements string.find/match/gmatch/gsub in Lua so that backtracking is
metered: it calls an injected ``charge(n)`` as it works. Each test loads it into a fresh raw
LuaJIT runtime with a counting ``charge`` and uses the native functions of the same runtime
as the oracle: same results, or the same error message (position prefix stripped where the
test says so). The metering tests check that the charges follow the work and that a
``charge`` that raises stops a catastrophic pattern.
"""

from __future__ import annotations

import importlib.resources
import re
import time

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from lupa import luajit21

PROPERTY = settings(
    max_examples=500,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

# Units after which the property tests' charge trips: far above what a fair example needs,
# low enough that a pathological generated pattern is rejected instead of running long.
PROPERTY_CHARGE_LIMIT = 300_000


def patterns_source() -> str:
    return importlib.resources.files("moonbox.sandbox").joinpath("patterns.lua").read_text()


# The harness: builds the metered library with a counting charge and compares calls.
# `meter.limit` makes charge raise TRIP (a table) once `meter.used` goes past it.
HARNESS = r"""
local source = ...
local TRIP = setmetatable({}, {__tostring = function() return "TRIP" end})
local meter = {used = 0, limit = math.huge}
local function charge(n)
  local used = meter.used + n
  meter.used = used
  if used > meter.limit then error(TRIP, 0) end
end
local ours = assert(loadstring(source, "=patterns.lua"))()(charge)
local native = {find = string.find, match = string.match, gmatch = string.gmatch,
                gsub = string.gsub}

local function show(v)
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) == "number" then return string.format("%.17g", v) end
  return tostring(v)
end

local function describe(ok, ...)
  if not ok then
    local e = ...
    if e == TRIP then return "TRIP" end
    return "error: " .. (tostring(e):gsub("^[^:\n]*:%d+: ", ""))
  end
  local out = {}
  for i = 1, select("#", ...) do out[i] = show((select(i, ...))) end
  return "(" .. table.concat(out, ", ") .. ")"
end

local replacements = {
  function() return nil end,
  function(a) return "<" .. tostring(a) .. ">" end,
  function(...) return select("#", ...) end,
  function(a, b) if b ~= nil then return false end return a .. "!" end,
  function() return {} end,
  {a = "A", b = false, [1] = "one", aa = 7, ["("] = true},
  setmetatable({}, {__index = function(_, k) return type(k) == "string" and #k or nil end}),
}

-- Calls lib[name] with the arguments and describes what happened; gmatch is drained.
local function outcome(lib, name, n, ...)
  meter.used = 0
  local args = {...}
  if name == "gsub" and type(args[3]) == "number" and args[3] < 0 then
    args[3] = replacements[-args[3]]
  end
  if name ~= "gmatch" then
    return describe(pcall(lib[name], unpack(args, 1, n)))
  end
  local ok, iter = pcall(lib.gmatch, unpack(args, 1, n))
  if not ok then return describe(false, iter) end
  local out = {}
  for _ = 1, 100 do
    local r = {pcall(iter)}
    out[#out + 1] = describe(unpack(r, 1, table.maxn(r)))
    if not r[1] or r[2] == nil then break end
  end
  return table.concat(out, " ")
end

local function compare(name, n, ...)
  meter.limit = math.huge
  local expected = outcome(native, name, n, ...)
  meter.limit = LIMIT
  local got = outcome(ours, name, n, ...)
  meter.limit = math.huge
  return expected, got
end

return {ours = ours, native = native, meter = meter, TRIP = TRIP, compare = compare}
""".replace("LIMIT", str(PROPERTY_CHARGE_LIMIT))


class Harness:
    """A raw runtime holding native string functions and the metered ones side by side."""

    def __init__(self) -> None:
        self.rt = luajit21.LuaRuntime()
        self.env = self.rt.execute(HARNESS, patterns_source())
        self.ours = self.env.ours
        self.native = self.env.native
        self.meter = self.env.meter

    def compare(self, name: str, *args: object) -> tuple[str, str]:
        """(native outcome, our outcome); a tripped charge rejects the example."""
        expected, got = self.env.compare(name, len(args), *args)
        if got == "TRIP":
            reject()
        return expected, got

    def run(self, code: str, *args: object) -> object:
        """Runs a chunk named '=case' as `local native, ours, meter = ...` plus args."""
        fn = self.rt.execute(
            "return function(code, ...) return assert(loadstring(code, '=case'))(...) end"
        )
        return fn(code, self.native, self.ours, self.meter, *args)


@pytest.fixture(scope="module")
def lua() -> Harness:
    return Harness()


# --- generated patterns --------------------------------------------------------------------

SUBJECT_CHARS = list("aaaabbbc  ()[]x1-.%^$\0")
subjects = st.lists(st.sampled_from(SUBJECT_CHARS), max_size=40).map("".join)

LITERALS = ["a", "b", "c", " ", "x", "1"]
ESCAPED = ["%" + c for c in "().%-][^$*+?"]
CLASSES = ["%" + c for c in "acdglpsuwxzACDGLPSUWXZ"] + ["%y", "%B"]
SET_PARTS = ["a", "b", "a-", "a-c", "x-z", "%d", "%s", "%a", "%W", "]", "-", "^", "%]", "%%", ".", "("]  # fmt: skip
sets = st.builds(
    lambda neg, parts: "[" + ("^" if neg else "") + "".join(parts) + "]",
    st.booleans(),
    st.lists(st.sampled_from(SET_PARTS), min_size=1, max_size=3),
)
singles = st.one_of(
    st.sampled_from(LITERALS), st.sampled_from(ESCAPED), st.sampled_from(CLASSES),
    st.just("."), sets,
)  # fmt: skip
quantified = st.builds(
    lambda item, q: item + q, singles, st.sampled_from(["", "", "", "*", "+", "-", "?"])
)
groups = st.lists(quantified, min_size=1, max_size=3).map(lambda items: "(" + "".join(items) + ")")
SPECIALS = ["()", "%b()", "%bab", "%baa", "%f[%w]", "%f[^a]", "%f[%z]", "%f[a-c]", "%1", "%2", "%3"]
MALFORMED = [
    "(", ")", "%", "[", "[a", "[^", "[]", "[%", "%b", "%ba", "%f", "%fa", "%f[a",
    "%0", "%9", "\0", "$", "^",
]  # fmt: skip
tokens = st.one_of(
    quantified, quantified, quantified, groups,
    st.sampled_from(SPECIALS), st.sampled_from(MALFORMED),
)  # fmt: skip
patterns = st.builds(
    lambda anchor, body, dollar: ("^" if anchor else "") + "".join(body) + ("$" if dollar else ""),
    st.booleans(),
    st.lists(tokens, max_size=6),
    st.booleans(),
)
inits = st.one_of(st.none(), st.integers(-45, 45))
REPL_PIECES = ["x", "-", "%0", "%1", "%2", "%%", "%x", "<%1>", "%9", "%"]
repl_strings = st.lists(st.sampled_from(REPL_PIECES), max_size=3).map("".join)
limits = st.one_of(st.none(), st.integers(-2, 5))


@PROPERTY
@given(subject=subjects, pattern=patterns, init=inits, plain=st.booleans())
def test_find_matches_native(lua: Harness, subject: str, pattern: str, init, plain) -> None:
    expected, got = lua.compare("find", subject, pattern, init, plain or None)
    assert got == expected


@PROPERTY
@given(subject=subjects, pattern=patterns, init=inits)
def test_match_matches_native(lua: Harness, subject: str, pattern: str, init) -> None:
    expected, got = lua.compare("match", subject, pattern, init)
    assert got == expected


@PROPERTY
@given(subject=subjects, pattern=patterns)
def test_gmatch_matches_native(lua: Harness, subject: str, pattern: str) -> None:
    expected, got = lua.compare("gmatch", subject, pattern)
    assert got == expected


@PROPERTY
@given(subject=subjects, pattern=patterns, repl=repl_strings, n=limits)
def test_gsub_string_replacement_matches_native(lua: Harness, subject, pattern, repl, n) -> None:
    expected, got = lua.compare("gsub", subject, pattern, repl, n)
    assert got == expected


@settings(PROPERTY, max_examples=300)
@given(subject=subjects, pattern=patterns, which=st.integers(1, 7), n=limits)
def test_gsub_function_and_table_replacement_matches_native(
    lua: Harness, subject, pattern, which, n
) -> None:
    expected, got = lua.compare("gsub", subject, pattern, -which, n)  # -k: replacements[k]
    assert got == expected


# --- example-based edge cases --------------------------------------------------------------

EDGE_CASES = [
    # init: negative, zero, past the end, floats (truncated), huge, NaN, numeric strings
    'find("abc", "", 10)', 'find("abc", "", 4)', 'find("abc", "", -10)', 'find("abc", "c", 0)',
    'find("abcdef", ".", 2.7)', 'find("abcdef", ".", -2.7)', 'find("abcdef", ".", -0.5)',
    'find("abcdef", ".", 1e20)', 'find("abcdef", ".", -1e20)', 'find("abcdef", ".", 0/0)',
    'find("abcdef", ".", 2^31)', 'find("abcdef", ".", 2^31 - 1)', 'find("abcdef", ".", 2^32 + 3)',
    'find("abcdef", ".", "0x3")', 'find("abcdef", ".", " 3 ")', 'find("abcdef", ".", "4294967298")',
    'match("abc", "()", 10)', 'match("abc", "^()", -1)', 'find("abc", "b", 4)',
    # plain find and the magic-character test
    'find("a.b", ".", 1, true)', 'find("a(a", "(", 1, 0)', 'find("abc", "b", 1, "")',
    'find("a+b", "+")', 'find("a+b", "a+")', 'find("abc", "[", 1, true)', 'find("abc", "", 2, true)',
    'find("aab", "ab", 1, true)', 'find("ab", "abc", 1, true)',
    # numbers for strings
    'find(12345, 3)', 'gsub(1.5, "%.", 0)', 'gsub("x", "x", 1e15)', 'gsub("x", "x", 0.1)',
    # NUL bytes: the pattern ends at the first one, except in a plain find
    'find("a\\0b", "a\\0c")', 'find("a\\0b", "\\0b.?")', 'find("a\\0b", "a\\0.")',
    'find("a\\0b", "%z")', 'find("a\\0b", "[%z]")',
    'gsub("a", "a", "x%\\0y")', 'gsub("a", "a", "x\\0y")',
    # classes and sets
    'find("a%gb", "%g")', 'find(" ", "%G")', 'find("\\127", "%g")', 'find("\\200", "%W")',
    'find("y", "%y")', 'find("]", "[]]")', 'find("]", "[^]]")', 'find("-", "[a-]")',
    'find("-", "[a-c-e]")', 'find("-", "[%a-z]")', 'find("c", "[c-a]")', 'find("^", "[^^]")',
    # anchors and '$'
    'find("a", "^")', 'find("", "$")', 'find("a$b", "a$b")', 'find("a$", "$$")',
    'find("ab", "^^")', 'find("^ab", "^^")', 'find("x^", "x^")',
    # captures, position captures, back-references
    'find("abc", "()()()")', 'match("abc", "()a()")', 'match("abab", "((a)b)%1")',
    'find("aa", "()%1")', 'find("a", "(a)(b")',
    'find("a", ("()"):rep(32))',
    # %b and %f
    'match("x(a(b)c)y", "%b()")', 'find("(a(b)", "%b()")', 'find("aaa", "%baa")',
    'find("a", "%f[%z]")', 'find("", "%f[%z]")', 'find("THE (quick) fox", "%f[%a]%a+%f[%A]")',
    # gmatch: '^' is a literal, empty matches move on by one
    'gmatch("^a^a", "^a")', 'gmatch("baaac", "a*")', 'gmatch("abc", "")', 'gmatch("", "x*")',
    'gmatch("k=v, a=b", "(%w+)=(%w+)")', 'gmatch("abc", "()")',
    # gsub: empty matches, anchors, replacement escapes, values, n
    'gsub("abc", "b*", "-")', 'gsub("abc", "^", "-")', 'gsub("abc", "$", "-")',
    'gsub("abc", "^b*", "-")', 'gsub("a", "a", "%1")', 'gsub("a", "a", "%x")', 'gsub("a", "a", "x%")',
    'gsub("a", "()", "%1")', 'gsub("a", "()", {})', 'gsub("x1", "()", {[1] = "num"})',
    'gsub("a", "(a", "x")', 'gsub("a", "(a", "%0")', 'gsub("a", "a(", "%0")',
    'gsub("x", "x", setmetatable({}, {__index = function(t, k) return k .. k end}))',
    'gsub("x", "x", function() return 1e300 end)', 'gsub("x", "x", function() return -0 end)',
    'gsub("x", "x", function() return "a", "b" end)', 'gsub("x", "x", function() return false end)',
    'gsub("abc", "b", "x", -1)', 'gsub("abc", "b", "x", 0)', 'gsub("abcdef", ".", "x", 2.7)',
    'gsub("abcdef", ".", "x", 2^32 + 2)', 'gsub("abcdef", ".", "x", 2^32 + 2^31 + 1)',
    'gsub("abcdef", ".", "x", -2^32 + 3)', 'gsub("abcdef", ".", "x", 1e20)',
    'gsub("abcdef", ".", "x", 0/0)', 'gsub("abcdef", ".", "x", 1/0)', 'gsub("abcdef", ".", "x", "2")',
    'gsub("abcdef", ".", "x", -2^63 + 7 * 2^10)',
    # depth: native gives up past 200 nested matcher calls
    'find("a", ("x*"):rep(199))',
    'find("a", ("x*"):rep(198) .. "()")',
    'find("a", "(" .. ("x*"):rep(197) .. ")")',
    'find("aaaa", "a-" .. ("x*"):rep(150) .. "y")', 'find("aaaaaaaaaa", ("a?"):rep(300))',
    'match(("a"):rep(100000), "(.-)$")', 'gsub(("ab"):rep(5000), "%w", "%0%0")',
]  # fmt: skip

# Every error message, called from a chunk line so the position prefix can be compared too.
ERROR_CASES = [
    'find("a\\0b", "a(\\0)")', 'find("a", "%")', 'find("a", "a%")', 'find("a\\0b", "%\\0")', 'find("a", "[a")',
    'find("a", "[]")', 'find("a", "[a%")', 'find("a\\0b", "[\\0]")', 'find("a", "%f[a")',
    'find("a", "(a")', 'match("a", "(a")', 'find("ab", "(a)(b")', 'match("a", "a)")',
    'match("a", ")")', 'find("a", "%1")', 'find("a", "(a)%2")', 'find("a", "(a%1)")',
    'find("aa", "(a)%0")', 'find("a", "%b")', 'find("a", "%ba")', 'find("a", "%f")',
    'find("a", "%fa")', 'find("a", ("()"):rep(33))', 'find("a", ("x*"):rep(300))',
    'find(("a"):rep(300), ("a?"):rep(300) .. "b")',
    'find("a", ("x*"):rep(200))', 'find("a", ("x*"):rep(199) .. "a?")', 'find("a", ("x*"):rep(199) .. "()")', 'find(("a"):rep(300), ("a?"):rep(250))',
    'gsub("a", "a", "%2")', 'gsub("a", "(a)", "%2")', 'gsub("a", "(a", "%1")',
    'gsub("a", "(a", {})', 'gsub("a", "(a", function() end)', 'gsub("a", "a", {a = true})',
    'gsub("a", "a", function() return {} end)', 'gsub("a", "a", function() return print end)',
    'find(nil, "a")', 'find("a", nil)', 'find("a")', 'find()', 'find("a", {})',
    'find("abc", "b", "x")', 'find("abc", "b", {})', 'find("abc", "b", true)', 'find("abc", "b", "")',
    'match("abc")', 'match(true, "a")', 'gmatch(nil, "a")', 'gmatch("abc")',
    'gsub("abc", "b")', 'gsub("abc", "b", true)', 'gsub("abc", "b", "x", "y")',
    'gsub("a", "a", true, "y")', 'gsub(nil, nil, true, "y")', 'gsub("a", {}, true)',
    'gsub("abcdef", ".", "x", false)', 'gmatch("a", "(")', 'gmatch("ab", "%f")',
]  # fmt: skip


@pytest.mark.parametrize("call", EDGE_CASES)
def test_edge_case_matches_native(lua: Harness, call: str) -> None:
    name, args = call.split("(", 1)
    code = f"local lib = ... return {{lib.{name}({args}}}"
    run = lua.rt.execute(
        "return function(code, lib, name) "
        "  if name == 'gmatch' then "
        "    local out, it = {}, assert(loadstring(code))(lib)[1] "
        "    for _ = 1, 200 do local r = {it()} if r[1] == nil then out[#out + 1] = select('#', it()) break end "
        "      for i = 1, table.maxn(r) do out[#out + 1] = tostring(r[i]) end out[#out + 1] = '|' end "
        "    return table.concat(out, ',') "
        "  end "
        "  local r = assert(loadstring(code))(lib) local out = {} "
        "  for i = 1, table.maxn(r) do out[i] = string.format('%q', tostring(r[i])) end "
        "  return table.maxn(r) .. ':' .. table.concat(out, ',') "
        "end"
    )
    ok_native = run(code, lua.native, name)
    ok_ours = run(code, lua.ours, name)
    assert ok_ours == ok_native


@pytest.mark.parametrize("call", ERROR_CASES)
def test_error_message_and_position_match_native(lua: Harness, call: str) -> None:
    name, args = call.split("(", 1)
    code = (
        "local native, ours = ...\n"
        "local function try(lib)\n"
        f"  local r = lib.{name}({args}\n"  # line 3: the position both must report
        "  if type(r) == 'function' then for _ in r do end end\n"
        "  return r\n"
        "end\n"
        "local ok1, e1 = pcall(try, native)\n"
        "local ok2, e2 = pcall(try, ours)\n"
        "return ok1, tostring(e1), ok2, tostring(e2)\n"
    )
    ok_native, expected, ok_ours, got = lua.run(code)
    assert not ok_native, "the case must make native raise"
    assert not ok_ours
    assert got == expected
    assert expected.startswith("case:3: ") or expected.startswith("case:4: ")


def test_bad_argument_names_follow_native_only_for_field_calls(lua: Harness) -> None:
    # Documented divergence: native names the function after the call site and counts
    # from the pattern for method calls; the metered functions always say 'find', #n.
    code = (
        "local native, ours = ...\n"
        "local f1, f2 = native.find, ours.find\n"
        "local _, e1 = pcall(function() local r = f1(nil, 'a') return r end)\n"
        "local _, e2 = pcall(function() local r = f2(nil, 'a') return r end)\n"
        "return e1, e2\n"
    )
    expected, got = lua.run(code)
    assert expected == "case:3: bad argument #1 to 'f1' (string expected, got nil)"
    assert got == "case:4: bad argument #1 to 'find' (string expected, got nil)"


def test_errors_point_at_the_caller_once_compiled(lua: Harness) -> None:
    # The error level is computed from the matcher's depth: check it with hot traces too.
    code = (
        "local native, ours = ...\n"
        "local function probe(lib, p, s)\n"
        "  local r = lib.gsub(s, p, '%1')\n"
        "  return r\n"
        "end\n"
        "local out = {}\n"
        "for _, lib in ipairs({native, ours}) do\n"
        "  for i = 1, 300 do probe(lib, '(a)(b*)c', ('ab'):rep(i % 7) .. 'c') end\n"
        "  for _, p in ipairs({'(a)(b*)%3', '(a)(b*)[', '(a)(b*)%f', ('x*'):rep(201), '((a)'}) do\n"
        "    local ok, e = pcall(probe, lib, p, 'abbc')\n"
        "    out[#out + 1] = tostring(e)\n"
        "  end\n"
        "end\n"
        "return table.concat(out, '\\n')\n"
    )
    lines = lua.run(code).split("\n")
    assert lines[:5] == lines[5:]
    assert all(line.startswith("case:3: ") for line in lines)


def test_gmatch_end_returns_no_values(lua: Harness) -> None:
    code = (
        "local native, ours = ...\n"
        "local a, b = native.gmatch('ab', 'x'), ours.gmatch('ab', 'x')\n"
        "return select('#', a()), select('#', b())\n"
    )
    assert lua.run(code) == (0, 0)


def test_every_byte_against_every_class_matches_native(lua: Harness) -> None:
    code = (
        "local native, ours = ...\n"
        "local bad = {}\n"
        "for l = 32, 126 do\n"
        "  local cl = string.char(l)\n"
        "  local forms = {'[%' .. cl .. ']', '[^%' .. cl .. ']'}\n"
        "  if not cl:find('^[%dbf]$') then forms[3] = '%' .. cl end  -- not %1, %b, %f\n"
        "  for _, p in ipairs(forms) do\n"
        "    for c = 0, 255 do\n"
        "      local s = string.char(c)\n"
        "      if native.find(s, p) ~= ours.find(s, p) then bad[#bad + 1] = p .. ' ' .. c end\n"
        "    end\n"
        "  end\n"
        "end\n"
        "return table.concat(bad, ', ')\n"
    )
    assert lua.run(code) == ""


def test_replacement_function_may_use_the_library_again(lua: Harness) -> None:
    code = (
        "local native, ours = ...\n"
        "local function run(lib)\n"
        "  return (lib.gsub('k1=v1;k2=v2', '(%w+)=(%w+)', function(k, v)\n"
        "    local inner = {}\n"
        "    for d in lib.gmatch(k .. v, '%d') do inner[#inner + 1] = lib.gsub(d, '%d', '<%0>') end\n"
        "    return table.concat(inner) .. (lib.match(v, '^(%a)') or '?')\n"
        "  end))\n"
        "end\n"
        "return run(native), run(ours)\n"
    )
    expected, got = lua.run(code)
    assert got == expected == "<1><1>v;<2><2>v"


def test_errors_from_callbacks_and_from_charge_pass_through_unchanged() -> None:
    rt = luajit21.LuaRuntime()
    code = r"""
    local source = ...
    local TRIP = {}
    local armed = false
    local ours = loadstring(source)()(function(n) if armed then error(TRIP) end end)
    local OOPS = {}
    local ok1, e1 = pcall(ours.gsub, "abc", "b", function() error(OOPS) end)
    local ok2, e2 = pcall(ours.gsub, "abc", "b", setmetatable({}, {__index = function() error(OOPS) end}))
    armed = true
    local ok3, e3 = pcall(ours.find, "abc", "b.")
    local ok4, e4 = pcall(function() return ours.gmatch("abc", ".")() end)
    return e1 == OOPS, e2 == OOPS, e3 == TRIP, e4 == TRIP, ok1 or ok2 or ok3 or ok4
    """
    assert tuple(rt.execute(code, patterns_source())) == (True, True, True, True, False)


def test_runs_without_unsafe_libraries_and_survives_replaced_globals() -> None:
    rt = luajit21.LuaRuntime()
    code = r"""
    local source = ...
    -- Only what patterns.lua may use: no debug, os, io, string.dump, pairs, setmetatable.
    local env = {
      string = {byte = string.byte, sub = string.sub, char = string.char, len = string.len},
      table = {concat = table.concat, insert = table.insert, remove = table.remove},
      math = {floor = math.floor, huge = math.huge},
      select = select, type = type, error = error, tostring = tostring, tonumber = tonumber,
    }
    local chunk = loadstring(source)
    setfenv(chunk, env)
    local lib = chunk()(function() end)
    local before = {}
    for k in pairs(env) do before[#before + 1] = k end
    -- The mod replaces the globals of its copy: the library captured its own.
    for name in pairs(env.string) do env.string[name] = nil end
    env.type, env.error, env.tostring, env.tonumber, env.select = nil, nil, nil, nil, nil
    env.table.concat, env.math.floor = nil, nil
    local a = lib.gsub("hello world", "(%w+)", "<%1>")
    local b = select(2, pcall(lib.find, "abc", "(b"))
    local c = lib.find("abc", "b", 1.5)
    local d = select(2, pcall(lib.find, nil, "x"))
    local leaked = {}
    for k in pairs(env) do if k ~= "string" and k ~= "table" and k ~= "math" then leaked[#leaked + 1] = k end end
    return a, b, c, d, #before, table.concat(leaked, ",")
    """
    a, b, c, d, _, leaked = rt.execute(code, patterns_source())
    assert a == "<hello> <world>"
    assert b == "unfinished capture"
    assert c == 2
    assert d == "bad argument #1 to 'find' (string expected, got nil)"
    assert leaked == ""  # no globals were created


# --- metering ------------------------------------------------------------------------------


def units(lua: Harness, code: str) -> int:
    lua.meter.used = 0
    lua.meter.limit = float("inf")
    lua.run(code)
    return int(lua.meter.used)


def test_charges_grow_quadratically_with_a_backtracking_subject(lua: Harness) -> None:
    counts = [
        units(lua, f"local _, ours = ... ours.find(('a'):rep({n}), 'a-b')") for n in (200, 400, 800)
    ]
    assert counts[0] > 200 * 200 / 2
    assert 3.5 < counts[1] / counts[0] < 4.5
    assert 3.5 < counts[2] / counts[1] < 4.5


def test_charges_grow_linearly_for_linear_work(lua: Harness) -> None:
    small = units(lua, "local _, ours = ... ours.gsub(('ab  '):rep(1000), '%s+', ' ')")
    large = units(lua, "local _, ours = ... ours.gsub(('ab  '):rep(4000), '%s+', ' ')")
    assert 3.5 < large / small < 4.5
    plain = units(
        lua, "local _, ours = ... ours.find(('a'):rep(2000), ('a'):rep(1000) .. 'b', 1, true)"
    )
    assert plain > 1000 * 1000  # the quadratic plain search is paid for too


def test_every_entry_point_is_charged(lua: Harness) -> None:
    for call in ('find("abc", "b")', 'find("abc", "b", 1, true)', 'match("abc", "b")',
                 'gmatch("abc", "b")()', 'gsub("abc", "b", "x")'):  # fmt: skip
        assert units(lua, f"local _, ours = ... return ours.{call}") > 0, call


def test_a_raising_charge_stops_a_catastrophic_pattern() -> None:
    rt = luajit21.LuaRuntime()
    code = r"""
    local source, limit = ...
    local used = 0
    local TRIP = {}
    local lib = loadstring(source)()(function(n)
      used = used + n
      if used > limit then error(TRIP) end
    end)
    local subject = string.rep("a", 5000)
    local ok, e = pcall(lib.find, subject, (".-"):rep(10) .. "b")
    local ok2, e2 = pcall(lib.gsub, subject, (".-"):rep(10) .. "b", "x")
    return ok, e == TRIP, ok2, e2 == TRIP, used
    """
    limit = 2_000_000
    started = time.perf_counter()
    ok, tripped, ok2, tripped2, used = rt.execute(code, patterns_source(), limit)
    elapsed_s = time.perf_counter() - started
    assert (ok, tripped, ok2, tripped2) == (False, True, False, True)
    # Two trips: each stopped within one charge of the limit (a charge is at most a scan of
    # the 5000-byte subject), and the second started from the count the first left.
    assert limit < used < limit + 5002
    assert elapsed_s < 10


# --- performance (reported, not asserted) -----------------------------------------------------

PERF = r"""
local native, ours = ...
local clock = os.clock
local parts = {}
for i = 1, 1000 do
  parts[i] = (i % 7 == 0) and ("  key" .. i .. "=val" .. i .. " \t") or ("word" .. i .. " ")
end
local text = table.concat(parts):sub(1, 10240)
local line = "   " .. ("lorem ipsum dolor sit amet "):rep(7) .. "   "
local function per_call(f, lib, reps)
  f(lib)
  local t0 = clock()
  for _ = 1, reps do f(lib) end
  return (clock() - t0) / reps
end
local cases = {
  {'gsub("%s+", " ") 10 KB', function(lib) return lib.gsub(text, "%s+", " ") end, 50},
  {'gmatch("(%w+)=(%w+)") 10 KB', function(lib)
    local n = 0
    for _ in lib.gmatch(text, "(%w+)=(%w+)") do n = n + 1 end
    return n
  end, 20},
  {'match("^%s*(.-)%s*$") 200 B', function(lib) return lib.match(line, "^%s*(.-)%s*$") end, 2000},
  {'find(plain) 10 KB', function(lib) return lib.find(text, "key994=", 1, true) end, 500},
}
local out = {}
for _, c in ipairs(cases) do
  local n, o = per_call(c[2], native, c[3]), per_call(c[2], ours, c[3])
  out[#out + 1] = string.format("%-30s native %8.1f us  metered %8.1f us  x%.1f",
                                c[1], n * 1e6, o * 1e6, o / n)
end
return table.concat(out, "\n")
"""


def test_report_slowdown_against_native(lua: Harness, capsys: pytest.CaptureFixture[str]) -> None:
    assert lua.rt.eval("(jit.status())") is True
    report = lua.run(PERF)
    with capsys.disabled():
        print("\npatterns.lua slowdown vs native (JIT on):\n" + report)
    assert re.search(r"x\d", report)
