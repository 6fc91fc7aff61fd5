"""Export to readable JSON and import back: round trips, refusals, hashes checked."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_model import BASE, DATA_KEYS, apply_to_store, open_store, random_ops, snapshot

from moonbox.store import Store, StoreError


@pytest.fixture
def filled(tmp_path: Path):
    with open_store(tmp_path / "a.db", max_revisions=5) as store:
        for op in random_ops(seed=7, count=150):
            apply_to_store(store, op)
        store.scripts.record_success("üñï:main", "return '✓'\n", author="ann", role="modder",
                                     trace_id="t-1")
        store.scripts.set_retention("üñï:main", 4)
        yield store


def test_export_json_is_readable_and_round_trips(filled, tmp_path):
    out = tmp_path / "versions.json"
    count = filled.export_json(out)
    text = out.read_text(encoding="utf-8")
    assert "✓" in text and text.startswith('{\n  "format": "moonbox-versions"')
    data = json.loads(text)
    assert count == len(data["keys"]) == len(filled.keys())
    with Store(tmp_path / "b.db") as copy_store:
        assert copy_store.import_json(out) == count
        assert snapshot(copy_store) == snapshot(filled)
        assert copy_store.export()["keys"] == filled.export()["keys"]
        # And the imported store carries on where the other left off.
        for key in DATA_KEYS:
            copy_store.data.register(key, *_registration())
        info = filled.scripts.info("üñï:main")
        assert copy_store.scripts.record_success("üñï:main", "x").rev == info.latest + 1
        assert copy_store.scripts.info("üñï:main").max_revisions == 4
    assert list(tmp_path.glob(".*.tmp")) == []


def _registration():
    from store_model import Stats

    return Stats, BASE


def test_import_refuses_existing_keys_unless_replace(filled, tmp_path):
    data = filled.export()
    with Store(tmp_path / "b.db") as other:
        other.scripts.record_success("üñï:main", "mine")
        other.scripts.record_success("untouched", "keep me")
        with pytest.raises(StoreError) as exc:
            other.import_data(data)
        assert exc.value.code == "key_exists" and "üñï:main" in str(exc.value)
        assert [i.key for i in other.keys()] == ["untouched", "üñï:main"]  # nothing imported
        assert other.import_data(data, replace=True) == len(data["keys"])
        assert other.scripts.current("üñï:main").content == "return '✓'\n"
        assert other.scripts.current("untouched").content == "keep me"


def _broken(data, change):
    data = copy.deepcopy(data)
    change(data)
    return data


def _first(kind):
    return lambda d: next(k for k in d["keys"] if k["kind"] == kind)


@pytest.mark.parametrize("change, phrase", [
    (lambda d: d.update(format="other"), "format"),
    (lambda d: d.update(format_version=2), "format_version"),
    (lambda d: d.update(extra=1), "extra"),
    (lambda d: _first("script")(d)["revisions"][0].update(source="tampered"), "hash"),
    (lambda d: _first("data")(d)["revisions"][-1].update(payload={"hp": -1}), "hash"),
    (lambda d: _first("script")(d).update(current=999), "current revision 999"),
    (lambda d: _first("script")(d).update(next_rev=1), "next_rev"),
    (lambda d: _first("script")(d)["revisions"][0].pop("source"), "needs 'source'"),
    (lambda d: _first("data")(d)["revisions"][0].update(source="x"), "needs 'payload'"),
    (lambda d: _first("script")(d).update(key=""), "not valid"),
    (lambda d: d["keys"].append(d["keys"][0]), "twice"),
    (lambda d: _first("script")(d)["revisions"].append(_first("script")(d)["revisions"][0]),
     "twice"),
    (lambda d: _first("script")(d).update(max_revisions=1), "max_revisions"),
    (lambda d: _first("script")(d)["revisions"][0].update(outcome="maybe"), "outcome"),
])
def test_malformed_exports_are_refused_whole(filled, tmp_path, change, phrase):
    bad = _broken(filled.export(), change)
    with Store(tmp_path / "b.db") as other:
        with pytest.raises(StoreError) as exc:
            other.import_data(bad)
        assert exc.value.code == "invalid_export" and phrase in str(exc.value)
        assert other.keys() == []


def test_import_refuses_a_failed_current(tmp_path):
    with Store(tmp_path / "a.db") as store:
        store.scripts.record_success("k", "v1")
        store.scripts.record_failure("k", "v2")
        data = store.export()
    data["keys"][0]["current"] = 2
    with Store(tmp_path / "b.db") as other, pytest.raises(StoreError) as exc:
        other.import_data(data)
    assert "failed attempt" in str(exc.value)


def test_unreadable_export_file(tmp_path):
    (tmp_path / "x.json").write_text("{not json")
    with Store(tmp_path / "b.db") as store:
        for path in (tmp_path / "x.json", tmp_path / "missing.json"):
            with pytest.raises(StoreError) as exc:
                store.import_json(path)
            assert exc.value.code == "invalid_export"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), count=st.integers(0, 60))
def test_round_trip_of_any_history(tmp_path_factory, seed, count):
    folder = tmp_path_factory.mktemp("rt")
    with open_store(folder / "a.db", max_revisions=4) as a, Store(folder / "b.db") as b:
        for op in random_ops(seed, count):
            apply_to_store(a, op)
        b.import_data(json.loads(json.dumps(a.export())))
        assert snapshot(b) == snapshot(a)
