"""Data overlays: registration, validation before current, the effective value, merge rule."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from moonbox.store import Store, StoreError, apply_overlay

BASE = {"goblin": {"hp": 10, "speed": 1.5, "drops": ["gold"]}, "waves": 3}


class Goblin(BaseModel):
    hp: int = Field(gt=0)
    speed: float
    drops: list[str]


class Balance(BaseModel):
    goblin: Goblin
    waves: int


@pytest.fixture
def store(tmp_path: Path):
    with Store(tmp_path / "game.db") as s:
        s.data.register("balance", Balance, BASE)
        yield s


def test_effective_is_base_until_an_overlay(store):
    assert store.data.effective("balance") == BASE
    assert "balance" not in store.data
    r = store.data.record_success("balance", {"goblin": {"hp": 20}}, role="programmer")
    assert r.rev == 2 and r.content == {"goblin": {"hp": 20}}
    assert store.data.effective("balance") == {
        "goblin": {"hp": 20, "speed": 1.5, "drops": ["gold"]}, "waves": 3}
    # Revision 1 is the original: no overlay, the base as shipped.
    original = store.data.original("balance")
    assert (original.rev, original.content, original.outcome) == (1, None, "ok")
    store.data.reset("balance")
    assert store.data.effective("balance") == BASE


def test_effective_is_a_fresh_copy(store):
    store.data.record_success("balance", {"waves": 4})
    value = store.data.effective("balance")
    value["goblin"]["drops"].append("gem")
    assert store.data.effective("balance")["goblin"]["drops"] == ["gold"]


def test_invalid_overlay_never_becomes_current(store):
    store.data.record_success("balance", {"waves": 4})
    for bad, where in [({"goblin": {"hp": 0}}, "goblin.hp"), ({"waves": "many"}, "waves"),
                       ({"goblin": None}, "goblin"), ([1, 2], "value")]:
        with pytest.raises(StoreError) as exc:
            store.data.record_success("balance", bad)
        assert exc.value.code == "invalid_payload" and f": {where}:" in str(exc.value)
        assert "Balance" in str(exc.value)
    assert store.data.current("balance").rev == 2
    assert store.data.info("balance").latest == 2
    # A failed attempt keeps the payload in history without validating it.
    failed = store.data.record_failure("balance", {"goblin": {"hp": 0}}, error="hp must be > 0")
    assert failed.rev == 3 and store.data.current("balance").rev == 2


@pytest.mark.parametrize("payload", [
    {"x": float("nan")}, {"x": float("inf")}, {1: "int key"}, {"x": (1, 2)}, {"x": {1, 2}},
    {"x": b"bytes"}, {"x": object()},
])
def test_payload_must_be_json_compatible(store, payload):
    for record in (store.data.record_success, store.data.record_failure):
        with pytest.raises(StoreError) as exc:
            record("balance", payload)
        assert exc.value.code == "invalid_payload"
    assert "balance" not in store.data


def test_too_deep_payload(store):
    deep: dict = {}
    node = deep
    for _ in range(70):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(StoreError) as exc:
        store.data.record_failure("balance", deep)
    assert exc.value.code == "invalid_payload" and "deeper" in str(exc.value)


def test_success_needs_a_registered_model(tmp_path):
    with Store(tmp_path / "g.db") as store:
        with pytest.raises(StoreError) as exc:
            store.data.record_success("spawns", {"a": 1})
        assert exc.value.code == "unregistered_key" and "register" in str(exc.value)
        with pytest.raises(StoreError) as exc:
            store.data.effective("spawns")
        assert exc.value.code == "unregistered_key"
        # A failed attempt needs no model: it will never be current. It creates the key
        # with its original, the empty overlay.
        store.data.record_failure("spawns", {"a": 1}, error="nope")
        assert [r.rev for r in store.data.history("spawns")] == [2, 1]


def test_register_validates_base(tmp_path):
    with Store(tmp_path / "g.db") as store:
        with pytest.raises(StoreError) as exc:
            store.data.register("balance", Balance, {"waves": 1})
        assert exc.value.code == "invalid_payload"
        with pytest.raises(StoreError) as exc:
            store.data.register("balance", Balance, {"waves": float("nan")})
        assert exc.value.code == "invalid_payload"
        with pytest.raises(TypeError):
            store.data.register("balance", dict, BASE)  # type: ignore[arg-type]
        assert not store.data.registered("balance")


def test_rollback_revalidates_against_the_registered_model(tmp_path):
    path = tmp_path / "g.db"
    with Store(path) as store:
        store.data.register("balance", Balance, BASE)
        store.data.record_success("balance", {"goblin": {"hp": 5}})
        store.data.record_success("balance", {"goblin": {"hp": 6}})

    class StricterGoblin(Goblin):
        hp: int = Field(gt=5)

    class StricterBalance(Balance):
        goblin: StricterGoblin

    with Store(path) as store:
        store.data.register("balance", StricterBalance, BASE)
        with pytest.raises(StoreError) as exc:
            store.data.rollback("balance", 2)
        assert exc.value.code == "invalid_payload"
        assert store.data.current("balance").rev == 3
    # Without a model (the CLI), a revision that once validated may become current.
    with Store(path) as store:
        assert store.data.rollback("balance", 2).content == {"goblin": {"hp": 5}}


def test_data_and_scripts_are_separate_namespaces(store):
    store.scripts.record_success("balance", "return 1")
    store.data.record_success("balance", {"waves": 9})
    assert store.scripts.current("balance").content == "return 1"
    assert store.data.current("balance").rev == 2
    assert [(i.kind, i.key) for i in store.keys()] == [("data", "balance"), ("script", "balance")]
    assert store.versions("data") is store.data
    with pytest.raises(ValueError):
        store.versions("other")  # type: ignore[arg-type]


def test_data_diff_is_indented_json(store):
    store.data.record_success("balance", {"goblin": {"hp": 20, "speed": 2.0}})
    assert store.data.diff("balance", 1) == (
        '--- balance@1\n+++ balance@2\n@@ -1 +1,6 @@\n-null\n+{\n+  "goblin": {\n'
        '+    "hp": 20,\n+    "speed": 2.0\n+  }\n+}'
    )


def test_merge_rule():
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 4}
    assert apply_overlay(base, None) == base
    assert apply_overlay(base, {}) == base
    assert apply_overlay(base, {"a": {"b": 2}}) == {"a": {"b": 2, "c": [1, 2]}, "d": 4}
    assert apply_overlay(base, {"a": {"c": [3]}}) == {"a": {"b": 1, "c": [3]}, "d": 4}
    assert apply_overlay(base, {"a": 5, "e": {"f": 1}}) == {"a": 5, "d": 4, "e": {"f": 1}}
    assert apply_overlay(base, {"d": None}) == {"a": {"b": 1, "c": [1, 2]}, "d": None}
    assert apply_overlay(base, [1]) == [1]
    assert apply_overlay([1, 2], {"a": 1}) == {"a": 1}
    assert list(apply_overlay({"x": 1, "y": 2}, {"z": 0, "x": 3})) == ["x", "y", "z"]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                max_size=3),
    max_leaves=12,
)


@given(_json, _json)
def test_merge_laws(base, a):
    # The empty overlay changes nothing; overlays never mutate their inputs.
    assert apply_overlay(base, None) == base
    if isinstance(base, dict):
        assert apply_overlay(base, {}) == base
    snapshot = repr((base, a))
    merged = apply_overlay(base, a)
    assert repr((base, a)) == snapshot
    # Applying the same overlay twice is applying it once.
    assert apply_overlay(merged, a) == merged
    # Every key of a table overlay lands in a table result.
    if isinstance(a, dict):
        assert isinstance(merged, dict) and set(a) <= set(merged)
