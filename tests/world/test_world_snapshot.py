"""Snapshots round trip; the content hash is stable and order-independent."""

from __future__ import annotations

import math

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moonbox.world import SNAPSHOT_FORMAT, World, WorldError

coord = st.floats(min_value=-100_000, max_value=100_000, allow_nan=False)
spawn_spec = st.fixed_dictionaries({
    "prefab": st.sampled_from(["cube", "sphere", "light", "pickup", "dragon"]),
    "x": coord, "y": coord, "z": coord,
    "scale": st.floats(min_value=0.01, max_value=1000),
    "owner": st.sampled_from([None, "a", "b"]),
})


def build(specs) -> World:
    world = World()
    for i, spec in enumerate(specs):
        args = {k: v for k, v in spec.items() if k != "owner"}
        parent = f"e{i - 1}" if i and i % 3 else None
        world.submit("spawn", {**args, "name": f"e{i}", "parent": parent}, spec["owner"])
    world.apply()
    return world


@settings(max_examples=40, deadline=None)
@given(st.lists(spawn_spec, max_size=25))
def test_snapshot_round_trip(specs):
    world = build(specs)
    loaded = World.load(world.snapshot())
    assert [e.to_dict() for e in loaded.entities()] == [e.to_dict() for e in world.entities()]
    assert loaded.content_hash() == world.content_hash()
    assert loaded.snapshot() == world.snapshot()


def test_hash_is_content_not_history():
    a, b = World(), World()
    a.submit("spawn", {"prefab": "cube", "name": "x", "x": 1}, "m")
    a.apply()
    a.submit("change", {"name": "x", "fields": {"x": -0.0}}, "m")
    a.apply()
    b.submit("spawn", {"prefab": "cube", "name": "x", "x": 0.0}, "m")
    b.apply()
    assert a.content_hash() == b.content_hash()
    b.submit("set_color", {"name": "x", "r": 0, "g": 0, "b": 0}, "m")
    b.apply()
    assert a.content_hash() != b.content_hash()
    assert len(a.content_hash()) == 64


def test_pending_commands_are_not_in_a_snapshot():
    world = World()
    world.submit("spawn", {"prefab": "cube", "name": "later"}, "m")
    assert World.load(world.snapshot()).pending == ()


def test_ids_continue_after_load():
    world = World()
    for name in "abc":
        world.submit("spawn", {"prefab": "cube", "name": name}, None)
    world.apply()
    world.submit("destroy", {"name": "c"}, None)
    world.apply()
    loaded = World.load(world.snapshot())
    loaded.submit("spawn", {"prefab": "cube", "name": "d"}, None)
    loaded.apply()
    assert loaded.get("d").id == 4


def doc(**changes):
    world = World()
    world.submit("spawn", {"prefab": "cube", "name": "a"}, None)
    world.submit("spawn", {"prefab": "cube", "name": "b", "parent": "a"}, None)
    world.apply()
    data = msgpack.unpackb(world.snapshot())
    for key, value in changes.items():
        if key.startswith("e_"):
            data["entities"][1][key[2:]] = value
        else:
            data[key] = value
    return msgpack.packb(data)


@pytest.mark.parametrize("data", [
    b"not msgpack at all \xc1",
    msgpack.packb([1, 2, 3]),
    msgpack.packb({"format": "other"}),
    doc(version=99),
    doc(format="x"),
    doc(e_prefab="dragon"),
    doc(e_x=math.nan),
    doc(e_y=1e9),
    doc(e_name="a"),
    doc(e_name=""),
    doc(e_parent=99),
    doc(e_parent=2),
    doc(e_id=1),
    doc(e_id="7"),
    doc(e_color=[1, 1]),
    doc(e_color=[2, 0, 0, 1]),
    doc(e_properties={"x": 1}),
    doc(e_owner=5),
    doc(next_id=1),
    doc(entities="many"),
])
def test_bad_snapshots_are_refused(data):
    with pytest.raises(WorldError) as exc:
        World.load(data)
    assert exc.value.code == "bad_snapshot"


def test_a_snapshot_with_a_non_finite_property_is_refused():
    world = World()
    world.submit("spawn", {"prefab": "pickup", "name": "coin"}, None)
    world.apply()
    data = msgpack.unpackb(world.snapshot())
    data["entities"][0]["properties"]["value"] = math.nan
    with pytest.raises(WorldError) as exc:
        World.load(msgpack.packb(data))
    assert exc.value.code == "bad_snapshot" and "finite" in str(exc.value)


def test_snapshot_format_marker():
    assert msgpack.unpackb(World().snapshot())["format"] == SNAPSHOT_FORMAT


def test_a_snapshot_with_pending_holds_the_queue_and_open_transactions():
    world = World()
    world.submit("spawn", {"prefab": "cube", "name": "a"}, "m")
    world.apply()
    world.submit("change", {"name": "a", "fields": {"x": 3.0}}, "m")  # placement only
    world.submit("spawn", {"prefab": "cube"}, None)  # a generated name, the host's
    world.begin("n")
    world.submit("spawn", {"prefab": "sphere", "name": "b"}, "n")
    world.commit("n")
    world.begin("m")  # left open
    world.submit("destroy", {"name": "a"}, "m")
    data = world.snapshot(pending=True)
    assert World.load(world.snapshot()).pending == ()  # not without pending=True
    copy = World()
    copy.restore(data)
    assert copy.pending == world.pending
    assert copy.in_transaction("m") and not copy.in_transaction("n")
    assert copy.next_command_id == world.next_command_id
    assert copy.snapshot(pending=True) == data
    # The change keeps exactly the fields it was given, so it applies as it would have.
    change = copy.pending[0].args.fields
    assert change.model_fields_set == {"x"}
    copy.commit("m")
    world.commit("m")
    assert [(r.id, r.status) for r in copy.apply()] == [(r.id, r.status) for r in world.apply()]
    assert copy.content_hash() == world.content_hash()


def test_a_refused_restore_changes_nothing():
    world = World()
    world.submit("spawn", {"prefab": "cube", "name": "keep"})
    world.apply()
    before = world.snapshot(pending=True)
    doc = msgpack.unpackb(before, raw=False)
    doc["pending"] = [{"id": 1, "mod": None, "kind": "spawn", "args": {"prefab": 7}}]
    for bad in (b"junk", msgpack.packb(doc, use_bin_type=True)):
        with pytest.raises(WorldError):
            world.restore(bad)
        assert world.snapshot(pending=True) == before
