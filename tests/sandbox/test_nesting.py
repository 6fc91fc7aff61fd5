"""Calls nested through C share one bounded depth: a clean error, never a host crash.

Unguarded, each of these crashed the whole process (LuaJIT does not check C-stack depth on
these paths): a recursive gsub callback, a gsub table replacement whose __index recurses,
nested coroutine resumes, nested coroutine.wrap calls. Sorts, __tostring and string.format's
%s now call back from Lua, where the Lua stack bounds them; they stay here as the programs
that once crashed.
"""

from __future__ import annotations

import pytest

from moonbox import Budget, Sandbox

CRASHERS = {
    "gsub_callback": "local function f(n) return (string.gsub('a', 'a', function() return f(n + 1) end)) end\nf(1)",
    "gsub_method": "local function f(n) return (('a'):gsub('a', function() return f(n + 1) end)) end\nf(1)",
    "gsub_table": "local mt = {}\nmt.__index = function(t, k) return (string.gsub('a', '(a)', setmetatable({}, mt))) end\nstring.gsub('a', '(a)', setmetatable({}, mt))",
    "resume": "local function f(n)\n  local co = coroutine.create(function() f(n + 1) end)\n  local ok, e = coroutine.resume(co)\n  if not ok then error(e, 0) end\nend\nf(1)",
    "wrap": "local function f(n) coroutine.wrap(function() f(n + 1) end)() end\nf(1)",
    "sort": "local function f(n) table.sort({2, 1}, function(a, b) f(n + 1) return a < b end) end\nf(1)",
    "tostring": "local mt = {}\nmt.__tostring = function() return tostring(setmetatable({}, mt)) end\nreturn tostring(setmetatable({}, mt))",
    "format": "local mt = {}\nmt.__tostring = function() return string.format('%s', setmetatable({}, mt)) end\nreturn string.format('%s', setmetatable({}, mt))",
}


@pytest.mark.parametrize("name", sorted(CRASHERS))
def test_deep_nesting_through_c_is_a_clean_error(name, jit):
    with Sandbox(Budget(steps=10**9, wall_s=10), jit=jit) as sb:
        out = sb.run(CRASHERS[name], f"@{name}.lua")
        if name == "tostring":
            # tostring calls __tostring from Lua, as a tail call (LuaJIT returns all its
            # results): this chain of tail calls never grows a stack, so it is an endless
            # loop, which a budget stops.
            assert out.status == "budget"
            assert sb.run("return 'alive'").value == "alive"
            return
        assert out.status == "error" and out.error.kind == "runtime"
        assert "nested too deeply" in out.error.message or "stack overflow" in out.error.message
        assert out.error.chunk == f"@{name}.lua"
        if name not in ("tostring", "format"):  # there every mod frame is a tail call
            assert out.error.line is not None
        assert sb.run("return 'alive'").value == "alive"


def test_the_depth_is_catchable_and_restored_by_pcall(jit):
    src = """
    local function f(n) return (string.gsub('a', 'a', function() return f(n + 1) end)) end
    local results = {}
    for i = 1, 3 do results[i] = pcall(f, 1) end
    -- after each caught error the depth is back to zero: ordinary nesting still works
    local ok = pcall(function() return (string.gsub('a', 'a', function() return 'b' end)) end)
    return results[1], results[2], results[3], ok
    """
    with Sandbox(jit=jit) as sb:
        assert sb.run(src).values == (False, False, False, True)


def test_moderate_nesting_is_fine(jit):
    src = """
    local function f(n)
      if n == 0 then return 'x' end
      return (string.gsub('a', 'a', function() return f(n - 1) end))
    end
    local co_depth = 0
    local function g(n)
      if n == 0 then return end
      co_depth = co_depth + 1
      coroutine.wrap(function() g(n - 1) end)()
    end
    g(150)
    return f(150), co_depth
    """
    with Sandbox(jit=jit) as sb:
        assert sb.run(src).values == ("x", 150)
