"""The store's SQLite file: connection settings, schema versions and migrations.

One file per game. ``schema_version`` holds one row, the version the file is at; opening a
file migrates it to :data:`SCHEMA_VERSION` one step at a time, all steps in one
transaction, so a crash mid-migration leaves the file at its old version.

Version history:

1. The first layout: revisions had an ``ok`` flag (1 or 0) and no ``role`` or
   ``trace_id``; keys had no retention limit of their own.
2. ``outcome`` (``ok``/``failed``) replaces the flag, revisions gain ``role`` and
   ``trace_id``, keys gain ``max_revisions``.
"""

from __future__ import annotations

import sqlite3
from contextlib import suppress
from pathlib import Path

from ._errors import StoreError
from ._integrity import classify

__all__ = ["SCHEMA_V1", "SCHEMA_VERSION", "connect", "open_schema"]

SCHEMA_VERSION = 2

SCHEMA_V1: tuple[str, ...] = (
    "CREATE TABLE schema_version (version INTEGER NOT NULL)",
    """CREATE TABLE keys (
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        original INTEGER NOT NULL,
        current INTEGER NOT NULL,
        next_rev INTEGER NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (kind, key)
    )""",
    """CREATE TABLE revisions (
        id INTEGER PRIMARY KEY,
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        rev INTEGER NOT NULL,
        content TEXT NOT NULL,
        hash TEXT NOT NULL,
        recorded_at REAL NOT NULL,
        author TEXT,
        ok INTEGER NOT NULL,
        error TEXT,
        UNIQUE (kind, key, rev)
    )""",
    "INSERT INTO schema_version (version) VALUES (1)",
)
"""The version-1 layout, kept to migrate from (and to build old files in tests)."""

_REVISIONS_V2 = """CREATE TABLE {name} (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('script', 'data')),
    key TEXT NOT NULL,
    rev INTEGER NOT NULL CHECK (rev >= 1),
    content TEXT NOT NULL,
    hash TEXT NOT NULL,
    recorded_at REAL NOT NULL,
    author TEXT,
    role TEXT,
    trace_id TEXT,
    outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'failed')),
    error TEXT,
    UNIQUE (kind, key, rev)
)"""

_SCHEMA_V2: tuple[str, ...] = (
    "CREATE TABLE schema_version (version INTEGER NOT NULL)",
    """CREATE TABLE keys (
        kind TEXT NOT NULL CHECK (kind IN ('script', 'data')),
        key TEXT NOT NULL,
        original INTEGER NOT NULL,
        current INTEGER NOT NULL,
        next_rev INTEGER NOT NULL,
        updated_at REAL NOT NULL,
        max_revisions INTEGER,
        PRIMARY KEY (kind, key)
    )""",
    _REVISIONS_V2.format(name="revisions"),
    "INSERT INTO schema_version (version) VALUES (2)",
)

# MIGRATIONS[n] takes a file from version n to n + 1.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "ALTER TABLE keys ADD COLUMN max_revisions INTEGER",
        _REVISIONS_V2.format(name="revisions_v2"),
        """INSERT INTO revisions_v2 (id, kind, key, rev, content, hash, recorded_at, author,
                                     role, trace_id, outcome, error)
           SELECT id, kind, key, rev, content, hash, recorded_at, author, NULL, NULL,
                  CASE ok WHEN 0 THEN 'failed' ELSE 'ok' END, error
           FROM revisions""",
        "DROP TABLE revisions",
        "ALTER TABLE revisions_v2 RENAME TO revisions",
        "UPDATE schema_version SET version = 2",
    ),
}


def connect(path: Path, *, durable: bool, busy_timeout_s: float) -> sqlite3.Connection:
    """Open (or create) the file for writing, in WAL mode, with transactions under our control.

    Call it only on a file that passed the integrity check (or on a new one): setting the
    journal mode can write the file.

    Raises:
        StoreError: the failure, classified (see :func:`~._integrity.classify`).
    """
    try:
        conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None,
                               check_same_thread=False)
    except sqlite3.DatabaseError as exc:
        raise classify(exc, path, "opening it") from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        # FULL: a commit is on disk when it returns. NORMAL in WAL mode is still atomic
        # (never torn), but the last commits may be lost on a power cut.
        conn.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise classify(exc, path, "opening it") from exc
    return conn


def open_schema(conn: sqlite3.Connection, path: Path) -> int:
    """Create the schema in an empty file, or migrate an older one; return the version.

    Raises:
        StoreError: ``not_a_store`` for a database that holds other tables;
            ``schema_too_new`` for a file written by a newer moonbox.
        sqlite3.DatabaseError: for the caller to classify.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        tables = {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            for statement in _SCHEMA_V2:
                conn.execute(statement)
            conn.execute("COMMIT")
            return SCHEMA_VERSION
        if "schema_version" not in tables:
            raise StoreError(f"{path} is an SQLite database but not a versions store; check "
                             "the path", code="not_a_store")
        row = conn.execute("SELECT version FROM schema_version").fetchone()
        version = int(row[0]) if row else 0
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{path} is at schema version {version}, newer than this moonbox knows "
                f"({SCHEMA_VERSION}); upgrade moonbox to open it", code="schema_too_new")
        if version < 1:
            raise StoreError(f"{path} has no valid schema version; check the path",
                             code="not_a_store")
        while version < SCHEMA_VERSION:
            for statement in _MIGRATIONS[version]:
                conn.execute(statement)
            version += 1
        conn.execute("COMMIT")
        return version
    except BaseException:
        if conn.in_transaction:
            with suppress(sqlite3.DatabaseError):
                conn.execute("ROLLBACK")
        raise
