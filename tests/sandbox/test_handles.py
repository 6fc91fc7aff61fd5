"""Callbacks: a mod's functions as opaque handles the host runs later as budgeted runs."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from moonbox import Budget, ConfigError, Sandbox, SandboxClosed
from moonbox.bindings import Binding, LuaFunction, Permissions, Registry, render_stubs
from moonbox.sandbox import FunctionHandle


class OnArgs(BaseModel):
    event: str
    fn: LuaFunction


class PlainArgs(BaseModel):
    value: object = None


@pytest.fixture
def handlers():
    return {}


@pytest.fixture
def sandbox(jit, handlers):
    def on(call, args):
        handlers.setdefault(args.event, []).append(args.fn)

    with Sandbox(Budget(steps=100_000, wall_s=5), jit=jit, host_functions=[
        Binding("on", OnArgs, on),
        Binding("keep", PlainArgs, lambda call, args: None),
    ]) as sb:
        yield sb


MOD = """\
local count = 0
on("tick", function(dt)
  count = count + dt
  return count
end)
local function greet(name, punct)
  return "hello " .. name .. punct, select("#", name, punct)
end
on("greet", greet)
"""


def test_a_mods_function_arrives_as_a_handle_and_runs_as_a_budgeted_run(sandbox, handlers):
    assert sandbox.run(MOD, "@mods/m/main.lua").ok
    (tick,) = handlers["tick"]
    assert isinstance(tick, FunctionHandle)
    assert tick.where == "mods/m/main.lua:2" and tick.valid and tick.sandbox is sandbox
    assert sandbox.run(tick, args=(2,)).value == 2
    out = sandbox.run(tick, args=(3,))
    assert out.value == 5  # the closure keeps its state between runs
    if sandbox.jit:  # the count hook of jit=False counts in blocks of instructions
        assert out.stats.steps >= 1
    (greet,) = handlers["greet"]
    assert greet.where == "mods/m/main.lua:6"
    assert sandbox.run(greet, args=("ada", "!")).values == ("hello ada!", 2)


def test_a_handle_run_yields_and_resumes_with_a_fresh_budget(sandbox, handlers):
    sandbox.run("on('job', function() local n = 0 "
                "for i = 1, 3 do n = n + coroutine.yield(i) end return n end)")
    run = sandbox.start(handlers["job"][0])
    assert run.resume().values == (1,)
    assert run.resume(10).values == (2,)
    assert run.resume(20).values == (3,)
    out = run.resume(30)
    assert out.status == "done" and out.value == 60


def test_errors_and_trips_in_a_handle_run_carry_the_mods_position(sandbox, handlers):
    sandbox.run("on('bad', function()\n  error('boom')\nend)\n"
                "on('spin', function()\n  while true do end\nend)", "@mods/m/main.lua")
    out = sandbox.run(handlers["bad"][0])
    assert out.status == "error"
    assert (out.error.chunk, out.error.line, out.error.message) == ("@mods/m/main.lua", 2, "boom")
    out = sandbox.run(handlers["spin"][0])
    assert out.status == "budget" and out.error.budget == "steps"
    assert out.error.chunk == "@mods/m/main.lua" and out.error.line == 5
    # The sandbox goes on: the next handler call has its own budget.
    assert sandbox.run(handlers["bad"][0]).status == "error"


@pytest.mark.parametrize("passed", [
    "tostring", "pcall", "string.rep", "coroutine.wrap(function() end)", "math.floor",
])
def test_only_functions_defined_by_the_mod_become_handles(sandbox, handlers, passed):
    out = sandbox.run(f"on('x', {passed})")
    assert out.status == "error"
    assert out.error.message == "on: argument 2: only a function defined by the mod can be passed"
    assert handlers == {}


def test_functions_stay_refused_where_the_binding_does_not_take_them(sandbox):
    out = sandbox.run("keep(function() end)")
    assert out.error.message == "keep: argument 1: a function cannot cross to the host"
    out = sandbox.run("on{event = 'x', fn = function() end}")
    assert out.status == "error" and out.error.message.startswith("on: argument 1:")
    assert "function" in out.error.message


def test_a_non_function_where_a_function_is_expected_is_one_line(sandbox):
    out = sandbox.run("on('tick', 42)")
    assert out.error.message == "on: argument fn: expected a function, got number"
    out = sandbox.run("on('tick')")
    assert out.error.message == "on: argument fn: missing"


def test_released_and_foreign_handles_cannot_run(sandbox, handlers, jit):
    sandbox.run(MOD)
    tick = handlers["tick"][0]
    tick.release()
    tick.release()
    assert not tick.valid and "invalid" in repr(tick)
    with pytest.raises(SandboxClosed, match="released"):
        sandbox.start(tick)
    greet = handlers["greet"][0]
    with Sandbox(jit=jit) as other, pytest.raises(ConfigError, match="another sandbox"):
        other.start(greet)


def test_handles_die_with_their_runtime(sandbox, handlers):
    sandbox.run(MOD)
    tick = handlers["tick"][0]
    sandbox.reset()
    assert not tick.valid
    with pytest.raises(SandboxClosed):
        sandbox.start(tick)
    sandbox.close()
    with pytest.raises(SandboxClosed):
        sandbox.start(handlers["greet"][0])


def test_a_handle_from_a_run_that_ended_on_a_trip_still_works(sandbox, handlers):
    out = sandbox.run("on('later', function() return 'ran' end) while true do end")
    assert out.status == "budget"
    assert sandbox.run(handlers["later"][0]).value == "ran"


def test_registry_bindings_take_callbacks_and_stubs_type_them(jit):
    registry = Registry()
    got = []
    registry.register(Binding("on", OnArgs, lambda call, args: got.append(args.fn),
                              description="Call fn on each event."))
    with registry.mod("m", Permissions(mode="full")).sandbox(jit=jit) as sb:
        assert sb.run("on('tick', function() return 7 end)").ok
        assert sb.run(got[0]).value == 7
    stubs = render_stubs(registry, Permissions(mode="full"))
    assert "---@param fn function" in stubs
    registry.close()
