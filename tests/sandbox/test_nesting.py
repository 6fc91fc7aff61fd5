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


# The counted coroutines' fast paths (protected.lua): a resume with one argument or none,
# and a coroutine.wrap call with one or none, give their level back on every way out (a
# yield, an end, an error), so many of them in a row leave the bound where it was; and
# they still stop at it.
def test_the_fast_resumes_give_their_level_back_on_every_way_out(jit):
    src = """
    local function ways()
      local co = coroutine.create(function(x) coroutine.yield(x) coroutine.yield() error('e') end)
      assert(coroutine.resume(co, 1)) assert(coroutine.resume(co)) assert(not coroutine.resume(co))
      assert(not coroutine.resume(co))  -- dead
      local f = coroutine.wrap(function(x) coroutine.yield(x) return 1, 2, 3 end)
      f(1) f()
      assert(not pcall(f))  -- dead
      local g = coroutine.wrap(function() error({}) end)
      assert(not pcall(g, 1))
    end
    for _ = 1, 1000 do ways() end
    local depth = 0
    local function nest(n)
      if n == 0 then return end
      depth = depth + 1
      local co = coroutine.create(function(k) nest(k) end)
      local ok, e = coroutine.resume(co, n - 1)
      if not ok then error(e, 0) end
    end
    nest(150)
    local reached = depth
    depth = 0
    local ok, e = pcall(nest, 400)
    return reached, ok, e
    """
    with Sandbox(Budget(steps=10**9, wall_s=20), jit=jit) as sb:
        out = sb.run(src, "@fast.lua")
        assert out.status == "done", out
        reached, ok, err = out.values
        assert reached == 150 and ok is False
        assert "nested too deeply" in err or "stack overflow" in err


def test_a_trip_inside_a_fast_resume_is_raised_again_in_its_resumer(jit):
    # The loop trips inside the coroutine: neither the resume nor the wrap call returns to
    # the mod, whichever fast path it took.
    for call in ("coroutine.resume(co)", "coroutine.resume(co, 1)", "w()", "w(1)"):
        src = f"""
        local co = coroutine.create(function() while true do end end)
        local w = coroutine.wrap(function() while true do end end)
        local ok = pcall(function() return {call} end)
        report('returned')
        """
        with Sandbox(Budget(steps=100_000, wall_s=20), jit=jit) as sb:
            out = sb.run(src, "@trip.lua")
            assert out.status == "budget" and out.error.budget == "steps", (call, out)
            assert out.reports == (), call
