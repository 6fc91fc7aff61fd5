"""Host functions bound to the compiled crossing (a C closure per function, no Lua closure
of the prelude's around it) against the prelude's closures: hostile calls give the same
outcomes, positions and reports either way."""

from __future__ import annotations

import pytest

import moonbox
from moonbox import Budget, Sandbox
from moonbox.sandbox import _sandbox
from moonbox.sandbox._runtime import compiled_resume

pytestmark = pytest.mark.skipif(not compiled_resume(), reason="the compiled crossing is not built")

CALLS = {
    "plain": "report('a') return 1",
    "flat_table": "return coreai_world_spawn({prefab = 'cube', name = 'a'})",
    "nested_table": "return pcall(coreai_world_spawn, {prefab = 'cube', name = {1}})",
    "bad_type": "return pcall(coreai_world_pos, {})",
    "no_args": "return pcall(coreai_world_pos)",
    "many_args": "return pcall(report, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, "
                 "17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36)",
    "error_position": "local ok, e = pcall(coreai_world_pos, 1) return ok, e",
    "unprotected_error": "coreai_world_pos(1)",
    "in_coroutine": "local co = coroutine.create(report) return coroutine.resume(co, 'x')",
    "wrapped": "return coroutine.wrap(report)('w')",
    "tostring": "return tostring(report):match('0x') == nil",
    "as_key": "local t = {[report] = 1} return t[report]",
    "loop_trip": "while true do report('x') end",
    "memory": "local t = {} for i = 1, 1e9 do t[i] = ('x'):rep(100) .. i "
              "coreai_world_pos('e') end",
    "string_arg": "return pcall(coreai_world_pos, ('x'):rep(100000))",
    "returns_table": "return type(coreai_world_query and coreai_world_query({}) or {})",
    "select": "return select('#', report('s'))",
    "xpcall": "return xpcall(coreai_world_pos, function(e) return 'handled: ' .. e end, 1)",
}


def outcome(source: str, bound: bool, jit: bool, monkeypatch) -> tuple:
    monkeypatch.setattr(_sandbox, "BOUND_HOST_FUNCTIONS", bound)
    with Sandbox(Budget(steps=100_000, alloc_bytes="4MB", wall_s=5.0), jit=jit,
                 host_functions=moonbox.default_bindings()) as sb:
        out = sb.run(source, "=call")
        error = out.error
        return (out.status, out.values, out.reports,
                None if error is None else (type(error).__name__, str(error), error.line,
                                            getattr(error, "budget", None)))


@pytest.mark.parametrize("jit", [True, False], ids=["jit", "hook"])
@pytest.mark.parametrize("name", sorted(CALLS))
def test_bound_host_functions_are_the_preludes(name, jit, monkeypatch):
    bound = outcome(CALLS[name], True, jit, monkeypatch)
    prelude = outcome(CALLS[name], False, jit, monkeypatch)
    if not jit and bound[3] is not None and bound[3][3] is not None:
        # Under the count hook, where a trip lands counts the host's own instructions.
        assert bound[0] == prelude[0] and bound[3][3] == prelude[3][3]
        return
    assert bound == prelude


def what(sb: Sandbox) -> str:
    """What LuaJIT says the mod's `report` is: "C" (bound) or "Lua" (a closure)."""
    # string.dump dumps a Lua function's bytecode, and refuses a C function.
    ok = sb._rt.execute("return (pcall(string.dump, ...))", sb._env[b"report"])
    return "Lua" if ok else "C"


def test_host_functions_are_bound_where_they_can_be():
    with Sandbox(host_functions=moonbox.default_bindings()) as sb:
        assert what(sb) == "C"


def test_a_preemptible_sandbox_keeps_the_preludes_closures():
    # A slice's end yields from the prelude's way of a call (its charge), which cannot
    # yield under a C function: there the closures stay.
    with Sandbox(Budget(steps=10_000), preempt=True,
                 host_functions=moonbox.default_bindings()) as sb:
        assert what(sb) == "Lua"


def test_a_call_with_as_many_arguments_as_a_stack_holds_fails(monkeypatch):
    # Near LuaJIT's limit of a C function's stack (8,000 slots), the bound function has no
    # room for what it adds: the call fails, it never answers as if it had been made.
    with Sandbox(Budget(steps=10**7), host_functions=moonbox.default_bindings()) as sb:
        for n in range(7990, 8001):
            out = sb.run("local t = {} for i = 1, ... do t[i] = i end "
                         "return pcall(report, unpack(t))", "=call", args=(n,))
            assert out.status == "error" or out.values[0] is False, (n, out)
            assert not out.reports
