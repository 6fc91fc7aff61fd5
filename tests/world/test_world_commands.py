"""Every world command, with valid and hostile arguments, applied at the tick boundary."""

from __future__ import annotations

import math

import pytest

from moonbox.world import MAX_TRANSACTION, REASONS, World, WorldError


def spawn(world: World, mod: str | None = "m", **args):
    args.setdefault("prefab", "cube")
    return world.submit("spawn", args, mod)


def only(results):
    (result,) = results
    return result


# -- spawn -------------------------------------------------------------------------------

def test_spawn_is_queued_then_applied(world):
    cmd = spawn(world, name="a", x=1, y=2, z=3, rx=10, scale=2)
    assert not world.exists("a") and world.pending == (cmd,)
    result = only(world.apply())
    assert result.applied and result.names == ("a",) and result.id == cmd.id
    e = world.get("a")
    assert (e.x, e.y, e.z, e.rx, e.scale, e.owner, e.prefab) == (1, 2, 3, 10, 2, "m", "cube")
    assert world.pending == ()


def test_spawn_without_a_name_gets_one_at_once(world):
    cmd = spawn(world)
    assert cmd.args.name == "cube#1"
    only(world.apply())
    assert world.exists("cube#1")


@pytest.mark.parametrize(("args", "reason"), [
    ({"prefab": "dragon"}, "unknown_prefab"),
    ({"prefab": "CUBE"}, "unknown_prefab"),
    ({"name": ""}, "invalid_name"),
    ({"name": "x" * 65}, "invalid_name"),
    ({"name": "bad\nname"}, "invalid_name"),
    ({"x": math.nan}, "not_finite"),
    ({"y": math.inf}, "not_finite"),
    ({"z": -math.inf}, "not_finite"),
    ({"rx": math.nan}, "not_finite"),
    ({"x": 100_000.5}, "out_of_bounds"),
    ({"z": -1e300}, "out_of_bounds"),
    ({"ry": 2e5}, "out_of_bounds"),
    ({"scale": 0}, "out_of_bounds"),
    ({"scale": -1}, "out_of_bounds"),
    ({"scale": 1e9}, "out_of_bounds"),
    ({"scale": math.nan}, "not_finite"),
    ({"parent": "nobody"}, "missing_parent"),
    ({"properties": {"anything": 1}}, "invalid_properties"),
    ({"prefab": "light", "properties": {"intensity": "bright"}}, "invalid_properties"),
])
def test_spawn_refusals(world, args, reason):
    spawn(world, **{"name": "e", **args})
    result = only(world.apply())
    assert result.status == "refused" and result.reason == reason
    assert reason in REASONS and result.message
    assert len(world) == 0


def test_bounds_are_inclusive(world):
    spawn(world, name="edge", x=100_000, y=-100_000)
    assert only(world.apply()).applied


def test_duplicate_names_refused_even_in_one_tick(world):
    spawn(world, name="a")
    spawn(world, name="a")
    first, second = world.apply()
    assert first.applied and second.reason == "duplicate_name"
    spawn(world, name="a", mod="other")
    assert only(world.apply()).reason == "duplicate_name"


def test_parent_must_exist_and_be_owned(world):
    spawn(world, name="root")
    spawn(world, name="child", parent="root")
    spawn(world, name="theirs", mod="other", parent="root")
    root, child, theirs = world.apply()
    assert root.applied and child.applied
    assert theirs.reason == "not_owner"
    assert world.name_of(world.get("child").parent) == "root"


def test_properties_default_and_validate(world):
    spawn(world, prefab="pickup", name="coin", properties={"value": 5})
    only(world.apply())
    assert world.get("coin").properties == {"kind": "coin", "value": 5.0, "taken": False}


@pytest.mark.parametrize(("prefab", "properties"), [
    ("pickup", {"value": math.nan}),
    ("pickup", {"value": -math.nan}),
    ("light", {"intensity": math.inf}),
    ("light", {"intensity": -math.inf}),
    ("cube", {"anything": math.nan}),  # refused as not finite before the schema sees it
])
def test_non_finite_properties_are_refused(world, prefab, properties):
    spawn(world, prefab=prefab, name="e", properties=properties)
    result = only(world.apply())
    assert result.status == "refused" and result.reason == "not_finite"
    assert len(world) == 0


def test_non_finite_properties_are_refused_by_change(world):
    spawn(world, prefab="pickup", name="coin", properties={"value": 2})
    world.apply()
    world.submit("change", {"name": "coin", "fields": {"properties": {"value": math.inf}}},
                 "m")
    assert only(world.apply()).reason == "not_finite"
    assert world.get("coin").properties["value"] == 2.0


def test_a_schema_that_allows_nan_still_gets_no_nan(world):
    from pydantic import BaseModel, ConfigDict, StrictFloat

    from moonbox.world import Prefab

    class Loose(BaseModel):
        model_config = ConfigDict(extra="forbid")
        level: StrictFloat = math.nan

    world.prefabs.register(Prefab("gauge", Loose))
    spawn(world, prefab="gauge", name="g1", properties={"level": math.inf})
    spawn(world, prefab="gauge", name="g2")  # its default is NaN
    assert [r.reason for r in world.apply()] == ["not_finite", "not_finite"]


def test_the_default_prefab_schemas_refuse_non_finite_numbers(world):
    from pydantic import ValidationError

    for prefab, key in (("pickup", "value"), ("light", "intensity")):
        with pytest.raises(ValidationError):
            world.prefabs.get(prefab).validate_properties({key: math.nan})


def test_negative_zero_properties_are_stored_as_zero(world):
    spawn(world, prefab="pickup", name="coin", properties={"value": -0.0})
    spawn(world, prefab="pickup", name="plus", properties={"value": 0.0})
    world.apply()
    value = world.get("coin").properties["value"]
    assert value == 0.0 and math.copysign(1.0, value) == 1.0
    twin = World()
    spawn(twin, prefab="pickup", name="coin", properties={"value": 0.0})
    spawn(twin, prefab="pickup", name="plus", properties={"value": -0.0})
    twin.apply()
    assert twin.content_hash() == world.content_hash()


def test_world_full(tmp_path):
    world = World(max_entities=2)
    for name in "abc":
        spawn(world, name=name)
    assert [r.reason for r in world.apply()] == [None, None, "world_full"]


# -- change, set_color, destroy ------------------------------------------------------------

def test_change_only_the_given_fields(world):
    spawn(world, name="a", x=1, y=2, z=3)
    world.apply()
    world.submit("change", {"name": "a", "fields": {"y": 9}}, "m")
    assert only(world.apply()).applied
    e = world.get("a")
    assert (e.x, e.y, e.z) == (1, 9, 3)


@pytest.mark.parametrize(("fields", "reason"), [
    ({"x": math.nan}, "not_finite"),
    ({"y": 1e6}, "out_of_bounds"),
    ({"scale": 0}, "out_of_bounds"),
    ({"parent": "ghost"}, "missing_parent"),
    ({"parent": "a"}, "parent_cycle"),
    ({"properties": {"nope": True}}, "invalid_properties"),
])
def test_change_refusals_leave_the_entity_alone(world, fields, reason):
    spawn(world, name="a", x=1)
    world.apply()
    world.submit("change", {"name": "a", "fields": fields}, "m")
    assert only(world.apply()).reason == reason
    assert world.get("a").x == 1 and world.get("a").parent is None


def test_change_detects_deep_parent_cycles_and_detaches(world):
    for name, parent in (("a", None), ("b", "a"), ("c", "b")):
        spawn(world, name=name, parent=parent)
    world.apply()
    world.submit("change", {"name": "a", "fields": {"parent": "c"}}, "m")
    assert only(world.apply()).reason == "parent_cycle"
    world.submit("change", {"name": "c", "fields": {"parent": ""}}, "m")
    assert only(world.apply()).applied and world.get("c").parent is None


def test_others_entities_cannot_be_touched(world):
    spawn(world, name="mine", mod="owner")
    spawn(world, name="hosts", mod=None)
    world.apply()
    for target in ("mine", "hosts"):
        world.submit("change", {"name": target, "fields": {"x": 5}}, "thief")
        world.submit("set_color", {"name": target, "r": 1, "g": 0, "b": 0}, "thief")
        world.submit("destroy", {"name": target}, "thief")
    assert {r.reason for r in world.apply()} == {"not_owner"}
    assert world.get("mine").x == 0 and world.exists("hosts")


def test_the_host_may_touch_anything(world):
    spawn(world, name="mine", mod="owner")
    world.apply()
    world.submit("change", {"name": "mine", "fields": {"x": 5}}, None)
    assert only(world.apply()).applied and world.get("mine").x == 5


def test_missing_entities_are_not_found(world):
    world.submit("change", {"name": "ghost", "fields": {"x": 1}}, "m")
    world.submit("set_color", {"name": "ghost", "r": 1, "g": 1, "b": 1}, "m")
    world.submit("destroy", {"name": "ghost"}, "m")
    assert {r.reason for r in world.apply()} == {"not_found"}


@pytest.mark.parametrize(("rgba", "reason"), [
    ((1.5, 0, 0, 1), "out_of_bounds"),
    ((0, -0.1, 0, 1), "out_of_bounds"),
    ((0, 0, math.nan, 1), "not_finite"),
    ((0, 0, 0, math.inf), "not_finite"),
])
def test_set_color(world, rgba, reason):
    spawn(world, name="a")
    world.apply()
    world.submit("set_color", dict(zip("rgba", (0.25, 0.5, 1.0, 0.5), strict=True),
                                   name="a"), "m")
    assert only(world.apply()).applied and world.get("a").color == (0.25, 0.5, 1.0, 0.5)
    world.submit("set_color", dict(zip("rgba", rgba, strict=True), name="a"), "m")
    assert only(world.apply()).reason == reason
    assert world.get("a").color == (0.25, 0.5, 1.0, 0.5)


def test_destroy_takes_descendants(world):
    for name, parent in (("a", None), ("b", "a"), ("c", "b"), ("d", None)):
        spawn(world, name=name, parent=parent)
    world.apply()
    world.submit("destroy", {"name": "a"}, "m")
    result = only(world.apply())
    assert result.applied and set(result.names) == {"a", "b", "c"}
    assert [e.name for e in world.entities()] == ["d"]


def test_destroy_refused_when_a_descendant_is_someone_elses(world):
    spawn(world, name="root", mod=None)
    world.apply()
    spawn(world, name="kid", mod=None, parent="root")
    world.apply()
    world.submit("change", {"name": "root", "fields": {"x": 1}}, None)
    world.apply()
    # The host hands the root to mod m; the child stays the host's.
    world._entities[world._by_name["root"]].owner = "m"
    world.submit("destroy", {"name": "root"}, "m")
    assert only(world.apply()).reason == "not_owner"
    assert world.exists("root") and world.exists("kid")


# -- batches, grids, transactions ----------------------------------------------------------

def test_spawn_batch_is_all_or_none(world):
    world.submit("spawn_batch", {"items": [{"prefab": "cube", "name": f"b{i}"}
                                           for i in range(100)]}, "m")
    assert only(world.apply()).applied and len(world) == 100
    world.submit("spawn_batch", {"items": [{"prefab": "cube", "name": "new"},
                                           {"prefab": "cube", "name": "b5"}]}, "m")
    result = only(world.apply())
    assert result.reason == "duplicate_name" and "item 2" in result.message
    assert not world.exists("new") and len(world) == 100


def test_spawn_batch_size_is_checked_when_issued(world):
    with pytest.raises(ValueError):
        world.submit("spawn_batch", {"items": [{"prefab": "cube"}] * 101}, "m")
    with pytest.raises(ValueError):
        world.submit("spawn_batch", {"items": []}, "m")


def test_grid(world):
    world.submit("grid", {"prefab": "cube", "name": "g", "nx": 10, "nz": 10, "spacing": 2,
                          "y": 1}, "m")
    result = only(world.apply())
    assert result.applied and len(result.names) == 100
    assert world.position("g_9_9") == (18, 1, 18)


def test_grid_refusals(world):
    with pytest.raises(ValueError):
        world.submit("grid", {"prefab": "cube", "name": "g", "nx": 11, "nz": 10}, "m")
    world.submit("grid", {"prefab": "cube", "name": "g", "nx": 3, "x": 99_999,
                          "spacing": 1}, "m")
    assert only(world.apply()).reason == "out_of_bounds" and len(world) == 0


def test_transaction_commits_all_or_none(world):
    world.begin("m")
    spawn(world, name="a")
    world.submit("change", {"name": "a", "fields": {"x": 4}}, "m")
    assert world.pending == () and world.in_transaction("m")
    assert world.commit("m") == 2
    assert [r.status for r in world.apply()] == ["applied", "applied"]
    assert world.get("a").x == 4
    world.begin("m")
    spawn(world, name="b")
    world.submit("change", {"name": "a", "fields": {"x": math.nan}}, "m")
    world.commit("m")
    b, a = world.apply()
    assert (b.reason, a.reason) == ("transaction_failed", "not_finite")
    assert not world.exists("b") and world.get("a").x == 4


def test_transaction_rollback_undoes_destroys_and_keeps_ids(world):
    spawn(world, name="a")
    world.apply()
    world.begin("m")
    world.submit("destroy", {"name": "a"}, "m")
    spawn(world, name="c")
    spawn(world, name="c")  # refused: the whole transaction rolls back
    world.commit("m")
    world.apply()
    assert world.exists("a") and not world.exists("c")
    spawn(world, name="d")
    world.apply()
    assert world.get("d").id == 2


def test_transaction_misuse(world):
    with pytest.raises(WorldError) as exc:
        world.commit("m")
    assert exc.value.code == "transaction"
    world.begin("m")
    with pytest.raises(WorldError):
        world.begin("m")
    spawn(world, name="x")
    assert world.rollback("m") == 1 and world.rollback("m") == 0
    world.apply()
    assert not world.exists("x")


def test_transaction_overflow_rolls_back_with_an_error(world):
    world.begin("m")
    for i in range(MAX_TRANSACTION):
        spawn(world, name=f"t{i}")
    with pytest.raises(WorldError) as exc:
        spawn(world, name="one-too-many")
    assert exc.value.code == "transaction" and not world.in_transaction("m")
    assert world.apply() == [] and len(world) == 0


def test_transactions_are_per_mod(world):
    world.begin("a")
    spawn(world, name="from-b", mod="b")
    spawn(world, name="from-a", mod="a")
    assert [c.args.name for c in world.pending] == ["from-b"]
    world.commit("a")
    assert [r.names for r in world.apply()] == [("from-b",), ("from-a",)]


def test_commands_apply_in_issue_order(world):
    spawn(world, name="a")
    world.submit("change", {"name": "a", "fields": {"x": 1}}, "m")
    world.submit("destroy", {"name": "a"}, "m")
    spawn(world, name="a", x=7)
    assert [r.status for r in world.apply()] == ["applied"] * 4
    assert world.get("a").x == 7


def test_queue_bounds(world):
    small = World(max_pending=3, max_pending_per_mod=2)
    spawn(small, name="a", mod="x")
    spawn(small, name="b", mod="x")
    with pytest.raises(WorldError) as exc:
        spawn(small, name="c", mod="x")
    assert exc.value.code == "queue_full"
    spawn(small, name="d", mod="y")
    with pytest.raises(WorldError):
        spawn(small, name="e", mod="z")
    small.apply()
    spawn(small, name="c", mod="x")  # room again after the tick boundary
