"""The file: schema version, migration from version 1, files that are not stores."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from moonbox.store import SCHEMA_VERSION, Store, StoreError
from moonbox.store._schema import SCHEMA_V1


def _v1_store(path: Path) -> None:
    """A version-1 file as an older moonbox wrote it: an ok flag, no role or trace id."""
    conn = sqlite3.connect(path)
    for statement in SCHEMA_V1:
        conn.execute(statement)
    conn.executemany(
        "INSERT INTO keys (kind, key, original, current, next_rev, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [("script", "waves:main", 1, 3, 4, 30.0), ("data", "balance", 1, 2, 3, 20.0)])
    rows = [
        ("script", "waves:main", 1, "return 1", 10.0, "human", 1, None),
        ("script", "waves:main", 2, "return (", 20.0, "model", 0, "syntax error"),
        ("script", "waves:main", 3, "return 3", 30.0, None, 1, None),
        ("data", "balance", 1, "null", 10.0, None, 1, None),
        ("data", "balance", 2, '{"hp":3}', 20.0, "human", 1, None),
    ]
    from moonbox.store._overlay import content_hash

    conn.executemany(
        "INSERT INTO revisions (kind, key, rev, content, hash, recorded_at, author, ok, error) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(k, key, rev, text, content_hash(text), at, author, ok, err)
         for k, key, rev, text, at, author, ok, err in rows])
    conn.commit()
    conn.close()


def _version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT version FROM schema_version").fetchone()[0]
    finally:
        conn.close()


def test_new_store_is_at_the_current_version(tmp_path):
    with Store(tmp_path / "g.db") as store:
        assert store.schema_version == SCHEMA_VERSION == 2
    assert _version(tmp_path / "g.db") == 2
    conn = sqlite3.connect(tmp_path / "g.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_migration_from_version_1(tmp_path):
    path = tmp_path / "old.db"
    _v1_store(path)
    with Store(path) as store:
        assert store.schema_version == 2
        history = store.scripts.history("waves:main")
        assert [(r.rev, r.outcome, r.error, r.author, r.role, r.trace_id) for r in history] == [
            (3, "ok", None, None, None, None),
            (2, "failed", "syntax error", "model", None, None),
            (1, "ok", None, "human", None, None),
        ]
        assert store.scripts.current("waves:main").content == "return 3"
        assert store.data.current("balance").content == {"hp": 3}
        assert store.scripts.info("waves:main").max_revisions is None
        # The migrated file takes the new columns and the new rules.
        r = store.scripts.record_failure("waves:main", "x", role="programmer", trace_id="t-9")
        assert (r.rev, r.role, r.trace_id) == (4, "programmer", "t-9")
        with pytest.raises(StoreError) as exc:
            store.scripts.rollback("waves:main", 2)
        assert exc.value.code == "failed_revision"
        store.scripts.set_retention("waves:main", 3)
    assert _version(path) == 2
    with Store(path) as store:  # opening again is a no-op
        assert [r.rev for r in store.scripts.history("waves:main")] == [4, 3, 1]


def test_a_failed_migration_leaves_version_1(tmp_path, monkeypatch):
    path = tmp_path / "old.db"
    _v1_store(path)
    from moonbox.store import _schema

    broken = (*_schema._MIGRATIONS[1][:-2], "SELECT no_such_column FROM keys")
    monkeypatch.setitem(_schema._MIGRATIONS, 1, broken)
    with pytest.raises(StoreError) as exc:
        Store(path)
    assert exc.value.code == "corrupt_store" and "no_such_column" in str(exc.value)
    monkeypatch.undo()
    assert _version(path) == 1
    conn = sqlite3.connect(path)
    assert "ok" in [row[1] for row in conn.execute("PRAGMA table_info(revisions)")]
    conn.close()
    with Store(path) as store:
        assert store.scripts.current("waves:main").rev == 3


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "g.db"
    Store(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE schema_version SET version = 99")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError) as exc:
        Store(path)
    assert exc.value.code == "schema_too_new" and "upgrade moonbox" in str(exc.value)


def test_not_a_store(tmp_path):
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE players (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError) as exc:
        Store(other)
    assert exc.value.code == "not_a_store"
    text = tmp_path / "notes.txt"
    text.write_text("these are not the tables you are looking for\n" * 100)
    with pytest.raises(StoreError) as exc:
        Store(text)
    assert exc.value.code == "not_a_store"


def test_no_store_without_create(tmp_path):
    with pytest.raises(StoreError) as exc:
        Store(tmp_path / "missing.db", create=False)
    assert exc.value.code == "no_store"
    assert not (tmp_path / "missing.db").exists()
