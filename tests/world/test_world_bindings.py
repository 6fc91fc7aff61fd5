"""The coreai_world_* bindings as a mod calls them: valid and hostile arguments."""

from __future__ import annotations

import math

import pytest

from moonbox import Sandbox
from moonbox.bindings import Permissions, Registry
from moonbox.world import WORLD_BINDINGS, World, world_bindings


def run(sb, source: str):
    return sb.run(source, "@mods/m/main.lua")


def test_the_binding_names(world):
    assert tuple(sorted(b.name for b in world_bindings(world))) == WORLD_BINDINGS
    risks = {b.name: b.risk for b in world_bindings(world)}
    assert {n for n, r in risks.items() if r == "read"} == {
        "coreai_world_exists", "coreai_world_pos", "coreai_world_get", "coreai_world_find",
        "coreai_world_list_prefabs", "coreai_world_raycast"}
    assert risks["coreai_world_destroy"] == "write"
    assert {b.group for b in world_bindings(world)} == {"world"}


def test_writes_queue_and_return_ids(world, mod_sandbox):
    sb = mod_sandbox()
    out = run(sb, """
        local name, id = coreai_world_spawn{prefab = "cube", name = "a", x = 1}
        local auto = coreai_world_spawn("sphere")
        local seen = coreai_world_exists("a")
        local cid = coreai_world_change("a", {x = 2, z = 3})
        local names = coreai_world_spawn_batch({{prefab = "cube"}, {prefab = "cube", name = "b"}})
        return name, id, auto, seen, cid, names
    """)
    assert out.status == "done", out.error
    assert out.values == ("a", 1, "sphere#1", False, 3, ["cube#2", "b"])
    results = world.apply()
    assert all(r.applied for r in results) and all(r.mod == "m" for r in results)
    assert world.position("a") == (2, 0, 3)


@pytest.mark.parametrize(("call", "message"), [
    ('coreai_world_spawn{prefab = 3}', "argument prefab: expected a string, got number"),
    ('coreai_world_spawn{}', "argument prefab: missing"),
    ('coreai_world_spawn{prefab = "cube", x = "1"}', "argument x: expected a number"),
    ('coreai_world_spawn{prefab = "cube", x = true}', "argument x: expected a number"),
    ('coreai_world_spawn{prefab = "cube", color = 1}', "argument color: unexpected argument"),
    ('coreai_world_spawn{prefab = "cube", name = string.rep("x", 300)}', "argument name"),
    ('coreai_world_spawn{prefab = "cube", properties = {a = {}}}', "argument properties.a"),
    ('coreai_world_spawn{prefab = "cube", x = print}', "a function cannot cross"),
    ('coreai_world_change("a")', "argument fields: missing"),
    ('coreai_world_change("a", {colour = 1})', "argument fields.colour: unexpected argument"),
    ('coreai_world_change("a", {x = "far"})', "argument fields.x"),
    ('coreai_world_set_color("a", 1, 0)', "argument b: missing"),
    ('coreai_world_destroy()', "argument name: missing"),
    ('coreai_world_destroy({})', "argument name: missing"),
    ('local t = {} for i = 1, 101 do t[i] = {prefab = "cube"} end coreai_world_spawn_batch(t)',
     "argument items"),
    ('coreai_world_grid{prefab = "cube", name = "g", nx = 20, nz = 20}', "at most 100"),
    ('coreai_world_grid{prefab = "cube", name = "g", nx = 1.5}', "argument nx"),
    ('coreai_world_find(nil)', "argument text: missing"),
    ('coreai_world_find("a", 500)', "argument limit"),
    ('coreai_world_raycast{x = 0, y = 0, z = 0, dx = 0/0, dy = 0, dz = 1}', "argument dx"),
    ('coreai_world_raycast{x = 1/0, y = 0, z = 0, dx = 1, dy = 0, dz = 0}', "argument x"),
    ('coreai_world_raycast{x = 0, y = 0, z = 0, dx = 0, dy = 0, dz = 0}', "non-zero"),
    ('coreai_world_pos({})', "argument name: missing"),
    # The reads run on a lane (unpacked arguments): whatever it declines fails as before.
    ('coreai_world_pos(3)', "argument name: expected a string, got number"),
    ('coreai_world_pos(true)', "argument name: expected a string, got boolean"),
    ('coreai_world_pos(0/0)', "argument name: expected a string, got number"),
    ('coreai_world_pos("a", "b")', "expected at most 1 argument, got 2"),
    ('coreai_world_exists(string.rep("x", 300))', "argument name"),
    ('coreai_world_get(print)', "a function cannot cross"),
    ('coreai_world_find("a", 1.5)', "argument limit"),
    ('coreai_world_find("a", true)', "argument limit"),
    ('coreai_world_find("a", 0)', "argument limit"),
    ('local t = {} t.t = t coreai_world_spawn(t)', "cycle"),
])
def test_wrong_types_fail_the_call_with_one_line(world, mod_sandbox, call, message):
    out = run(mod_sandbox(), call)
    assert out.status == "error"
    assert message in out.error.message, out.error.message
    assert "Traceback" not in out.error.message and out.error.line == 1
    assert world.pending == ()


def test_values_are_checked_when_applied_not_when_issued(world, mod_sandbox):
    out = run(mod_sandbox(), """
        return coreai_world_spawn{prefab = "cube", name = "n", x = 0/0},
               coreai_world_spawn{prefab = "cube", name = "i", y = math.huge},
               coreai_world_spawn{prefab = "cube", name = "h", z = 1e308},
               coreai_world_spawn{prefab = "dragon", name = "d"}
    """)
    assert out.status == "done"
    assert [r.reason for r in world.apply()] == [
        "not_finite", "not_finite", "out_of_bounds", "unknown_prefab"]


def test_non_finite_properties_from_a_mod_are_refused_when_applied(world, mod_sandbox):
    out = run(mod_sandbox(), """
        coreai_world_spawn{prefab = "pickup", name = "p1", properties = {value = 0/0}}
        coreai_world_spawn{prefab = "light", name = "l1", properties = {intensity = math.huge}}
        coreai_world_spawn{prefab = "pickup", name = "p2", properties = {value = -(0/0)}}
        coreai_world_spawn{prefab = "pickup", name = "p3", properties = {value = -0.0}}
    """)
    assert out.status == "done", out.error
    assert [r.reason for r in world.apply()] == ["not_finite"] * 3 + [None]
    assert [e.name for e in world.entities()] == ["p3"]
    assert math.copysign(1.0, world.get("p3").properties["value"]) == 1.0


@pytest.mark.parametrize(("dx", "dy", "dz"), [
    (1, 0, 0), (4, 0, 0), (1e-3, 0, 0), (1e300, 0, 0), (3, 4, 0), (0.3, 0.4, 0), (1, 1, 1),
])
def test_a_raycast_hit_point_is_on_the_entity_whatever_the_direction_length(
        world, mod_sandbox, dx, dy, dz):
    # The distance is along the unit direction; the point once used the raw one.
    length = math.hypot(dx, dy, dz)
    ux, uy, uz = dx / length, dy / length, dz / length
    world.submit("spawn", {"prefab": "sphere", "name": "ball",
                           "x": 10 * ux, "y": 10 * uy, "z": 10 * uz}, None)
    world.apply()
    out = run(mod_sandbox(), f"""
        local hit = coreai_world_raycast{{x = 0, y = 0, z = 0, dx = {dx!r}, dy = {dy!r},
                                         dz = {dz!r}}}
        return hit.name, hit.distance, hit.x, hit.y, hit.z
    """)
    assert out.status == "done", out.error
    name, distance, x, y, z = out.values
    assert name == "ball" and distance == pytest.approx(9.5)
    assert (x, y, z) == pytest.approx((9.5 * ux, 9.5 * uy, 9.5 * uz), abs=1e-9)


def test_reads_see_applied_state(world, mod_sandbox):
    world.submit("spawn", {"prefab": "cube", "name": "Crate-A", "x": 5}, None)
    world.submit("spawn", {"prefab": "cube", "name": "crate-b", "x": 9, "parent": "Crate-A"},
                 None)
    world.submit("spawn", {"prefab": "light", "name": "lamp"}, None)
    world.apply()
    out = run(mod_sandbox(), """
        local x, y, z = coreai_world_pos("Crate-A")
        local gone = coreai_world_pos("ghost")
        local e = coreai_world_get("crate-b")
        local hit = coreai_world_raycast{x = -10, y = 0, z = 0, dx = 1, dy = 0, dz = 0}
        local miss = coreai_world_raycast{x = -10, y = 5, z = 0, dx = 1, dy = 0, dz = 0}
        local far = coreai_world_raycast{x = -10, y = 0, z = 0, dx = 1, dy = 0, dz = 0,
                                         max_distance = 5}
        return {x, y, z}, gone, e.parent, e.owner, coreai_world_find("CRATE"),
               coreai_world_find("crate", 1), coreai_world_find("zzz"), hit.name, hit.distance,
               miss, far, coreai_world_exists("lamp"), coreai_world_get("ghost") == nil
    """)
    assert out.status == "done", out.error
    (pos, gone, parent, owner, found, first, none, hit, distance, miss, far, lamp,
     ghost) = out.values
    assert pos == [5, 0, 0] and gone is None and parent == "Crate-A" and owner is None
    assert found == ["Crate-A", "crate-b"] and first == ["Crate-A"] and none == {}
    assert hit == "lamp" and distance == pytest.approx(9.5)
    assert miss is None and far is None and lamp is True and ghost is True


def test_find_returns_at_most_100(world, mod_sandbox):
    world.submit("grid", {"prefab": "cube", "name": "g", "nx": 10, "nz": 10}, None)
    world.submit("grid", {"prefab": "cube", "name": "h", "nx": 10, "nz": 10}, None)
    world.apply()
    out = run(mod_sandbox(), 'return #coreai_world_find("_")')
    assert out.value == 100


def test_list_prefabs(mod_sandbox):
    out = run(mod_sandbox(), "return coreai_world_list_prefabs()")
    prefabs = {p["name"]: p for p in out.value}
    assert {"cube", "sphere", "light", "pickup"} <= set(prefabs)
    assert prefabs["pickup"]["properties"]["kind"] == "coin"


def test_transactions_from_lua(world, mod_sandbox):
    out = run(mod_sandbox(), """
        coreai_world_begin()
        coreai_world_spawn{prefab = "cube", name = "a"}
        coreai_world_spawn{prefab = "cube", name = "a"}
        local n = coreai_world_commit()
        local ok, err = pcall(coreai_world_commit)
        coreai_world_begin()
        coreai_world_spawn{prefab = "cube", name = "z"}
        local dropped = coreai_world_rollback()
        return n, ok, err, dropped
    """)
    n, ok, err, dropped = out.values
    assert (n, ok, dropped) == (2, False, 1)
    assert "no transaction is open" in err and err.endswith("[transaction]")
    assert [r.reason for r in world.apply()] == ["transaction_failed", "duplicate_name"]
    assert len(world) == 0


def test_transaction_overflow_is_an_error_in_lua(world, mod_sandbox):
    out = run(mod_sandbox(), """
        coreai_world_begin()
        for i = 1, 300 do coreai_world_spawn{prefab = "cube", name = "t" .. i} end
    """)
    assert out.status == "error" and "at most 256" in out.error.message
    assert out.error.line == 3 and world.apply() == []


def test_two_mods_cannot_touch_each_other(world, mod_sandbox):
    run(mod_sandbox("alice"), 'coreai_world_spawn{prefab = "cube", name = "hers"}')
    world.apply()
    run(mod_sandbox("bob"), """
        coreai_world_change("hers", {x = 1})
        coreai_world_destroy("hers")
        coreai_world_spawn{prefab = "cube", name = "his", parent = "hers"}
    """)
    assert {r.reason for r in world.apply()} == {"not_owner"}
    assert world.get("hers").x == 0


def test_readonly_mods_have_reads_only(mod_sandbox):
    out = run(mod_sandbox(mode="readonly"), """
        return coreai_world_exists("x"), coreai_world_spawn == nil, coreai_world_destroy == nil
    """)
    assert out.values == (False, True, True)


def test_a_sandbox_without_a_mod_identity_is_refused(world):
    with Sandbox(host_functions=world_bindings(world)) as sb:
        out = sb.run('coreai_world_spawn{prefab = "cube"}', "=bare")
    assert out.status == "error" and "needs a mod identity" in out.error.message
    assert world.pending == ()


def test_bindings_can_follow_a_swapped_world(mod_sandbox):
    worlds = [World(), World()]
    current = {"w": worlds[0]}
    bindings = world_bindings(lambda: current["w"])
    assert bindings[0].name == "coreai_world_spawn"
    current["w"] = worlds[1]  # the callable is read at call time


def test_a_world_of_its_own_kind_answers_positions_itself():
    # pos reads a World's entities directly; a subclass's own position is kept.
    class Offset(World):
        def position(self, name: str) -> tuple[float, float, float] | None:
            p = super().position(name)
            return None if p is None else (p[0] + 10, p[1], p[2])

    registry = Registry()
    for world in (World(), Offset()):
        world.submit("spawn", {"prefab": "cube", "name": "c", "x": 1, "y": 2, "z": 3})
        world.apply()
        for binding in world_bindings(world):
            registry.register(binding)
        api = registry.mod("m", Permissions(mode="auto"))
        with api.sandbox() as sb:
            out = sb.run('local x, y, z = coreai_world_pos("c") '
                         'return x, y, z, coreai_world_pos("none")')
        api.close()
        for binding in world_bindings(world):
            registry.unregister(binding.name)
        assert out.values == ((11.0 if type(world) is Offset else 1.0), 2.0, 3.0, None)
    registry.close()
