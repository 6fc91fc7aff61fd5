"""Attacks a hostile mod can make, each one a regression test against ``moonbox.Sandbox``.

Escapes (reaching Python or the meter), hangs (every loop shape, swallowed trips), crashes
(memory bombs, deep nesting), leaks (metamethods run on the host side, unbounded messages)
and binding misuse. Every test runs in both metering modes unless it is about one mode.

A test that would hang or crash the test process if moonbox were broken in a known way runs
its mod in a child process with a timeout (:func:`run_isolated`); every other test relies on
the sandbox's own budgets to stop. Attacks that currently succeed are marked
``xfail(strict=True)`` with the bug they show.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time

import pytest
from lupa import luajit21

import moonbox
from moonbox import Budget, BudgetExceeded, Outcome, Sandbox, ScriptError

both_modes = pytest.mark.parametrize("jit", [True, False], ids=["jit", "hook"])

CHUNK = "@mods/attacker/main.lua"
STEPS = Budget(steps=200_000, wall_s=10)
"""A small step budget with wall time to spare: the steps trip first."""
WALL_S = 0.2
TIME = Budget(steps=10**15, wall_s=WALL_S)
"""A huge step budget and a short wall budget: the clock trips first."""
TIME_MARGIN_S = 0.5
"""How late a time trip may land, measured generously around the whole run."""
SMALL_HEAP = Budget(steps=10**12, wall_s=10, max_memory=32 << 20, alloc_bytes=32 << 20)

LOOP = "while true do end"


def sandbox(jit: bool, budget: Budget = STEPS, **kwargs) -> Sandbox:
    kwargs.setdefault("host_functions", moonbox.default_bindings())
    return Sandbox(budget, jit=jit, **kwargs)


def run(jit: bool, source: str, budget: Budget = STEPS) -> Outcome:
    """Run one attack in a fresh sandbox, then check the sandbox still works."""
    with sandbox(jit, budget) as sb:
        out = sb.run(source, CHUNK)
        assert sb.run("return 'alive'").value == "alive"
    return out


def timed_run(jit: bool, source: str, budget: Budget = TIME) -> tuple[Outcome, float]:
    with sandbox(jit, budget) as sb:
        t0 = time.perf_counter()
        out = sb.run(source, CHUNK)
        elapsed = time.perf_counter() - t0
        assert sb.run("return 'alive'").value == "alive"
    return out, elapsed


def assert_budget(out: Outcome, kind: str) -> None:
    assert out.status == "budget", out
    assert isinstance(out.error, BudgetExceeded)
    assert out.error.kind == "budget"
    assert out.budget == kind, out.error
    assert out.error.chunk == CHUNK


def assert_time_trip(out: Outcome, elapsed: float) -> None:
    assert_budget(out, "time")
    assert elapsed < WALL_S + TIME_MARGIN_S, f"the time trip landed after {elapsed:.2f} s"


_CHILD = """
import json, sys
import moonbox
budget = moonbox.Budget(**json.loads(sys.argv[1]))
sb = moonbox.Sandbox(budget, jit=sys.argv[2] == "1", host_functions=moonbox.default_bindings())
out = sb.run(sys.stdin.read(), sys.argv[3])
alive = sb.run("return 'alive'").value
print(json.dumps({"status": out.status, "budget": out.budget,
                  "message": out.error.message if out.error else None, "alive": alive}))
"""


def run_isolated(jit: bool, source: str, budget: dict, timeout_s: float) -> dict | None:
    """Run an attack in a child process; its outcome as a dict, or None if it hung.

    Raises AssertionError if the child died (a crash of the host process).
    """
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, json.dumps(budget), "1" if jit else "0", CHUNK],
            input=source,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return None
    assert proc.returncode == 0, f"the host process died (exit {proc.returncode}): {proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------
# Reaching Python
# ------------------------------------------------------------------------------------------


@both_modes
@pytest.mark.parametrize("expr", ["python", "_G.python", "rawget(_G, 'python')", "_G['python']"])
def test_the_python_module_is_absent(jit, expr):
    out = run(jit, f"return {expr}")
    assert out.status == "done" and out.values == (None,)


@both_modes
@pytest.mark.parametrize(
    "source, message",
    [
        ("return python.eval('1 + 1')", "attempt to index global 'python' (a nil value)"),
        ("return python.builtins.open", "attempt to index global 'python' (a nil value)"),
        ("return package.loaded.python", "attempt to index global 'package' (a nil value)"),
        ("return require('python')", "attempt to call global 'require' (a nil value)"),
    ],
)
def test_python_cannot_be_reached_by_name(jit, source, message):
    out = run(jit, source)
    assert out.status == "error" and out.error.kind == "runtime"
    assert out.error.message == message


ATTRIBUTE_PROBES = """
local found = {}
local targets = {
  report = report, add = add, print = print, pcall = pcall, string = string,
  str = "text", co = coroutine.create(function() end), number = 1, env = _G,
}
local names = {"__globals__", "__class__", "__dict__", "__module__", "__self__",
               "__code__", "__builtins__", "__subclasses__", "__import__", "__init__"}
for tname, target in next, targets do
  for _, attr in ipairs(names) do
    local ok, value = pcall(function() return target[attr] end)
    if ok and value ~= nil then found[#found + 1] = tname .. "." .. attr end
  end
end
return found
"""


@both_modes
def test_no_value_in_reach_has_python_attributes(jit):
    out = run(jit, ATTRIBUTE_PROBES)
    assert out.status == "done"
    assert out.value in ({}, [])


DENIED_GLOBALS = [
    "debug", "io", "os", "package", "require", "load", "loadstring", "loadfile", "dofile",
    "getfenv", "setfenv", "newproxy", "jit", "ffi", "module", "gcinfo", "python",
]  # fmt: skip


@both_modes
@pytest.mark.parametrize("name", DENIED_GLOBALS)
def test_dangerous_globals_are_absent(jit, name):
    out = run(jit, f"return {name} == nil, rawget(_G, '{name}') == nil, _G['{name}'] == nil")
    assert out.values == (True, True, True)


@both_modes
@pytest.mark.parametrize(
    "expr",
    ["string.dump", "('').dump", "('x').dump", "(('x'):rep(2)).dump", "rawget(string, 'dump')"],
)
def test_string_dump_is_absent_everywhere(jit, expr):
    out = run(jit, f"return {expr} == nil")
    assert out.values == (True,)


@both_modes
def test_the_string_metatable_is_hidden(jit):
    out = run(
        jit,
        """
        local mt = getmetatable("")
        local ok = pcall(setmetatable, "", {})
        return type(mt), mt == string, ok
        """,
    )
    # `false` from __metatable: neither the real string table nor a writable metatable.
    assert out.values == ("boolean", False, False)


@both_modes
def test_string_methods_use_the_mods_own_string_table(jit):
    out = run(jit, "string.upper = function() return 'mine' end return ('x'):upper()")
    assert out.value == "mine"


@both_modes
def test_a_mod_changing_its_libraries_cannot_affect_another_sandbox(jit):
    with sandbox(jit) as a, sandbox(jit) as b:
        tamper = """
        string.upper = function() return "pwned" end
        string.rep = nil
        math.pi = 3
        table.insert = error
        shared_secret = "from a"
        setmetatable(_G, {__index = function() return "ghost" end})
        return ("x"):upper()
        """
        assert a.run(tamper, CHUNK).value == "pwned"
        probe = """
        return ("x"):upper(), string.upper("y"), string.rep("z", 2), math.pi,
               shared_secret, undefined_name, type(table.insert)
        """
        out = b.run(probe, "@mods/victim/main.lua")
        assert out.values == ("X", "Y", "zz", 3.141592653589793, None, None, "function")


@both_modes
@pytest.mark.parametrize("option", ["collect", "stop", "restart", "step", "setpause", "setstepmul"])
def test_collectgarbage_is_refused_except_count(jit, option):
    out = run(jit, f"local x = 1\ncollectgarbage('{option}')")
    assert out.status == "error" and out.error.kind == "runtime"
    assert out.error.line == 2
    assert "collectgarbage" in out.error.message and "count" in out.error.message


@both_modes
def test_collectgarbage_without_an_option_is_refused(jit):
    out = run(jit, "collectgarbage()")
    assert out.status == "error" and "collectgarbage" in out.error.message


@both_modes
def test_collectgarbage_count_works(jit):
    out = run(jit, "local kb = collectgarbage('count') return type(kb), kb > 0")
    assert out.values == ("number", True)


# ------------------------------------------------------------------------------------------
# Bytecode
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bytecode() -> bytes:
    """Real LuaJIT bytecode of a function returning 42, made outside any sandbox."""
    rt = luajit21.LuaRuntime(encoding=None)
    return rt.eval("string.dump(function() return 42 end)")


def _bytecode_variants(code: bytes) -> dict[str, str | bytes]:
    return {
        "bytes": code,
        "str": code.decode("latin-1"),
        "fake_header_bytes": b"\x1bLJ\x02\x0areturn 42",
        "fake_header_str": "\x1bLJ\x02return 42",
        "bom_bytes": b"\xef\xbb\xbf" + code,
        "bom_str": "\ufeff" + code.decode("latin-1"),
        "shebang": b"#!/usr/bin/luajit\n" + code,
    }


@both_modes
@pytest.mark.parametrize(
    "variant",
    ["bytes", "str", "fake_header_bytes", "fake_header_str", "bom_bytes", "bom_str", "shebang"],
)
def test_bytecode_is_refused_as_a_syntax_error(jit, bytecode, variant):
    source = _bytecode_variants(bytecode)[variant]
    with sandbox(jit) as sb:
        with pytest.raises(ScriptError) as info:
            sb.load(source, CHUNK)
        assert info.value.kind == "syntax"
        out = sb.run(source, CHUNK)
    assert out.status == "error" and out.error.kind == "syntax"
    assert out.values == ()  # the payload (return 42) never ran
    if variant in ("bytes", "str", "fake_header_bytes", "fake_header_str"):
        assert "bytecode is refused" in out.error.message


# ------------------------------------------------------------------------------------------
# Reserved names and the meter
# ------------------------------------------------------------------------------------------

RESERVED_SOURCES = {
    "local": "local __mb = 1",
    "local_suffix": "local __mb_n0123456789ab = 1",
    "global": "__mbx = 1",
    "read": "return __mb_s",
    "field": "local t = {} t.__mbx = 1",
    "method": "local t = {} function t:__mb() end",
    "function": "function __mbf() end",
    "parameter": "local f = function(a, __mb) end",
    "label": "::__mb:: return 1",
    "goto": "do goto __mb end ::__mb::",
    "for_variable": "for __mbi = 1, 2 do end",
    "later_line": "local ok = 1\nlocal x = {}\nx.__mbz = 2",
}


@both_modes
@pytest.mark.parametrize("where", sorted(RESERVED_SOURCES))
def test_reserved_names_are_refused(jit, where):
    source = RESERVED_SOURCES[where]
    out = run(jit, source)
    assert out.status == "error" and out.error.kind == "syntax"
    assert "reserved" in out.error.message
    expected_line = source[: source.index("__mb")].count("\n") + 1
    assert out.error.line == expected_line


@both_modes
def test_reserved_names_inside_strings_and_comments_are_fine(jit):
    out = run(
        jit,
        """
        -- __mb in a comment
        --[[ __mb_n in a long comment ]]
        local t = {["__mb_n"] = 1, [ [[__mb_s]] ] = 2}
        return "__mb", t["__mb_n"], rawget(_G, "__mb_n"), _G["__mb_s"]
        """,
    )
    assert out.status == "done"
    assert out.values == ("__mb", 1, None, None)


WALK_REACHABLE = """
-- Every value reachable from the environment and the string metatable, through keys,
-- values and metatables: look for anything that is not plain Lua data or a function.
local seen, odd, reserved, count = {}, {}, {}, 0
local function walk(v, path, depth)
  local tv = type(v)
  if tv == "userdata" or tv == "cdata" or tv == "thread" then
    odd[#odd + 1] = path .. " is a " .. tv
  end
  if tv ~= "table" or seen[v] or depth > 30 then return end
  seen[v] = true
  count = count + 1
  for k, x in next, v do
    if type(k) == "string" and k:sub(1, 4) == "__mb" then reserved[#reserved + 1] = path .. "." .. k end
    walk(k, path .. "[key]", depth + 1)
    walk(x, path .. "." .. tostring(k), depth + 1)
  end
  walk(getmetatable(v), path .. "<metatable>", depth + 1)
end
walk(_G, "_G", 0)
walk(getmetatable(""), "<string metatable>", 0)
walk(getmetatable(print), "<function metatable>", 0)
walk(getmetatable(1), "<number metatable>", 0)
walk(getmetatable(true), "<boolean metatable>", 0)
walk(getmetatable(nil), "<nil metatable>", 0)
return odd, reserved, count
"""


@both_modes
def test_no_cdata_userdata_or_reserved_name_is_reachable(jit):
    out = run(jit, WALK_REACHABLE)
    assert out.status == "done"
    odd, reserved, count = out.values
    assert odd in ({}, [])
    assert reserved in ({}, [])
    assert count >= 6  # _G and its five library tables were walked


ERROR_MESSAGES = """
local messages = {}
local function try(f, ...)
  local ok, e = pcall(f, ...)
  messages[#messages + 1] = tostring(e)
end
try(function() local x; x() end)
try(function() for i = 1, 2 do local y = nil + i end end)
try(function() while true do local t = nil; t.x = 1 end end)
try(function() repeat local z = {} .. 1 until true end)
try(function() local n = 0 ::top:: n = n + 1 if n < 3 then goto top end error("at label") end)
try(function(...) return select(-1) end)
try(error)
try(error, nil)
try(function() error("level 2", 2) end)
try(function() return #nil end)
try(function() return ("x"):bad() end)
try(string.rep)
try(setmetatable, 1, {})
try(function() local t = setmetatable({}, {__index = function(t, k) return k .. nil end}) return t.x end)
try(coroutine.wrap(function() error("in coroutine") end))
try(function() return coroutine.resume(coroutine.running()) end)
local co = coroutine.create(function() local a = nil; a() end)
local _, e = coroutine.resume(co)
messages[#messages + 1] = tostring(e)
return messages
"""


@both_modes
def test_error_messages_never_name_the_meter(jit):
    out = run(jit, ERROR_MESSAGES)
    assert out.status == "done"
    messages = out.value
    assert len(messages) >= 15
    for message in messages:
        assert "__mb" not in message
        assert "prelude" not in message


@both_modes
def test_errors_and_trips_never_name_the_meter_on_the_host_side(jit):
    nested = """
    local function inner() local x = nil return x.y end
    local function middle() return (inner()) end
    local function outer() return (middle()) end
    return outer()
    """
    spin = """
    local function inner() while true do end end
    local function middle() inner() end
    middle()
    """
    for source in (nested, spin):
        out = run(jit, source)
        assert out.status in ("error", "budget")
        texts = [str(out.error), out.error.message, *(str(f) for f in out.error.traceback)]
        for text in texts:
            assert "__mb" not in text and "prelude" not in text


# ------------------------------------------------------------------------------------------
# Swallowing a trip
# ------------------------------------------------------------------------------------------

SWALLOW = {
    "pcall": f"local ok, e = pcall(function() {LOOP} end) report('after') return ok, e",
    "pcall_then_loop": f"pcall(function() {LOOP} end) report('after') {LOOP}",
    "xpcall_handler_returns": (
        f"local ok, e = xpcall(function() {LOOP} end, function(e) return 'fine' end) "
        f"report('after') {LOOP}"
    ),
    "xpcall_handler_reports": f"xpcall(function() {LOOP} end, function() report('after') end)",
    "xpcall_handler_is_report": f"xpcall(function() {LOOP} end, report) report('after')",
    "xpcall_handler_is_print": f"xpcall(function() {LOOP} end, print) report('after')",
    "xpcall_handler_is_error": f"xpcall(function() {LOOP} end, error) report('after')",
    "xpcall_handler_nests_xpcall": (
        f"xpcall(function() {LOOP} end, function() "
        "return xpcall(function() report('after') end, print) end) report('after')"
    ),
    "xpcall_handler_nests_erroring_xpcall": (
        f"xpcall(function() {LOOP} end, function() "
        "return xpcall(function() error('x') end, function(e) return e end) end) report('after')"
    ),
    "nested_pcalls": f"local ok = pcall(pcall, pcall, function() {LOOP} end) report('after') return ok",
    "pcall_in_pcall_in_loop": (
        f"for i = 1, 10 do pcall(function() pcall(function() {LOOP} end) end) end report('after')"
    ),
    "loop_of_pcalls": f"while true do pcall(function() {LOOP} end) report('after') end",
    "coroutine_resume": (
        f"local co = coroutine.create(function() {LOOP} end) "
        "local ok, e = coroutine.resume(co) report('after') return ok, e"
    ),
    "coroutine_resume_in_pcall": (
        f"local co = coroutine.create(function() {LOOP} end) "
        "pcall(coroutine.resume, co) report('after' .. coroutine.status(co))"
    ),
    "coroutine_wrap": f"local f = coroutine.wrap(function() {LOOP} end) pcall(f) report('after')",
    "coroutine_of_pcall": (
        "local co = coroutine.create(pcall) "
        f"local ok, a, b = coroutine.resume(co, function() {LOOP} end) report('after') return ok, a"
    ),
    "wrap_of_pcall": f"coroutine.wrap(pcall)(function() {LOOP} end) report('after')",
    "yield_across_pcall": (
        "local co = coroutine.wrap(function() "
        f"pcall(function() coroutine.yield(1) {LOOP} end) coroutine.yield(2) end) "
        "co() pcall(co) report('after')"
    ),
    "sort_comparator_in_pcall": (
        f"pcall(table.sort, {{3, 2, 1}}, function(a, b) {LOOP} end) report('after')"
    ),
    "gsub_callback_in_pcall": (
        f"pcall(string.gsub, 'abc', '.', function() {LOOP} end) report('after')"
    ),
    "tostring_in_pcall": (
        f"pcall(tostring, setmetatable({{}}, {{__tostring = function() {LOOP} end}})) "
        "report('after')"
    ),
    "catch_then_error_other_value": (
        f"pcall(function() {LOOP} end) report('after') error('something else')"
    ),
    "catch_then_error_table": (f"pcall(function() {LOOP} end) report('after') error({{code = 1}})"),
    "catch_then_return_value": f"pcall(function() {LOOP} end) report('after') return 'I won'",
    "catch_then_yield": f"pcall(function() {LOOP} end) coroutine.yield('again') report('after')",
    "catch_then_report_in_pcall": (
        f"pcall(function() {LOOP} end) pcall(report, 'after') pcall(add, 1, 2) report('after')"
    ),
    "forged_memory_error": (
        f"pcall(function() {LOOP} end) local ok = pcall(error, 'not enough memory') report('after')"
    ),
}


@both_modes
@pytest.mark.parametrize("case", sorted(SWALLOW))
def test_a_steps_trip_cannot_be_swallowed(jit, case):
    out = run(jit, SWALLOW[case], STEPS)
    assert_budget(out, "steps")
    assert "after" not in " ".join(out.reports)
    assert out.values == ()


# Found by these tests: with jit=False a real xpcall handler ran with hooks off, unmetered.
# The mod's xpcall now runs its handler after unwinding, under the meter.
@both_modes
@pytest.mark.parametrize("case", sorted(SWALLOW))
def test_a_time_trip_cannot_be_swallowed(jit, case):
    out, elapsed = timed_run(jit, SWALLOW[case], TIME)
    assert_time_trip(out, elapsed)
    assert "after" not in " ".join(out.reports)


@both_modes
@pytest.mark.parametrize("budget", ["steps", "time"])
def test_an_xpcall_handler_that_loops_after_a_trip_is_stopped(jit, budget):
    source = f"local ok, e = xpcall(function() {LOOP} end, function(e) {LOOP} end) report('after')"
    limits = (
        {"steps": 200_000, "wall_s": 2.0}
        if budget == "steps"
        else {"steps": 10**15, "wall_s": WALL_S}
    )
    result = run_isolated(jit, source, limits, timeout_s=10)
    assert result is not None, "the mod hung the host: killed after 10 s"
    assert result["status"] == "budget" and result["budget"] == budget
    assert result["alive"] == "alive"


# ------------------------------------------------------------------------------------------
# Every loop shape stops
# ------------------------------------------------------------------------------------------

LOOP_SHAPES = {
    "while": "while true do end",
    "while_with_work": "local x = 0 while true do x = x + 1 end",
    "numeric_for": "for i = 1, math.huge do end",
    "numeric_for_zero_step": "for i = 0, 1, 0 do end",
    "generic_for_pairs": "local t = {1, 2, 3, x = 4} while true do for k, v in pairs(t) do end end",
    "generic_for_next": "local t = {a = 1} while true do for k in next, t do end end",
    "generic_for_ipairs_forever": (
        "local t = {true} for i in ipairs(t) do t[i + 1] = true t[i] = nil end"
    ),
    "generic_for_lua_iterator": "for x in function() return true end do end",
    "repeat_until": "repeat until false",
    "repeat_with_local": "repeat local done = false until done",
    "goto_backward": "::top:: goto top",
    "goto_in_nested_block": "do local n = 0 ::again:: n = n + 1 if n > 0 then goto again end end",
    "goto_continue_style": (
        "local i = 0 while true do i = i + 1 if i % 2 == 0 then goto continue end ::continue:: end"
    ),
    "tail_call": "local function f() return f() end return f()",
    "tail_call_varargs": "local function f(...) return f(...) end return f(1, 2, 3)",
    "mutual_tail_recursion": (
        "local g local function f() return g() end function g() return f() end return f()"
    ),
    "method_tail_recursion": "local o = {} function o:spin() return self:spin() end return o:spin()",
    "call_metamethod_recursion": (
        "local t t = setmetatable({}, {__call = function(self) return self() end}) return t()"
    ),
    "loop_in_pcall": f"pcall(function() {LOOP} end)",
    "loop_in_xpcall_handler": f"xpcall(function() error('x') end, function() {LOOP} end)",
    "loop_in_coroutine": f"coroutine.wrap(function() {LOOP} end)()",
    "coroutine_ping_pong": (
        "local co = coroutine.wrap(function() while true do coroutine.yield() end end) "
        "while true do co() end"
    ),
    "coroutine_ring_forever": (
        "local t = {} for i = 1, 10 do "
        "t[i] = coroutine.create(function(x) while true do x = coroutine.yield(x + 1) end end) end "
        "local x = 0 while true do for i = 1, 10 do local ok ok, x = coroutine.resume(t[i], x) end end"
    ),
    "library_body_coroutine_forever": (
        "local co = coroutine.create(pcall) "
        "coroutine.resume(co, function() while true do coroutine.yield(1, 2, 3, 4, 5) end end) "
        "while true do coroutine.resume(co) end"
    ),
    "loop_in_sort_comparator": f"table.sort({{3, 2, 1, 5, 4}}, function(a, b) {LOOP} end)",
    "loop_in_gsub_callback": f"string.gsub('abc', '.', function() {LOOP} end)",
    "loop_in_index_metamethod": (
        f"local t = setmetatable({{}}, {{__index = function() {LOOP} end}}) return t.x"
    ),
    "loop_in_add_metamethod": (
        f"local t = setmetatable({{}}, {{__add = function() {LOOP} end}}) return t + 1"
    ),
    "loop_in_lt_metamethod_via_sort": (
        f"local mt = {{__lt = function() {LOOP} end}} "
        "table.sort({setmetatable({}, mt), setmetatable({}, mt), setmetatable({}, mt)})"
    ),
    "loop_in_tostring_metamethod": (
        f"return tostring(setmetatable({{}}, {{__tostring = function() {LOOP} end}}))"
    ),
    "loop_in_concat_metamethod": (
        f"local t = setmetatable({{}}, {{__concat = function() {LOOP} end}}) return t .. 'x'"
    ),
    "loop_in_newindex_metamethod": (
        f"local t = setmetatable({{}}, {{__newindex = function() {LOOP} end}}) t.x = 1"
    ),
    "loop_in_print_tostring": (
        f"print(setmetatable({{}}, {{__tostring = function() {LOOP} end}}))"
    ),
    # A function that calls nothing enters with its charge alone: the next full check stops
    # it, whatever it does and however it is reached.
    "call_free_function_in_a_loop": (
        "local function f(x) return x + 1 end local n = 0 while true do n = f(n) end"
    ),
    "call_free_function_comparing_long_strings": (
        "local s = string.rep('x', 2^20) local function f() return s < s end "
        "while true do f() end"
    ),
    "call_free_index_metamethod_chain": (
        "local t t = setmetatable({}, {__index = function(s, k) return s[k] end}) "
        "while true do pcall(function() return t.x end) end"
    ),
    "call_free_add_metamethod_chain": (
        "local mt = {} mt.__add = function(a, b) return a + b end "
        "local t = setmetatable({}, mt) while true do pcall(function() return t + 1 end) end"
    ),
    # A loop body of one statement that calls has its check after the statement.
    "loop_of_one_call": "local function f() end while true do f() end",
    "for_of_one_call": (
        "local n = 0 local function f(x) return x + 1 end for i = 1, math.huge do n = f(n) end"
    ),
    "loop_of_one_call_of_a_new_closure": (
        "local function mk(k) return function(x) return x + k end end "
        "while true do local n = 0 for i = 1, math.huge do n = mk(i)(n) end end"
    ),
    # A function that begins with `if ... then return ... end` holds its entry check after
    # that statement: the calls that return there pass no check, every other call does.
    "recursion_past_a_base_case": (
        "local function f(n) if n < 0 then return 0 end return f(n + 1) end return f(1)"
    ),
    "wide_recursion_through_base_cases": (
        "local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end "
        "while true do fib(25) end"
    ),
    "recursion_past_two_base_cases": (
        "local function f(m, n) if m < 0 then return 0 end if n < 0 then return 1 end "
        "return 1 + f(m + 1, n) end while true do pcall(f, 0, 0) end"
    ),
    "loop_of_calls_returning_at_a_base_case": (
        "local function f(n) if n then return n end return f(n) end while true do f(1) end"
    ),
    "base_case_comparing_long_strings": (
        "local s = string.rep('x', 2^16) local t = s .. 'y' "
        "local function f(a) if s < a then return 1 end return f(t) end while true do f(t) end"
    ),
    # Short unpacks run as the guard's own Lua code, so a dispatch loop through pcall and
    # unpack compiles whole, handlers included: its checks and the handlers' stop it.
    "dispatch_loop_through_pcall_and_unpack": (
        "local e = {'hit', 2, 1, 2} local function h(a, b) return a + b end "
        "while true do pcall(h, unpack(e, 3, 2 + e[2])) end"
    ),
    "recursion_through_pcall_and_unpack": (
        "local e = {1, 2} local function h(a, b) return pcall(h, unpack(e, 1, 2)) end "
        "while true do h(1, 2) end"
    ),
    "gsub_callbacks_forever": (
        "local s = string.rep('a', 1000) while true do s = s:gsub('a', function(c) return c end) end"
    ),
}


@both_modes
@pytest.mark.parametrize("shape", sorted(LOOP_SHAPES))
def test_every_loop_shape_trips_the_steps_budget(jit, shape):
    out = run(jit, LOOP_SHAPES[shape], STEPS)
    assert_budget(out, "steps")
    assert out.error.limit == STEPS.steps
    assert out.error.used > STEPS.steps


@both_modes
@pytest.mark.parametrize("shape", sorted(LOOP_SHAPES))
def test_every_loop_shape_trips_the_time_budget(jit, shape):
    out, elapsed = timed_run(jit, LOOP_SHAPES[shape], TIME)
    assert_time_trip(out, elapsed)


@both_modes
def test_a_loop_that_ran_jit_hot_for_long_still_trips(jit):
    budget = Budget(steps=50_000_000, wall_s=30)
    out = run(jit, "local x = 0 for i = 1, 1e12 do x = x + i end return x", budget)
    assert_budget(out, "steps")
    assert out.error.limit == 50_000_000


@both_modes
def test_a_long_hot_loop_inside_pcall_still_trips_and_stays_tripped(jit):
    budget = Budget(steps=50_000_000, wall_s=30)
    source = """
    local x = 0
    local ok = pcall(function() for i = 1, 1e12 do x = x + i end end)
    report("after")
    for i = 1, 1e12 do x = x + i end
    """
    out = run(jit, source, budget)
    assert_budget(out, "steps")
    assert out.reports == ()


@both_modes
@pytest.mark.parametrize(
    "source",
    [
        "local function f(n) return 1 + f(n + 1) end return f(1)",
        "local function f(n) local t = {f(n + 1)} return t end return f(1)",
        "local function f() return (f()) end return f()",
        "local t t = setmetatable({}, {__index = function(_, k) return t[k] .. '' end}) return t.x",
        "local function f() pcall(f) end f() return 'survived'",
        # through a leading `if ... then return ... end`, which holds no check
        "local mt = {} mt.__lt = function(a, b) if a < b then return true end return rawequal(a, b) end "
        "local x = setmetatable({}, mt) return x < x",
    ],
    ids=["plus", "table_constructor", "parenthesised", "index_metamethod", "pcall_recursion",
         "base_case_condition"],
)
def test_non_tail_deep_recursion_ends_cleanly(jit, source):
    out = run(jit, source, Budget(steps=10**9, wall_s=10))
    assert out.status in ("error", "budget", "done")
    if out.status == "error":
        assert out.error.kind == "runtime"
        assert "overflow" in out.error.message or "too deeply" in out.error.message


# A metamethod whose leading `if ... then return ... end` triggers it again recurses without
# passing a check, until the Lua stack overflows (~8,000 frames here): all of it within one
# step of the loop around it, which stops it on steps (at fewer steps per second than most
# code) and on time.
METAMETHOD_CHAIN = (
    "local mt = {} mt.__lt = function(a, b) if a < b then return true end return rawequal(a, b) end "
    "local x = setmetatable({}, mt) while true do pcall(function() return x < x end) end"
)


@both_modes
def test_a_metamethod_chain_through_leading_returns_trips_the_steps_budget(jit):
    out = run(jit, METAMETHOD_CHAIN, Budget(steps=5_000, wall_s=30))
    assert_budget(out, "steps")
    assert out.error.limit == 5_000


@both_modes
def test_a_metamethod_chain_through_leading_returns_trips_the_time_budget(jit):
    out, elapsed = timed_run(jit, METAMETHOD_CHAIN)
    assert_time_trip(out, elapsed)


# Was open: a library call was one step whatever it cost, so after a cheap hot loop had
# grown the poll window K, many costly calls ran unpolled. Library calls are now charged
# for their work.
@both_modes
def test_the_time_budget_holds_after_the_window_grew_on_a_hot_loop(jit):
    # Each iteration of the second loop is ~0.7 ms of ordinary work (one quadratic string
    # search): the meter must poll the clock often enough to stop it near the deadline.
    source = """
    local x, find = 0, string.find
    for i = 1, 3e6 do x = x + i end
    local s = string.rep("a", 350)
    while true do if find(s, ".-b") then x = x + 1 end end
    """
    out, elapsed = timed_run(jit, source)
    assert_time_trip(out, elapsed)


# Found by these tests: a costly binding call was one step, so a large poll window let
# minutes pass unpolled. The host now expires the window when a call returns past the
# deadline, and table arguments cost one step per entry.
@both_modes
def test_the_time_budget_holds_for_costly_binding_calls(jit, caplog):
    source = """
    local big = {}
    for i = 1, 99999 do big[i] = i end
    while true do pcall(add, big, 1) end
    """
    with caplog.at_level(logging.CRITICAL, logger="moonbox"):
        out, elapsed = timed_run(jit, source)
    assert_time_trip(out, elapsed)


def test_a_trip_during_a_binding_call_is_not_logged_as_a_host_bug(caplog):
    # Only the count hook (jit=False) can fire inside the host's own Lua code.
    source = """
    local big = {}
    for i = 1, 99999 do big[i] = i end
    for i = 1, 100 do pcall(add, big, 1) end
    """
    with caplog.at_level(logging.WARNING, logger="moonbox"):
        out = run(False, source, Budget(steps=2_000_000, wall_s=30))
    assert_budget(out, "steps")
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


# Was uninterruptible (one native find); a pattern whose worst case is large now runs in
# the metered matcher.
@both_modes
def test_a_backtracking_pattern_is_stopped_by_the_time_budget(jit):
    # Again and again, so a fast CPU cannot finish it; each find alone is long.
    source = "while true do string.find(string.rep('a', 27), string.rep('a*', 8) .. 'b') end"
    out, elapsed = timed_run(jit, source)
    assert_time_trip(out, elapsed)


# Was uninterruptible (one native sort); a long table now sorts in metered Lua.
@both_modes
def test_sorting_a_huge_table_is_stopped_by_the_time_budget(jit):
    source = """
    local t = {}
    for i = 1, 2^21 do t[i] = (i * 7919) % 1000003 end
    while true do  -- cannot finish, however fast the CPU; each sort alone is long
      table.sort(t)
      for i = 1, #t, 2 do t[i] = -t[i] end
    end
    """
    out, elapsed = timed_run(jit, source, Budget(steps=10**15, wall_s=WALL_S, max_memory=128 << 20))
    assert_time_trip(out, elapsed)


# `next` scans an array part slot by slot: over a long run of nils, one call (one VM
# operation, or one iteration of `pairs`) costs the run. Under the default heap cap the
# longest is the 2^22 - 1 empty slots of the largest array part it holds: ~2-3 ms a call
# (docs/threat-model.md), short enough to leave unguarded, since the alarm stops a loop of
# them one call past the deadline, in a loop the JIT compiles whole too. The table is
# built in a resume of its own, and a warm-up loop grows the poll interval to its largest.
# (A step budget is no test here: a call is one step, so 200,000 of them would take
# minutes. The step count does not see the slots scanned, as it does not see the bytes
# of a long comparison; the wall budget and the alarm bound both.)
NEXT_OVER_NILS = """
local t = {}
for i = 1, 2^22 do t[i] = true end
for i = 1, 2^22 - 1 do t[i] = nil end
coroutine.yield()
local x = 0
for i = 1, 1e6 do x = x + i end
%s
"""
NEXT_LOOPS = {
    "next": "while true do local k = next(t) end",
    "next_from_a_key": "while true do local k = next(t, 1) end",
    "pairs": "while true do for k in pairs(t) do x = x + 1 end end",
}


def next_over_nils(jit: bool, loop: str) -> tuple[Outcome, float]:
    with sandbox(jit, TIME) as sb:
        run_ = sb.start(NEXT_OVER_NILS % NEXT_LOOPS[loop], CHUNK)
        built = run_.resume(budget=Budget(steps=10**9, wall_s=60))
        assert built.status == "yielded", built
        t0 = time.perf_counter()
        out = run_.resume()
        elapsed = time.perf_counter() - t0
        assert sb.run("return 'alive'").value == "alive"
    return out, elapsed


@both_modes
@pytest.mark.parametrize("loop", sorted(NEXT_LOOPS))
def test_a_loop_of_next_over_a_long_run_of_nils_trips_its_wall_budget(jit, loop):
    out, elapsed = next_over_nils(jit, loop)
    assert_time_trip(out, elapsed)
    assert out.error.line == 8


# ------------------------------------------------------------------------------------------
# Crashes: calls nested through C
# ------------------------------------------------------------------------------------------

DEPTH_RESET_BY_SUSPENDED_PCALL = """
-- Each coroutine is parked inside a pcall, which remembered the nesting depth of the
-- moment it was entered (1). Resumed at the bottom of a 150-deep chain of gsub callbacks,
-- that pcall returns and puts the depth counter back to 1, while the C stack stays deep.
local N, K = 150, 20
local parked, level, descend = {}, 0, nil
for i = 1, K do
  local co = coroutine.create(function()
    pcall(coroutine.yield)
    return descend(1)
  end)
  coroutine.resume(co)
  parked[i] = co
end
function descend(k)
  if k > N then
    level = level + 1
    local co = parked[level]
    if co then
      local ok, e = coroutine.resume(co)
      if not ok then error(e, 0) end
    end
    return
  end
  string.gsub("a", "a", function() descend(k + 1) end)
end
descend(1)
return level
"""


# Found by these tests (a SIGSEGV): the depth was restored from a value a parked pcall had
# saved. It is now exact, given back by each guarded call on every way out.
@both_modes
def test_nesting_through_c_stays_bounded_across_parked_coroutines(jit):
    result = run_isolated(
        jit, DEPTH_RESET_BY_SUSPENDED_PCALL, {"steps": 10**9, "wall_s": 20}, timeout_s=60
    )
    assert result is not None
    assert result["status"] == "error"
    assert "nested too deeply" in result["message"]
    assert result["alive"] == "alive"


@both_modes
def test_nesting_through_c_without_coroutine_tricks_is_bounded(jit):
    source = """
    local function f(n) return (string.gsub('a', 'a', function() return f(n + 1) end)) end
    local ok, e = pcall(f, 1)
    report('caught')
    return f(1)
    """
    out = run(jit, source, Budget(steps=10**9, wall_s=10))
    assert out.status == "error" and "nested too deeply" in out.error.message
    assert out.reports == ("caught",)


# ------------------------------------------------------------------------------------------
# Memory
# ------------------------------------------------------------------------------------------

MEMORY_BOMBS = {
    "table_growth": "local t = {} for i = 1, 1e9 do t[i] = i end",
    "table_growth_global": "hoard = {} for i = 1, 1e9 do hoard[i] = i end",
    "string_doubling": "local s = 'x' while true do s = s .. s end",
    "string_doubling_global": "hoard = 'x' while true do hoard = hoard .. hoard end",
    "many_closures": "local fs = {} for i = 1, 1e9 do fs[i] = function() return i end end",
    "many_closures_global": "hoard = {} for i = 1, 1e9 do hoard[i] = function() return i end end",
    "many_tables": "local t = {} for i = 1, 1e9 do t[i] = {i} end",
    "many_strings": "local t = {} for i = 1, 1e9 do t[i] = tostring(i) .. string.rep('x', 40) end",
    "many_coroutines": "local t = {} for i = 1, 1e9 do t[i] = coroutine.create(print) end",
    "one_huge_rep": "local s = string.rep('x', 2^30)",
    "huge_rep_with_separator": "local s = string.rep('x', 2^28, 'yy')",
    "concat_of_big_parts": (
        "local t = {} for i = 1, 100 do t[i] = string.rep('x', 2^20) end "
        "local all = {} for i = 1, 100 do all[i] = table.concat(t) end"
    ),
    "bomb_in_pcall": (
        "local t = {} pcall(function() for i = 1, 1e9 do t[i] = {} end end) "
        "report('after') return #t"
    ),
    "bomb_in_xpcall": (
        "xpcall(function() local t = {} for i = 1, 1e9 do t[i] = i end end, "
        "function(e) return 'fine' end) report('after')"
    ),
    "bomb_in_coroutine": (
        "local co = coroutine.create(function() local t = {} for i = 1, 1e9 do t[i] = i end end) "
        "local ok, e = coroutine.resume(co) report('after')"
    ),
    "bomb_in_metamethod": (
        "local t = setmetatable({}, {__index = function() local s = 'x' while true do s = s .. s end end}) "
        "local ok = pcall(function() return t.x end) report('after')"
    ),
}


@both_modes
@pytest.mark.parametrize("bomb", sorted(MEMORY_BOMBS))
def test_memory_bombs_trip_and_the_host_survives(jit, bomb):
    with sandbox(jit, SMALL_HEAP) as sb:
        out = sb.run(MEMORY_BOMBS[bomb], CHUNK)
        assert_budget(out, "memory")
        assert "after" not in out.reports
        assert sb.memory_used_bytes <= SMALL_HEAP.max_memory
        # The same sandbox (or its replacement) runs ordinary code again.
        again = sb.run("local t = {} for i = 1, 100000 do t[i] = i end return #t", CHUNK)
        assert again.status == "done" and again.value == 100000


@both_modes
def test_a_heap_kept_full_by_a_global_replaces_the_runtime(jit):
    with sandbox(jit, SMALL_HEAP) as sb:
        out = sb.run(MEMORY_BOMBS["many_closures_global"], CHUNK)
        assert_budget(out, "memory")
        assert sb.replacements == 1
        assert sb.run("return hoard").value is None  # a fresh runtime
        assert sb.memory_used_bytes < SMALL_HEAP.max_memory // 4


@both_modes
def test_repeated_memory_bombs_never_crash(jit):
    with sandbox(jit, SMALL_HEAP) as sb:
        for bomb in ("many_closures_global", "table_growth", "string_doubling_global"):
            for _ in range(3):
                assert sb.run(MEMORY_BOMBS[bomb], CHUNK).budget == "memory"
        assert sb.run("return 'alive'").value == "alive"


@both_modes
def test_returning_a_huge_value_at_the_heap_cap_is_a_clean_outcome(jit):
    # The heap is nearly full when the host starts copying the result out.
    source = """
    local t = {}
    local ok = pcall(function() for i = 1, 1e9 do t[i] = {} end end)
    return t
    """
    out = run(jit, source, SMALL_HEAP)
    assert out.status in ("budget", "error")
    if out.status == "budget":
        assert out.budget == "memory"


# ------------------------------------------------------------------------------------------
# Results: plain data only, copied without running the mod's code
# ------------------------------------------------------------------------------------------


@both_modes
def test_a_cyclic_result_is_refused(jit):
    out = run(jit, "local t = {} t.t = t return t")
    assert out.status == "error" and "cycle" in out.error.message


@both_modes
def test_a_result_nested_1000_levels_is_refused(jit):
    out = run(jit, "local r = {} local t = r for i = 1, 1000 do t.x = {} t = t.x end return r")
    assert out.status == "error" and "deeper" in out.error.message


@both_modes
def test_a_result_larger_than_the_value_limits_is_refused(jit):
    out = run(jit, "local t = {} for i = 1, 200000 do t[i] = i end return t")
    assert out.status == "error" and "too large" in out.error.message


@both_modes
def test_a_result_with_shared_subtables_cannot_explode_the_copy(jit):
    # A DAG with 2^30 paths: the item limit counts visits, so copying it is bounded.
    out = run(jit, "local t = {} for i = 1, 30 do t = {t, t} end return t")
    assert out.status == "error"
    assert "too large" in out.error.message or "deeper" in out.error.message


@both_modes
def test_functions_and_coroutines_in_results_become_placeholders(jit):
    out = run(jit, "return {f = print, co = coroutine.create(print), n = 1, c = 1LL}")
    assert out.status == "done"
    value = out.value
    assert value["n"] == 1
    for key in ("f", "co", "c"):
        assert isinstance(value[key], str) and value[key].startswith("<")


HOSTILE_TABLE = """
local function spin() {body} end
local mt = {{
  __index = spin, __newindex = spin, __pairs = spin, __ipairs = spin, __len = spin,
  __tostring = spin, __eq = spin, __lt = spin, __le = spin, __concat = spin, __call = spin,
  __unm = spin, __add = spin, __metatable = "locked",
}}
local inner = setmetatable({{a = 1}}, mt)
return setmetatable({{1, 2, inner = inner}}, mt)
"""


@both_modes
@pytest.mark.parametrize("body", [LOOP, "error('metamethod ran')"], ids=["loop", "error"])
def test_copying_a_result_runs_none_of_its_metamethods(jit, body):
    out = run(jit, HOSTILE_TABLE.format(body=body))
    assert out.status == "done"
    assert out.value == {1: 1, 2: 2, "inner": {"a": 1}}


@both_modes
@pytest.mark.parametrize("body", [LOOP, "error('metamethod ran')"], ids=["loop", "error"])
def test_copying_a_yielded_value_runs_none_of_its_metamethods(jit, body):
    source = HOSTILE_TABLE.format(body=body).replace(
        "return setmetatable", "coroutine.yield(setmetatable"
    )
    source = source.rstrip() + ")\nreturn 'done'"
    with sandbox(jit) as sb:
        started = sb.start(source, CHUNK)
        out = started.resume()
        assert out.status == "yielded"
        assert out.value == {1: 1, 2: 2, "inner": {"a": 1}}
        assert started.resume().value == "done"


@both_modes
@pytest.mark.parametrize(
    "error_value",
    [
        f"setmetatable({{}}, {{__tostring = function() {LOOP} end}})",
        "setmetatable({}, {__tostring = function() error('ran') end, __index = error})",
        f"setmetatable({{}}, {{__concat = function() {LOOP} end, __eq = function() {LOOP} end}})",
        "coroutine.create(print)",
        "print",
        "1LL",
    ],
    ids=["tostring_loops", "tostring_errors", "concat_eq_loop", "thread", "function", "cdata"],
)
def test_error_objects_become_bounded_messages_without_running_metamethods(jit, error_value):
    out = run(jit, f"local x = 1\nerror({error_value})")
    assert out.status == "error" and out.error.kind == "runtime"
    assert out.error.message.startswith("(error object is a")
    assert len(out.error.message) < 100


@both_modes
def test_error_objects_through_protected_calls_run_no_metamethods(jit):
    source = f"""
    local e = setmetatable({{}}, {{__tostring = function() {LOOP} end, __eq = function() {LOOP} end}})
    local ok, got = pcall(error, e)
    local ok2, got2 = xpcall(error, function(x) return x end, e)
    local ok3, got3 = coroutine.resume(coroutine.create(error), e)
    assert(got == e and got2 == e and got3 == e)
    error(e)
    """
    out = run(jit, source)
    assert out.status == "error"
    assert out.error.message.startswith("(error object is a table")


@both_modes
def test_a_huge_error_message_is_capped(jit):
    out = run(jit, "error(string.rep('x', 2^20))")
    assert out.status == "error"
    assert len(out.error.message) <= 8192


@both_modes
def test_print_of_a_value_with_a_looping_tostring_trips(jit):
    out = run(jit, f"print(setmetatable({{}}, {{__tostring = function() {LOOP} end}}))")
    assert_budget(out, "steps")
    assert out.reports == ()


# ------------------------------------------------------------------------------------------
# Binding misuse
# ------------------------------------------------------------------------------------------


@both_modes
@pytest.mark.parametrize(
    "call, message",
    [
        ('add("1", 2)', "add: argument a: expected a number, got string"),
        ("add({}, 1)", "add: argument a: expected a number, got table"),
        ("add(print, 1)", "add: argument 1: a function cannot cross to the host"),
        ("add(nil)", "add: argument a: missing"),
        ("add()", "add: argument a: missing"),
        ("add(1, 2, 3)", "add: expected at most 2 arguments, got 3"),
        ("add(true, 1)", "add: argument a: expected a number, got boolean"),
        ("add(1LL, 1)", "add: argument 1: a cdata cannot cross to the host"),
        ("add({a = 1, b = 2, c = 3})", "add: argument c: unexpected argument"),
        (
            "add(setmetatable({}, {__index = function() while true do end end}), 1)",
            "add: argument a: expected a number, got table",
        ),
        ("add(big, 1)", "add: argument 1: too large"),
        ("add(cyclic, 1)", "add: argument 1: the table contains itself"),
        ("add(deep, 1)", "add: argument 1: nested deeper"),
    ],
)
def test_binding_misuse_is_one_clean_line_with_position(jit, call, message):
    source = (
        "local big = {} for i = 1, 200000 do big[i] = i end "
        "local cyclic = {} cyclic.me = cyclic "
        "local deep = {} local d = deep for i = 1, 100 do d.x = {} d = d.x end\n"
        f"local result = {call}\n"
        "return result"
    )
    out = run(jit, source, Budget(steps=10**8, wall_s=10))
    assert out.status == "error", out
    err = out.error
    assert err.kind == "runtime"
    assert err.message.startswith(message), err.message
    assert "\n" not in err.message and "Traceback" not in err.message
    assert (err.chunk, err.line) == (CHUNK, 2)
    assert str(err).startswith("mods/attacker/main.lua:2: add: ")


@both_modes
def test_a_binding_error_caught_by_the_mod_is_one_line(jit):
    out = run(jit, "local ok, e = pcall(add, '1', 2) return ok, e")
    ok, message = out.values
    assert ok is False
    assert "add: argument a: expected a number, got string" in message
    assert "\n" not in message and "Traceback" not in message and "pydantic" not in message


@both_modes
def test_a_huge_report_is_capped(jit):
    out = run(jit, "report(string.rep('x', 10^6)) report('small')")
    assert out.status == "done"
    assert len(out.reports) == 2
    assert 0 < len(out.reports[0]) <= 4096
    assert out.reports[1] == "small"


@both_modes
def test_many_reports_are_capped_in_count(jit):
    out = run(jit, "for i = 1, 5000 do report('line ' .. i) end return 'done'")
    assert out.status == "done" and out.value == "done"
    assert 0 < len(out.reports) <= 1001  # and the last says the rest were dropped
    assert out.reports[-1].startswith("[moonbox: the report limit")
    assert out.reports[0] == "line 1"


@both_modes
def test_many_huge_reports_are_capped_in_total_size(jit):
    out = run(jit, "local s = string.rep('y', 4096) for i = 1, 5000 do report(s) end")
    assert out.status == "done"
    assert sum(len(r) for r in out.reports) <= 1 << 20


@both_modes
def test_report_of_hostile_tables_runs_no_metamethods(jit):
    source = HOSTILE_TABLE.format(body=LOOP).replace("return setmetatable", "report(setmetatable")
    source = source.rstrip() + ")"
    out = run(jit, source)
    assert out.status == "done"
    assert len(out.reports) == 1 and len(out.reports[0]) <= 4096


# ------------------------------------------------------------------------------------------
# Runs of one sandbox, and host-side robustness
# ------------------------------------------------------------------------------------------


@both_modes
def test_a_run_cannot_resume_another_runs_coroutine(jit):
    with sandbox(jit) as sb:
        waiting = sb.start(
            "main_of_first = coroutine.running() local got = coroutine.yield('waiting') "
            "report('first got ' .. tostring(got)) return got",
            "@mods/attacker/first.lua",
        )
        assert waiting.resume().status == "yielded"
        # The run's own coroutine is the host's: coroutine.running() gives nil, as in the
        # main thread of Lua 5.1, so there is nothing to resume.
        hijack = sb.run("return coroutine.resume(main_of_first, 'forged')", CHUNK)
        assert hijack.status == "error" and "coroutine expected" in hijack.error.message
        assert hijack.reports == ()
        final = waiting.resume("real")
        assert final.status == "done" and final.value == "real"


@both_modes
def test_source_with_a_lone_surrogate_is_an_outcome_not_an_exception(jit):
    with sandbox(jit) as sb:
        out = sb.run("return 1 -- broken emoji \ud83d", CHUNK)
    assert out.status in ("done", "error")
    if out.status == "error":
        assert out.error.kind == "syntax"


@both_modes
@pytest.mark.parametrize(
    "source",
    ["\x00", "return '\x00'", "\ufeff", "#!", "#!/bin/sh\n", "return [==[", "--[[", "'", "\\"],
    ids=[
        "nul",
        "nul_in_string",
        "bom_only",
        "shebang_only",
        "shebang_line",
        "open_long_string",
        "open_comment",
        "open_quote",
        "backslash",
    ],
)
def test_odd_source_text_is_an_outcome_not_an_exception(jit, source):
    with sandbox(jit) as sb:
        out = sb.run(source, CHUNK)
        assert out.status in ("done", "error")
        if out.status == "error":
            assert out.error.kind == "syntax"
        assert sb.run("return 'alive'").value == "alive"
