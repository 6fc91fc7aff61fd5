"""The default bindings report and add, and Binding's argument mapping."""

from __future__ import annotations

import logging

import pytest
from pydantic import BaseModel

import moonbox
from moonbox import Binding, Sandbox
from moonbox.bindings import LuaNumber


@pytest.fixture
def sb(jit):
    with Sandbox(jit=jit, host_functions=moonbox.default_bindings()) as s:
        yield s


def test_add_numbers(sb):
    assert sb.run("return add(1, 2), add(0.5, 0.25), add{a = 1, b = 2}").values == (3, 0.75, 3)


@pytest.mark.parametrize(
    "call, message",
    [
        ('add("1", 2)', "add: argument a: expected a number, got string"),
        ("add(1, {})", "add: argument b: expected a number, got table"),
        ("add(1, true)", "add: argument b: expected a number, got boolean"),
        ("add(1)", "add: argument b: missing"),
        ("add()", "add: argument a: missing"),
        ("add(1, 2, 3)", "add: expected at most 2 arguments, got 3"),
        ("add(print, 1)", "add: argument 1: a function cannot cross to the host"),
        ("add{a = 1, c = 2}", "add: argument c: unexpected argument"),
    ],
)
def test_add_errors_are_one_line_with_position(sb, call, message):
    out = sb.run(f"\nlocal x = {call}", "@mods/m.lua")
    assert out.status == "error" and out.error.kind == "runtime"
    assert out.error.message == message
    assert (out.error.chunk, out.error.line) == ("@mods/m.lua", 2)


def test_binding_errors_are_catchable_by_the_mod(sb):
    out = sb.run("local ok, e = pcall(add, 'x', 1) return ok, e", "@m.lua")
    assert out.values == (False, "m.lua:1: add: argument a: expected a number, got string")


def test_host_bug_is_one_neutral_line_and_logged(caplog):
    class Args(BaseModel):
        x: LuaNumber

    def broken(call, args):
        raise RuntimeError("secret host detail")

    b = Binding("broken", Args, broken)
    with caplog.at_level(logging.ERROR), Sandbox(host_functions=[b]) as sb:
        out = sb.run("broken(1)", "@m.lua")
    assert out.error.message == "broken: the host failed to handle this call (a host bug, logged)"
    assert "secret" not in str(out.error)
    assert "secret host detail" in caplog.text


def test_binding_cost_is_charged_to_the_budget():
    class Args(BaseModel):
        pass

    pricey = Binding("pricey", Args, lambda call, a: None, cost=1000)
    with Sandbox(moonbox.Budget(steps=5000), host_functions=[pricey]) as sb:
        out = sb.run("for i = 1, 10 do pricey() end")
    assert out.budget == "steps"


def test_binding_returns_several_values_and_tables():
    class Args(BaseModel):
        pass

    b = Binding("pos", Args, lambda call, a: (1.5, 2, {"tag": ["a", "b"]}))
    with Sandbox(host_functions=[b]) as sb:
        assert sb.run("return pos()").values == (1.5, 2, {"tag": ["a", "b"]})


def test_binding_names_are_validated():
    class Args(BaseModel):
        pass

    for bad in ("", "has space", "x" * 65, "1abc"):
        with pytest.raises(ValueError):
            Binding(bad, Args, lambda c, a: None)
    with pytest.raises(moonbox.ConfigError):
        Sandbox(host_functions=[moonbox.bindings.add, moonbox.bindings.add])


def test_a_denial_that_ends_the_run_has_kind_denied():
    class Args(BaseModel):
        pass

    def refuse(call, args):
        raise moonbox.BindingError("not allowed for this mod", reason="denied")

    b = Binding("nuke", Args, refuse, risk="danger")
    with Sandbox(host_functions=[b]) as sb:
        out = sb.run("\nnuke()", "@m.lua")
        assert out.error.kind == "denied" and out.error.line == 2
        assert out.error.message == "nuke: not allowed for this mod"
        # Caught by the mod and replaced by its own error: an ordinary runtime error.
        out = sb.run("pcall(nuke) error('mine')", "@m.lua")
        assert out.error.kind == "runtime"
