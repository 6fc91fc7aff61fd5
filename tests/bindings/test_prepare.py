"""A binding's prepare step: it binds the concrete target before approval, or refuses;
the approver and hooks see what it bound; the binding gets it and checks it again."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from moonbox import Budget
from moonbox.bindings import (
    Answer,
    Binding,
    Hook,
    LuaNumber,
    Permissions,
    Refusal,
    Registry,
)


class DestroyArgs(BaseModel):
    name: str


class World:
    """A few named entities, by id."""

    def __init__(self) -> None:
        self.ids = {"orc": 1, "elf": 2}
        self.destroyed: list[int] = []


def destroy_binding(world: World, steps: list[str]) -> Binding:
    def prepare(call, args):
        steps.append("prepare")
        entity = world.ids.get(args.name)
        if entity is None:
            return Refusal(f"no entity named {args.name!r}")
        return entity

    def destroy(call, args, entity):
        steps.append(f"run {entity}")
        if entity not in world.ids.values():  # the world changed since it was prepared
            from moonbox import BindingError
            raise BindingError(f"entity {entity} is gone [world:gone]", reason="world:gone")
        world.destroyed.append(entity)
        del world.ids[args.name]
        return entity

    return Binding("destroy", DestroyArgs, destroy, prepare=prepare, risk="danger")


def test_prepare_binds_the_target_the_approver_hooks_and_binding_all_see(jit):
    world, steps = World(), []
    registry = Registry([destroy_binding(world, steps)])
    infos = []
    registry.add_hook(Hook("audit", pre_call=lambda info: infos.append(info)
                           or steps.append("hook")))

    def approve(request):
        steps.append(f"ask {request.prepared}")
        return True

    api = registry.mod("m", Permissions(mode="auto"), approve=approve)
    with api.sandbox(jit=jit) as sb:
        assert sb.run("return destroy('orc')").value == 1
    assert steps == ["prepare", "ask 1", "hook", "run 1"]
    assert infos[0].prepared == 1 and infos[0].call_id > 0
    assert world.destroyed == [1]
    registry.close()


def test_a_refusal_ends_the_call_before_anyone_is_asked(jit):
    world, steps = World(), []
    registry = Registry([destroy_binding(world, steps)])
    asked = []
    api = registry.mod("m", Permissions(mode="auto"), approve=lambda r: asked.append(r) or True)
    with api.sandbox(jit=jit) as sb:
        out = sb.run("return destroy('troll')")
    assert out.status == "error" and out.error.kind == "runtime"
    assert out.error.message == "destroy: no entity named 'troll' [refused]"
    assert steps == ["prepare"] and asked == []
    registry.close()


def test_a_refusal_may_carry_a_code_of_the_hosts():
    class Args(BaseModel):
        x: LuaNumber

    registry = Registry([Binding(
        "dig", Args, lambda c, a, p: p, risk="write",
        prepare=lambda c, a: Refusal("bedrock  below", code="terrain:bedrock") if a.x < 0 else a.x,
    )])
    with registry.mod("m").sandbox() as sb:
        assert sb.run("return dig(2)").value == 2
        out = sb.run("return dig(-1)")
    assert out.error.message == "dig: bedrock below [terrain:bedrock]"
    registry.close()


@pytest.mark.parametrize("code", ["refused", "timed_out", "Terrain:x", "a:", ":b", "a:b:c",
                                  "x" * 33 + ":y"])
def test_a_refusal_code_must_be_a_hosts_own(code):
    with pytest.raises(ValueError, match="namespace:name"):
        Refusal("no", code=code)


def test_a_refusal_needs_a_reason():
    with pytest.raises(ValueError, match="reason"):
        Refusal("  ")


def test_the_binding_checks_again_what_changed_while_the_approval_was_pending():
    world, steps = World(), []
    registry = Registry([destroy_binding(world, steps)])

    def approve(request):
        # While the question is open the game moves on: the orc is destroyed by others.
        del world.ids["orc"]
        return Answer.ALLOW

    api = registry.mod("m", Permissions(mode="auto"), approve=approve)
    with api.sandbox(Budget(wall_s=30)) as sb:
        out = sb.run("return destroy('orc')")
    assert out.error.message == "destroy: entity 1 is gone [world:gone]"
    assert world.destroyed == []
    registry.close()


def test_an_unpacking_binding_prepares_with_its_fields_and_never_takes_the_lane():
    class Args(BaseModel):
        a: LuaNumber
        b: LuaNumber

    seen = []
    binding = Binding("div", Args, lambda c, a, b, q: seen.append(q) or q, unpack=True,
                      risk="read",
                      prepare=lambda c, a, b: Refusal("division by zero") if b == 0 else a / b)
    registry = Registry([binding])
    api = registry.mod("m")
    (function,) = [f for f in api.host_functions if f.name == "div"]
    assert function.lane is None
    with api.sandbox() as sb:
        assert sb.run("return div(6, 3)").value == 2
        assert sb.run("return div(1, 0)").error.message == "div: division by zero [refused]"
    assert seen == [2]
    registry.close()


def test_a_binding_used_on_its_own_prepares_too():
    world, steps = World(), []
    binding = destroy_binding(world, steps)
    assert binding(None, ("elf",)) == (2,)  # type: ignore[arg-type]
    assert steps == ["prepare", "run 2"]


def test_prepare_must_be_a_function():
    with pytest.raises(ValueError, match="prepare"):
        Binding("x", DestroyArgs, lambda c, a: None, prepare="no")  # type: ignore[arg-type]
