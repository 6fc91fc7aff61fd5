"""Script versions: every operation, its errors, and the history bounds."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import pytest

from moonbox import ConfigError, MoonboxError
from moonbox.store import Revision, Store, StoreError

KEY = "waves:main"


@pytest.fixture
def clock():
    """A clock that ticks one second per reading, from 1000."""
    return itertools.count(1000.0).__next__


@pytest.fixture
def store(tmp_path: Path, clock):
    with Store(tmp_path / "game.db", clock=clock) as s:
        yield s


def test_first_success_is_original_and_current(store):
    r = store.scripts.record_success(KEY, "return 1\n", author="human", role="modder",
                                     trace_id="t-1")
    assert r == Revision("script", KEY, 1, "return 1\n", r.hash, 1000.0, "human", "modder",
                         "t-1", "ok", None)
    assert len(r.hash) == 64
    assert store.scripts.current(KEY) == r == store.scripts.original(KEY)
    info = store.scripts.info(KEY)
    assert (info.original, info.current, info.latest, info.revisions) == (1, 1, 1, 1)
    assert KEY in store.scripts and KEY not in store.data and "other" not in store.scripts


def test_success_becomes_current_failure_never_does(store):
    store.scripts.record_success(KEY, "return 1")
    failed = store.scripts.record_failure(KEY, "return (", error="syntax error", role="programmer")
    assert (failed.rev, failed.outcome, failed.error) == (2, "failed", "syntax error")
    assert store.scripts.current(KEY).rev == 1
    store.scripts.record_success(KEY, "return 3")
    assert store.scripts.current(KEY).content == "return 3"
    assert [r.rev for r in store.scripts.history(KEY)] == [3, 2, 1]
    assert [r.rev for r in store.scripts.history(KEY, limit=2)] == [3, 2]
    assert store.scripts.history(KEY, limit=0) == []
    assert store.scripts.revision(KEY, 2).content == "return ("
    assert store.scripts.revision(KEY, "current").rev == 3
    assert store.scripts.info(KEY).latest == 3


def test_same_content_gets_same_hash(store):
    a = store.scripts.record_success(KEY, "return 1")
    b = store.scripts.record_success(KEY, "return 1")
    c = store.scripts.record_success(KEY, "return 2")
    assert a.hash == b.hash != c.hash and (a.rev, b.rev) == (1, 2)


def test_failure_needs_an_original(store):
    with pytest.raises(StoreError) as exc:
        store.scripts.record_failure(KEY, "return (", error="boom")
    assert (exc.value.code, exc.value.key, exc.value.kind) == ("unknown_key", KEY, "script")
    assert "record its original" in str(exc.value)
    assert store.keys() == []


def test_rollback_reset_and_reset_all(store):
    for i in range(1, 5):
        store.scripts.record_success(KEY, f"return {i}")
    store.scripts.record_success("other:main", "return 'a'")
    store.scripts.record_success("other:main", "return 'b'")
    assert store.scripts.rollback(KEY, 2).content == "return 2"
    assert store.scripts.current(KEY).rev == 2
    # History is kept: rolling forward again works.
    assert store.scripts.rollback(KEY, 4).rev == 4
    assert store.scripts.rollback(KEY, "original").rev == 1
    assert store.scripts.reset(KEY).rev == 1
    store.scripts.rollback(KEY, 3)
    assert store.reset_all() == 2
    assert store.reset_all() == 0
    assert {i.key: i.current for i in store.keys()} == {KEY: 1, "other:main": 1}
    assert store.scripts.info(KEY).revisions == 4


def test_reset_all_by_kind_and_prefix(store):
    for key in ("a:1", "a:2", "b:1"):
        store.scripts.record_success(key, "x")
        store.scripts.record_success(key, "y")
    assert store.scripts.reset_all(prefix="a:") == 2
    assert [(i.key, i.current) for i in store.scripts.keys()] == [("a:1", 1), ("a:2", 1),
                                                                 ("b:1", 2)]
    assert store.reset_all("data") == 0
    assert [i.key for i in store.scripts.keys(prefix="a:")] == ["a:1", "a:2"]


def test_rollback_errors(store):
    store.scripts.record_success(KEY, "return 1")
    store.scripts.record_failure(KEY, "return (", error="syntax")
    with pytest.raises(StoreError) as exc:
        store.scripts.rollback(KEY, 2)
    assert (exc.value.code, exc.value.rev) == ("failed_revision", 2)
    with pytest.raises(StoreError) as exc:
        store.scripts.rollback(KEY, 9)
    assert (exc.value.code, exc.value.rev) == ("unknown_revision", 9)
    with pytest.raises(StoreError) as exc:
        store.scripts.rollback("nope", 1)
    assert exc.value.code == "unknown_key"
    with pytest.raises(StoreError) as exc:
        store.scripts.revision(KEY, "latest")  # type: ignore[arg-type]
    assert exc.value.code == "unknown_revision"
    with pytest.raises(TypeError):
        store.scripts.revision(KEY, True)
    assert store.scripts.current(KEY).rev == 1


@pytest.mark.parametrize("op", [
    lambda s: s.scripts.current("nope"),
    lambda s: s.scripts.revision("nope", 1),
    lambda s: s.scripts.revision("nope", "original"),
    lambda s: s.scripts.history("nope"),
    lambda s: s.scripts.info("nope"),
    lambda s: s.scripts.diff("nope", 1),
    lambda s: s.scripts.reset("nope"),
    lambda s: s.scripts.set_retention("nope", 5),
])
def test_unknown_key_everywhere(store, op):
    with pytest.raises(StoreError) as exc:
        op(store)
    assert exc.value.code == "unknown_key" and "'nope'" in str(exc.value)
    assert isinstance(exc.value, MoonboxError)
    assert exc.value.to_dict()["code"] == "unknown_key"


@pytest.mark.parametrize("key", ["", "x" * 257, "a\nb", "tab\there", 5, None])
def test_invalid_keys(store, key):
    with pytest.raises(StoreError) as exc:
        store.scripts.record_success(key, "return 1")
    assert exc.value.code == "invalid_key"


@pytest.mark.parametrize("source", [b"return 1", None, 42, "\ud800"])
def test_source_must_be_text(store, source):
    with pytest.raises(StoreError) as exc:
        store.scripts.record_success(KEY, source)
    assert exc.value.code == "invalid_payload"
    assert KEY not in store.scripts


def test_metadata_types_are_checked(store):
    with pytest.raises(TypeError):
        store.scripts.record_success(KEY, "x", author=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store.scripts.record_failure(KEY, "x", error=ValueError("x"))  # type: ignore[arg-type]


def test_diff(store):
    store.scripts.record_success(KEY, "local a = 1\nlocal b = 2\nreturn a + b\n")
    store.scripts.record_success(KEY, "local a = 1\nlocal b = 3\nreturn a + b\n")
    assert store.scripts.diff(KEY, 1, 2) == (
        "--- waves:main@1\n+++ waves:main@2\n@@ -1,3 +1,3 @@\n"
        " local a = 1\n-local b = 2\n+local b = 3\n return a + b"
    )
    assert store.scripts.diff(KEY, "original") == store.scripts.diff(KEY, 1, "current")
    assert store.scripts.diff(KEY, 2, 2) == ""
    with pytest.raises(StoreError) as exc:
        store.scripts.diff(KEY, 1, 7)
    assert exc.value.code == "unknown_revision"


def test_history_is_bounded_and_keeps_original_and_current(tmp_path):
    with Store(tmp_path / "g.db", max_revisions=4) as store:
        store.scripts.record_success(KEY, "v1")
        store.scripts.record_success(KEY, "v2")
        store.scripts.rollback(KEY, 2)
        for i in range(3, 12):
            store.scripts.record_failure(KEY, f"bad {i}")
        # Original (1) and current (2) pinned; the two newest failures kept.
        assert [r.rev for r in store.scripts.history(KEY)] == [11, 10, 2, 1]
        with pytest.raises(StoreError) as exc:
            store.scripts.revision(KEY, 5)
        assert exc.value.code == "unknown_revision" and "evicted" in str(exc.value)
        # Numbers are never reused after eviction.
        assert store.scripts.record_success(KEY, "v12").rev == 12
        assert [r.rev for r in store.scripts.history(KEY)] == [12, 11, 10, 1]


def test_per_key_retention(tmp_path):
    with Store(tmp_path / "g.db", max_revisions=10) as store:
        for i in range(8):
            store.scripts.record_success(KEY, f"v{i}")
            store.scripts.record_success("other", f"v{i}")
        info = store.scripts.set_retention(KEY, 3)
        assert (info.revisions, info.max_revisions) == (3, 3)
        assert [r.rev for r in store.scripts.history(KEY)] == [8, 7, 1]
        assert store.scripts.info("other").revisions == 8
        store.scripts.record_success(KEY, "v8")
        assert [r.rev for r in store.scripts.history(KEY)] == [9, 8, 1]
        assert store.scripts.set_retention(KEY, None).max_revisions is None
    # The per-key limit lives in the file: another process's default does not override it.
    with Store(tmp_path / "g.db", max_revisions=50) as store:
        store.scripts.set_retention("other", 4)
    with Store(tmp_path / "g.db", max_revisions=50) as store:
        store.scripts.record_success("other", "again")
        assert store.scripts.info("other").revisions == 4


@pytest.mark.parametrize("bad", [0, 2, -1, 2.5, True, "5"])
def test_retention_limits_are_validated(tmp_path, bad):
    with pytest.raises(ConfigError):
        Store(tmp_path / "g.db", max_revisions=bad)
    with Store(tmp_path / "h.db") as store:
        store.scripts.record_success(KEY, "x")
        with pytest.raises(ConfigError):
            store.scripts.set_retention(KEY, bad)


def test_state_survives_reopen(tmp_path, clock):
    path = tmp_path / "g.db"
    with Store(path, clock=clock) as store:
        store.scripts.record_success(KEY, "v1")
        store.scripts.record_success(KEY, "v2")
        store.scripts.rollback(KEY, 1)
        before = store.export()["keys"]
    with Store(path, create=False) as store:
        assert store.export()["keys"] == before
        assert store.scripts.current(KEY).content == "v1"


def test_closed_store(tmp_path):
    store = Store(tmp_path / "g.db")
    store.close()
    store.close()
    assert store.closed and "closed" in repr(store)
    with pytest.raises(StoreError) as exc:
        store.scripts.current(KEY)
    assert exc.value.code == "closed"
    with pytest.raises(StoreError):
        store.scripts.record_success(KEY, "x")


def test_a_failed_write_changes_nothing(store, monkeypatch):
    store.scripts.record_success(KEY, "v1")
    before = store.export()["keys"]

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    # Fail in the middle of the transaction, after the revision row went in.
    monkeypatch.setattr(type(store.scripts), "_evict", broken)
    with pytest.raises(RuntimeError):
        store.scripts.record_success(KEY, "v2")
    monkeypatch.undo()
    assert store.export()["keys"] == before
    assert store.scripts.record_success(KEY, "v2").rev == 2


def test_threads_share_one_store(store):
    store.scripts.record_success(KEY, "start")
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(25):
                store.scripts.record_success(KEY, f"{n}-{i}")
                store.scripts.current(KEY)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert store.scripts.info(KEY).latest == 101
