"""The world's own path for change commands: it must apply exactly as the general one does.

``World._apply_change`` takes a lone change of coordinates, rotations or the scale itself
and hands anything else to ``_apply_single``. Whatever the commands, hostile values
included, a world applying them on that path and a world applying every command on the
general path must end the same: the same results (ids, statuses, reasons, messages,
names), the same entities and the same content hash.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from moonbox.world import Command, CommandResult, World, WorldError
from moonbox.world._commands import new_result
from moonbox.world._world import _PLACEMENT

# Owned by mod a, by mod b, by the host; "gone" never exists.
NAMES = ("a1", "a2", "b1", "h1", "gone")
OWNERS = {"a1": "a", "a2": "a", "b1": "b", "h1": None}

hostile = st.one_of(
    st.floats(-200_000, 200_000),
    st.sampled_from([0.0, -0.0, math.nan, -math.nan, math.inf, -math.inf, 100_000.0,
                     -100_000.0, 100_000.0000001, 1e308, -1e308, 5e-324, 1000.0,
                     1000.0000001, 0.0001]),
    st.integers(-(2**63), 2**63),
    st.integers(-3, 3),
)
field_names = st.sampled_from(sorted(_PLACEMENT) + ["parent", "properties"])


@st.composite
def changes(draw: Any) -> tuple[str, str | None, dict[str, Any]]:
    name = draw(st.sampled_from(NAMES))
    mod = draw(st.sampled_from(["a", "b", None]))
    fields: dict[str, Any] = {}
    for key in draw(st.sets(field_names, max_size=4)):
        if key == "parent":
            fields[key] = draw(st.sampled_from(["", "a1", "b1", "gone"]))
        elif key == "properties":
            fields[key] = {}
        else:
            fields[key] = draw(hostile)
    return name, mod, fields


def _world() -> World:
    world = World()
    for name, owner in OWNERS.items():
        world.submit("spawn", {"prefab": "cube", "name": name}, owner)
    world.apply()
    return world


def _general(world: World) -> World:
    world._apply_change = world._apply_single  # type: ignore[method-assign]
    return world


def _same_results(a: list[Any], b: list[Any]) -> None:
    assert [r.to_dict() for r in a] == [r.to_dict() for r in b]


def _entities(world: World) -> list[dict[str, Any]]:
    return [e.to_dict() for e in world.entities()]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ticks=st.lists(st.lists(changes(), max_size=6), min_size=1, max_size=3))
def test_the_fast_path_applies_as_the_general_path(ticks):
    fast, general = _world(), _general(_world())
    for commands in ticks:
        for name, mod, fields in commands:
            for world in (fast, general):
                world.submit("change", {"name": name, "fields": fields}, mod)
        results = fast.apply()
        _same_results(results, general.apply())
        for r in results:
            event(f"{r.status} {r.reason}")
    assert _entities(fast) == _entities(general)
    assert fast.content_hash() == general.content_hash()


def test_the_fast_path_takes_placement_and_refuses_as_the_general_path():
    fast, general = _world(), _general(_world())
    cases = [
        ("a1", "a", {"x": 1, "y": -0.0, "z": 2.5, "rx": 90, "ry": -90, "rz": 0}),
        ("a1", "a", {"x": math.nan}),
        ("a1", "a", {"y": math.inf}),
        ("a1", "a", {"z": -math.inf}),
        ("a1", "a", {"x": 1e6}),
        ("a1", "a", {"x": 5.0, "y": math.nan}),  # refused whole: x stays
        ("a1", "a", {"scale": 0}),
        ("a1", "a", {"scale": -1}),
        ("a1", "a", {"scale": math.nan}),
        ("a1", "a", {"scale": 1000.5}),
        ("a1", "a", {"scale": 1000}),
        ("a1", "a", {"x": 2**62}),
        ("b1", "a", {"x": 1}),  # another mod's entity
        ("h1", "a", {"x": 1}),  # the host's
        ("h1", None, {"x": 3}),  # the host may touch anything
        ("gone", "a", {"x": 1}),
        ("a1", "a", {}),
        ("a2", "a", {"x": 4, "parent": "a1"}),  # not placement only: the general path
    ]
    for name, mod, fields in cases:
        for world in (fast, general):
            world.submit("change", {"name": name, "fields": fields}, mod)
    results = fast.apply()
    _same_results(results, general.apply())
    assert [r.reason for r in results] == [
        None, "not_finite", "not_finite", "not_finite", "out_of_bounds", "not_finite",
        "out_of_bounds", "out_of_bounds", "not_finite", "out_of_bounds", None,
        "out_of_bounds", "not_owner", "not_owner", None, "not_found", None, None]
    a1 = fast.get("a1")
    assert a1 is not None
    assert (a1.x, a1.y, a1.z, a1.rx, a1.scale) == (1.0, 0.0, 2.5, 90.0, 1000.0)
    assert math.copysign(1, a1.y) == 1  # -0.0 is stored as 0.0
    assert type(a1.x) is float
    assert _entities(fast) == _entities(general)
    assert fast.content_hash() == general.content_hash()


def test_the_fast_path_leaves_transactions_to_the_general_path():
    fast, general = _world(), _general(_world())
    for world in (fast, general):
        world.begin("a")
        world.submit("change", {"name": "a1", "fields": {"x": 7}}, "a")
        world.submit("change", {"name": "a2", "fields": {"x": math.nan}}, "a")
        world.commit("a")
    results = fast.apply()
    _same_results(results, general.apply())
    assert [r.reason for r in results] == ["transaction_failed", "not_finite"]
    assert fast.get("a1").x == 0.0  # type: ignore[union-attr]


def test_a_changed_entity_is_not_shared_with_what_the_world_handed_out():
    world = _world()
    before = world.get("a1")
    world.submit("change", {"name": "a1", "fields": {"x": 9}}, "a")
    world.apply()
    assert before is not None and before.x == 0.0
    assert world.get("a1").x == 9.0  # type: ignore[union-attr]


def test_a_submit_refused_for_room_takes_no_id_and_counts_nothing():
    world = World(max_pending=3, max_pending_per_mod=1)
    first = world.submit("spawn", {"prefab": "cube", "name": "p"}, "x")
    for mod in ("x", "x"):
        with pytest.raises(WorldError) as exc:
            world.submit("spawn", {"prefab": "cube", "name": "q"}, mod)
        assert exc.value.code == "queue_full"
    assert world.next_command_id == first.id + 1
    world.submit("spawn", {"prefab": "cube", "name": "h1"}, None)  # the host: no per-mod cap
    world.submit("spawn", {"prefab": "cube", "name": "h2"}, None)
    assert len(world.pending) == 3
    assert world._pending_by_mod == {"x": 1, None: 2}


def test_commands_and_results_are_the_frozen_dataclasses_they_were():
    c = Command(3, "m", "change", None)
    assert (c.id, c.mod, c.kind, c.args) == (3, "m", "change", None)
    assert c == Command(3, "m", "change", None) and hash(c) == hash(Command(3, "m", "change", None))
    assert dataclasses.replace(c, id=4).id == 4
    # Both set their fields in a hand-written __init__: a new field must be added there too.
    assert [f.name for f in dataclasses.fields(Command)] == ["id", "mod", "kind", "args"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.id = 5  # type: ignore[misc]
    r = CommandResult(1, None, "spawn", "refused", "not_found")
    assert (r.message, r.names, r.reason, r.applied) == ("", (), "not_found", False)
    assert r == CommandResult(1, None, "spawn", "refused", reason="not_found", message="",
                              names=())
    assert [f.name for f in dataclasses.fields(CommandResult)] == [
        "id", "mod", "kind", "status", "reason", "message", "names"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.status = "applied"  # type: ignore[misc]
    assert not hasattr(r, "__dict__")
    # The world's apply makes its results another way: they are the same objects.
    made = new_result(1, None, "spawn", "refused", "not_found", "", ())
    assert type(made) is CommandResult and made == r and hash(made) == hash(r)
    assert dataclasses.replace(made, id=2) == dataclasses.replace(r, id=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.status = "applied"  # type: ignore[misc]
    assert not hasattr(made, "__dict__") and made.applied is False
    assert repr(made) == repr(r)


@st.composite
def placements(draw: Any) -> tuple[str, str | None, dict[str, float]]:
    # What the change binding's lane hands submit_placement: placement fields only, their
    # values floats (it converts ints within 2**63), a name of at most 256 characters.
    name = draw(st.sampled_from(NAMES))
    mod = draw(st.sampled_from(["a", "b", None]))
    keys = draw(st.lists(st.sampled_from(sorted(_PLACEMENT)), min_size=1, max_size=4,
                         unique=True))
    return name, mod, {key: float(draw(hostile)) for key in keys}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ticks=st.lists(st.lists(st.one_of(placements(), changes()), max_size=6),
                      min_size=1, max_size=3),
       discard=st.one_of(st.none(), st.tuples(st.sampled_from(["a", "b", None]),
                                              st.integers(1, 40))))
def test_a_placement_queued_fast_applies_as_its_model_would(ticks, discard):
    fast, full = _world(), _world()
    for commands in ticks:
        for name, mod, fields in commands:
            queued = fast.submit_placement(name, dict(fields), mod)
            if queued is None:
                queued = fast.submit("change", {"name": name, "fields": fields}, mod).id
            assert queued == full.submit("change", {"name": name, "fields": fields}, mod).id
        assert fast.pending == full.pending
        assert fast.snapshot(pending=True) == full.snapshot(pending=True)
        if discard is not None:
            assert fast.discard(*discard) == full.discard(*discard)
            assert fast.pending == full.pending
            assert fast._pending_by_mod == full._pending_by_mod
        results = fast.apply()
        _same_results(results, full.apply())
        for r in results:
            event(f"{r.status} {r.reason}")
    assert _entities(fast) == _entities(full)
    assert fast.content_hash() == full.content_hash()
