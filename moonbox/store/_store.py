"""The versions store: an SQLite file of script versions and data overlays per key.

Every key has an original, a current revision and a bounded history. A write is one
``BEGIN IMMEDIATE`` transaction: it waits (up to the busy timeout) for any other writer,
process or thread, then reads and writes under the file's write lock, so no update is lost
and a crash at any point leaves the state before or after the write, never a mix.
"""

from __future__ import annotations

import difflib
import json
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from .._errors import ConfigError
from . import _exchange, _salvage
from ._errors import FINDINGS_MAX, StoreCorrupt, StoreError
from ._integrity import (
    CHECK_MAX_BYTES,
    SQLITE_MAGIC,
    classify,
    file_findings,
    key_problem,
    page_size_of,
    quick_check,
    read_only_uri,
    revision_problem,
    wal_damage,
)
from ._model import KeyInfo, Kind, Outcome, Revision, RevisionRef, check_key
from ._overlay import apply_overlay, canonical_json, check_json, content_hash
from ._schema import connect, open_schema

__all__ = [
    "CHECK_MAX_BYTES", "DEFAULT_MAX_REVISIONS", "DataOverlays", "MIN_MAX_REVISIONS",
    "ScriptVersions", "Store",
]

DEFAULT_MAX_REVISIONS = 100
"""Revisions kept per key unless the store or the key says otherwise."""

MIN_MAX_REVISIONS = 3
"""The smallest retention limit: the original, the current and the newest revision."""

_REV_COLUMNS = "rev, content, hash, recorded_at, author, role, trace_id, outcome, error"
# Correlated subqueries: MAX is one index probe and COUNT a short index range per key,
# about three times faster than a join with GROUP BY over 10,000 keys x 50 revisions.
_INFO_SELECT = """
    SELECT k.key, k.original, k.current,
           (SELECT MAX(rev) FROM revisions r WHERE r.kind = k.kind AND r.key = k.key),
           (SELECT COUNT(*) FROM revisions r WHERE r.kind = k.kind AND r.key = k.key),
           k.max_revisions, k.updated_at
    FROM keys k
"""


class Store:
    """One game's versions: script versions (:attr:`scripts`) and data overlays (:attr:`data`).

    Open it once per process and share it between threads; two processes may open the same
    file and write at the same time. Use it as a context manager, or call :meth:`close`.

    Opening an existing file checks it first, through a read-only connection (see
    ``_integrity``): its size and header, its write-ahead log, and ``PRAGMA quick_check``
    of the whole file, or of the ``keys`` table only when the file is larger than
    ``check_max_bytes``. A damaged file still opens, read-only: :attr:`corruption` says
    what the check found, every write raises it (``corrupt_store``) and writes nothing,
    reads go on while they can (a read that meets damage raises ``corrupt_store``), and
    :meth:`export` salvages what can be read. Damage that a read or write meets later
    makes the store read-only the same way.

    Args:
        path: the SQLite file (one per game), created if missing unless ``create`` is false.
        max_revisions: revisions kept per key unless a key has its own limit (see
            ``set_retention``); at least :data:`MIN_MAX_REVISIONS`. The oldest are evicted
            first; a key's original and current revision are never evicted.
        create: create the file if it does not exist (or is empty).
        durable: a write is on disk when it returns (``synchronous=FULL``). With false, a
            power cut may lose the last writes; a crash still never tears one.
        busy_timeout_s: how long a write waits for another writer before failing.
        check_max_bytes: files (with their WAL) up to this size get the whole quick check
            on open, which reads every page (about 2 ms per MiB); larger ones get the
            ``keys`` table checked, and :meth:`check` checks the rest. ``None``: always
            the whole file.
        clock: the time source for ``recorded_at_s`` (Unix seconds); inject one in tests.

    Raises:
        ConfigError: a retention limit, timeout or check size that cannot be enforced.
        StoreError: ``no_store``, ``not_a_store``, ``schema_too_new``, ``io_error`` or
            ``busy`` (see :class:`StoreError`). A damaged file is not an error here: see
            :attr:`corruption`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_revisions: int = DEFAULT_MAX_REVISIONS,
        create: bool = True,
        durable: bool = True,
        busy_timeout_s: float = 30.0,
        check_max_bytes: int | None = CHECK_MAX_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        _check_retention(max_revisions)
        if not busy_timeout_s >= 0:
            raise ConfigError("busy_timeout_s must be zero or more seconds")
        if check_max_bytes is not None and (
                not isinstance(check_max_bytes, int) or isinstance(check_max_bytes, bool)
                or check_max_bytes < 0):
            raise ConfigError("check_max_bytes must be an int of zero or more bytes, or None")
        self.path = Path(path)
        self.max_revisions = max_revisions
        self._clock = clock
        self._lock = threading.RLock()
        self._durable = durable
        self._busy_timeout_s = busy_timeout_s
        self.corruption: StoreCorrupt | None = None
        """What the integrity check (or a later read or write) found, or ``None``."""
        self.check_scope: Literal["file", "keys"] = "file"
        """What the check on open read: the whole ``file``, or the ``keys`` table only
        (a file larger than ``check_max_bytes``)."""
        self.schema_version: int | None = None
        """The file's schema version (``None`` if a damaged file does not say)."""
        self._conn: sqlite3.Connection | None = None
        self._conn_read_only = False
        self._conn = self._open(create, check_max_bytes)
        self.scripts = ScriptVersions(self)
        self.data = DataOverlays(self)

    def __repr__(self) -> str:
        state = "closed" if self._conn is None else (
            "read-only, damaged" if self.corruption is not None else "open")
        return f"<Store {str(self.path)!r} {state}>"

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file. Idempotent; every later operation raises ``closed``."""
        with self._lock:
            if self._conn is not None:
                if self.corruption is not None:
                    self._go_read_only()  # so that closing cannot checkpoint into the file
                self._conn.close()
                self._conn = None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._conn is None

    @property
    def read_only(self) -> bool:
        """Whether writes are refused: the file is damaged (see :attr:`corruption`)."""
        return self.corruption is not None

    def check(self) -> StoreCorrupt | None:
        """Check the whole file now, however large (see ``check_max_bytes``); the verdict.

        Returns ``None`` if the file is sound, else the damage found (also kept in
        :attr:`corruption`, and the store is read-only from then on).

        Raises:
            StoreError: ``closed``, ``io_error`` or ``busy``.
        """
        with self._lock:
            conn = self._live()
            if self.corruption is not None:
                return self.corruption
            try:
                findings = self._findings(conn, _read_header(self.path), None,
                                          read_only=self._conn_read_only)
            except OSError as exc:
                raise self._os_error(exc) from exc
            except sqlite3.DatabaseError as exc:
                error = self._failed(exc, "checking it")
                if isinstance(error, StoreCorrupt):
                    return error
                raise error from exc
            self.check_scope = "file"
            if findings:
                return self._damaged(StoreCorrupt(str(self.path), findings))
            return None

    def versions(self, kind: Kind) -> ScriptVersions | DataOverlays:
        """:attr:`scripts` for ``script``, :attr:`data` for ``data``."""
        if kind == "script":
            return self.scripts
        if kind == "data":
            return self.data
        raise ValueError(f"kind must be 'script' or 'data', not {kind!r}")

    def keys(self, kind: Kind | None = None, *, prefix: str = "") -> list[KeyInfo]:
        """Every key (of one kind, if given) whose name starts with ``prefix``, by kind and key."""
        kinds: tuple[Kind, ...] = (kind,) if kind else ("data", "script")
        out: list[KeyInfo] = []
        with self._transaction(write=False, doing="listing the keys") as conn:
            for k in kinds:
                out += self._key_infos(conn, k, prefix)
        return out

    def reset_all(self, kind: Kind | None = None, *, prefix: str = "") -> int:
        """Set every key (of one kind, if given; under ``prefix``) back to its original.

        One transaction: all keys are reset, or (on a crash) none. History is kept, so each
        key can be rolled forward again. Returns how many keys changed.

        Raises:
            StoreError: ``corrupt_store`` on a damaged store (nothing is reset).
        """
        kinds: tuple[Kind, ...] = (kind,) if kind else ("data", "script")
        now = self._clock()
        changed = 0
        with self._transaction(write=True) as conn:
            for k in kinds:
                changed += conn.execute(
                    "UPDATE keys SET current = original, updated_at = ? "
                    "WHERE kind = ? AND current != original AND substr(key, 1, ?) = ?",
                    (now, k, len(prefix), prefix),
                ).rowcount
        return changed

    def export(self) -> dict[str, Any]:
        """Everything in the store as plain data (the shape of :meth:`export_json`).

        On a damaged store (see :attr:`corruption`; a damaged row met here makes it one)
        this salvages: every key and revision that can still be read, row by row, and
        under ``lost`` one entry for each revision, key or key pointer that could not be
        read, or rows that could not be read and that nothing names (see ``_salvage``).
        Such an export imports like any other. An export of a sound store has no ``lost``.
        """
        now = self._clock()
        if self.corruption is None:
            try:
                with self._transaction(write=False, doing="exporting") as conn:
                    return _exchange.export_rows(conn, now, str(self.path))
            except StoreCorrupt:
                pass  # the store is read-only now: salvage what can be read
        with self._lock:
            return _salvage.salvage_rows(self._live(), now)

    def export_json(self, path: str | os.PathLike[str], *,
                    data: dict[str, Any] | None = None) -> int:
        """Write :meth:`export` (or ``data``, an export already made) to a readable JSON file,
        atomically; return the key count. A salvaged export lists what it lost in the file."""
        if data is None:
            data = self.export()
        _exchange.write_json(data, Path(path))
        return len(data["keys"])

    def import_data(self, data: Any, *, replace: bool = False) -> int:
        """Load an export (as plain data) into the store, in one transaction; return the key count.

        Each key in the export arrives with its whole history, revision numbers and
        original and current as they were. Keys already in the store are refused unless
        ``replace`` is true, which replaces them (their history too); other keys are
        untouched. A salvaged export's ``lost`` list is not imported.

        Raises:
            StoreError: ``invalid_export`` for a malformed export or a hash that does not
                match its content; ``key_exists`` for keys present without ``replace``;
                ``corrupt_store`` on a damaged store.
        """
        keys = _exchange.parse_export(data)
        with self._transaction(write=True) as conn:
            _exchange.import_rows(conn, keys, replace=replace)
        return len(keys)

    def import_json(self, path: str | os.PathLike[str], *, replace: bool = False) -> int:
        """:meth:`import_data` from a file written by :meth:`export_json`."""
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot read the export {path}: {exc}",
                             code="invalid_export") from None
        return self.import_data(data, replace=replace)

    # --- opening and checking ------------------------------------------------------------

    def _open(self, create: bool, check_max_bytes: int | None) -> sqlite3.Connection:
        """The connection to use: read-write on a sound (or new) file, read-only on a
        damaged one (then :attr:`corruption` is set)."""
        path = self.path
        try:
            info = path.stat()
        except FileNotFoundError:
            left = _size(Path(f"{path}-wal"))
            if left:
                # Creating a file here would have SQLite delete the log of another store.
                raise StoreError(
                    f"no versions store at {path}, but {path}-wal is there ({left} bytes): "
                    "the write-ahead log of a store moved or deleted without it; put it back "
                    "beside its store, or move it aside, then open again", code="no_store",
                    path=str(path)) from None
            if not create:
                raise StoreError(
                    f"no versions store at {path}; pass the path of an existing store, or "
                    "create one by recording into it or importing an export",
                    code="no_store", path=str(path)) from None
            return self._open_for_writing()
        except OSError as exc:
            raise self._os_error(exc) from exc
        if stat.S_ISDIR(info.st_mode):
            raise StoreError(f"{path} is a directory, not a versions store; pass the path of "
                             "the store's file", code="not_a_store", path=str(path))
        try:
            header = _read_header(path)
        except OSError as exc:
            raise self._os_error(exc) from exc
        wal_bytes = _size(Path(f"{path}-wal"))
        if not header and not wal_bytes:
            if not create:
                raise StoreError(
                    f"{path} is an empty file, not a versions store; pass the path of an "
                    "existing store, or create one by recording into it or importing an "
                    "export", code="no_store", path=str(path))
            return self._open_for_writing()  # a store whose creation was cut short
        if header and not header.startswith(SQLITE_MAGIC[:len(header)]):
            raise StoreError(
                f"{path} is not an SQLite database, so not a versions store; check the path "
                "(if it was a store, its first page is destroyed: import an export of it "
                "into a new store)", code="not_a_store", path=str(path))
        if len(header) < 100:
            findings = [f"the file is {len(header)} bytes, shorter than an SQLite header"
                        + (f", and its write-ahead log holds {wal_bytes} bytes" if wal_bytes
                           else "")]
            return self._open_damaged(findings)
        try:
            checker = sqlite3.connect(read_only_uri(path), uri=True, isolation_level=None,
                                      timeout=self._busy_timeout_s, check_same_thread=False)
        except sqlite3.DatabaseError as exc:
            raise classify(exc, self.path, "opening it") from exc
        try:
            findings = self._findings(checker, header, check_max_bytes, read_only=True)
        except sqlite3.DatabaseError as exc:
            error = classify(exc, path, "checking it")
            if not isinstance(error, StoreCorrupt):
                checker.close()
                if (getattr(exc, "sqlite_errorname", None) or "").startswith("SQLITE_READONLY"):
                    # A read-only connection cannot roll back a hot journal or rebuild
                    # the WAL index: check through a writing one, before anything else.
                    return self._check_writing(header, check_max_bytes)
                raise error from exc
            findings = list(error.findings)
        if findings:
            self.corruption = StoreCorrupt(str(path), findings)
            _as_reader(checker)
            self.schema_version = _read_version(checker)
            self._conn_read_only = True
            return checker
        checker.close()
        return self._open_for_writing()

    def _open_damaged(self, findings: list[str]) -> sqlite3.Connection:
        """A connection to a file too short to hold an SQLite header: ``immutable``, so
        SQLite takes no lock and leaves the WAL alone (it deletes the WAL of an empty file,
        even from a read-only connection). Every read of it fails as damage."""
        self.corruption = StoreCorrupt(str(self.path), findings)
        try:
            conn = sqlite3.connect(read_only_uri(self.path) + "&immutable=1", uri=True,
                                   isolation_level=None, check_same_thread=False)
        except sqlite3.DatabaseError as exc:
            raise classify(exc, self.path, "opening it") from exc
        _as_reader(conn)
        self._conn_read_only = True
        return conn

    def _open_for_writing(self) -> sqlite3.Connection:
        """Open read-write and create or migrate the schema (a sound or new file only)."""
        conn = connect(self.path, durable=self._durable, busy_timeout_s=self._busy_timeout_s)
        try:
            self.schema_version = open_schema(conn, self.path)
        except sqlite3.DatabaseError as exc:
            conn.close()  # the schema's transaction rolled back: the file is as it was
            raise classify(exc, self.path, "opening its schema") from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_writing(self, header: bytes, check_max_bytes: int | None) -> sqlite3.Connection:
        """Check through a plain read-write connection, which sets nothing on the file
        (its first read may roll back a hot journal, as any opening would)."""
        try:
            conn = sqlite3.connect(self.path, timeout=self._busy_timeout_s,
                                   isolation_level=None, check_same_thread=False)
        except sqlite3.DatabaseError as exc:
            raise classify(exc, self.path, "opening it") from exc
        try:
            findings = self._findings(conn, header, check_max_bytes, read_only=False)
        except sqlite3.DatabaseError as exc:
            error = classify(exc, self.path, "checking it")
            if not isinstance(error, StoreCorrupt):
                conn.close()
                raise error from exc
            findings = list(error.findings)
        if not findings:
            conn.close()
            return self._open_for_writing()
        self.corruption = StoreCorrupt(str(self.path), findings)
        self.schema_version = _read_version(conn)
        return conn  # made read-only at first use, or at close

    def _findings(self, conn: sqlite3.Connection, header: bytes, check_max_bytes: int | None,
                  *, read_only: bool) -> list[str]:
        """What the checks on ``conn`` find wrong with the file (``[]``: sound). On a
        ``read_only`` connection a check that cannot start is run again, taking the file
        as it is, for its details.

        Raises:
            sqlite3.DatabaseError: a failure that is not damage (a lock, permissions).
        """
        page_size = page_size_of(header)
        try:
            page_count = conn.execute("PRAGMA page_count").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            if not isinstance(classify(exc, self.path, ""), StoreCorrupt):
                raise
            page_count = 0
        findings = file_findings(self.path, header, page_size, page_count)
        total = _size(self.path) + _size(Path(f"{self.path}-wal"))
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            if check_max_bytes is None or total <= check_max_bytes or "keys" not in tables:
                self.check_scope = "file"
                findings += quick_check(conn)
            else:
                self.check_scope = "keys"
                findings += quick_check(conn, tables=tuple(
                    t for t in ("schema_version", "keys") if t in tables))
        except sqlite3.DatabaseError as exc:
            if not isinstance(classify(exc, self.path, ""), StoreCorrupt):
                raise
            findings.append(str(exc))
            if read_only:
                findings += _details(conn)
        damage = wal_damage(self.path, page_size)
        if damage is not None:
            findings.append(damage)
        return list(dict.fromkeys(findings))[:FINDINGS_MAX]

    # --- damage ------------------------------------------------------------------------

    def _damaged(self, error: StoreCorrupt) -> StoreCorrupt:
        """Remember ``error`` as the verdict (the first one stays); return it to raise.

        The connection becomes read-only at the next use (see :meth:`_live`), never in
        the middle of a transaction."""
        with self._lock:
            if self.corruption is None:
                self.corruption = error
        return error

    def _go_read_only(self) -> None:
        """Swap the read-write connection for a read-only one, which no close can make
        write (SQLite checkpoints the WAL into the file when its last writer closes)."""
        conn = self._conn
        if conn is None or self._conn_read_only or conn.in_transaction:
            return  # (in a transaction: at the next use, once it has ended)
        self._conn_read_only = True
        with suppress(sqlite3.DatabaseError):
            conn.execute("PRAGMA query_only = 1")
        try:
            ro = sqlite3.connect(read_only_uri(self.path), uri=True, isolation_level=None,
                                 timeout=self._busy_timeout_s, check_same_thread=False)
        except sqlite3.DatabaseError:
            return  # keep the read-write one, refusing writes
        _as_reader(ro)
        self._conn = ro
        conn.close()

    def _failed(self, exc: sqlite3.DatabaseError, doing: str, *, refused: bool = False,
                kind: str | None = None, key: str | None = None) -> StoreError:
        """The StoreError a failed SQLite call stands for; damage becomes the verdict."""
        error = classify(exc, self.path, doing, refused=refused, kind=kind, key=key)
        if isinstance(error, StoreCorrupt):
            self._damaged(error)
        return error

    def _os_error(self, exc: OSError) -> StoreError:
        return StoreError(f"cannot use the versions store {self.path} "
                          f"({exc.strerror or exc}); check the path and its permissions",
                          code="io_error", path=str(self.path))

    def _refusal(self) -> StoreCorrupt:
        assert self.corruption is not None
        return StoreCorrupt(str(self.path), self.corruption.findings,
                            doing=self.corruption.doing, refused=True)

    # --- transactions ------------------------------------------------------------------

    def _live(self) -> sqlite3.Connection:
        """The connection, read-only once the file is known to be damaged."""
        if self._conn is None:
            raise StoreError("the store is closed; open it again", code="closed")
        if self.corruption is not None and not self._conn_read_only:
            self._go_read_only()
        assert self._conn is not None
        return self._conn

    @contextmanager
    def _transaction(self, *, write: bool, doing: str = "reading", kind: str | None = None,
                     key: str | None = None) -> Iterator[sqlite3.Connection]:
        """One transaction; a write one holds the file's write lock from its first statement.

        A failed SQLite call comes out as a :class:`StoreError`; on a damaged store a write
        is refused before it begins."""
        with self._lock:
            conn = self._live()
            if write and self.corruption is not None:
                raise self._refusal()
            try:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        with suppress(sqlite3.DatabaseError):
                            conn.execute("ROLLBACK")
                    raise
            except sqlite3.DatabaseError as exc:
                raise self._failed(exc, "writing" if write else doing, refused=write,
                                   kind=kind, key=key) from exc
            except StoreCorrupt as exc:
                self._damaged(exc)
                raise

    def _query(self, sql: str, params: tuple[Any, ...], *, doing: str = "reading",
               kind: str | None = None, key: str | None = None) -> Any:
        """One read statement (its own snapshot), first row or ``None``."""
        with self._lock:
            conn = self._live()
            try:
                return conn.execute(sql, params).fetchone()
            except sqlite3.DatabaseError as exc:
                raise self._failed(exc, doing, kind=kind, key=key) from exc

    def _key_infos(self, conn: sqlite3.Connection, kind: Kind, prefix: str) -> list[KeyInfo]:
        rows = conn.execute(
            _INFO_SELECT + " WHERE k.kind = ? AND substr(k.key, 1, ?) = ? ORDER BY k.key",
            (kind, len(prefix), prefix)).fetchall()
        return [self._key_info(kind, row) for row in rows]

    def _key_info(self, kind: Kind, row: Any) -> KeyInfo:
        key, original, current, latest, count, limit, updated = row
        problem = key_problem(original, current, latest, limit, updated)
        if problem is not None:
            raise self._damaged(StoreCorrupt(
                str(self.path), (f"{kind} {key!r}: {problem}",),
                doing=f"reading {kind} {key!r}", kind=kind, key=key))
        return KeyInfo(kind, key, original, current, latest, count, limit, updated)


def _read_header(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(100)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_version(conn: sqlite3.Connection) -> int | None:
    try:
        row = conn.execute("SELECT version FROM schema_version").fetchone()
    except sqlite3.DatabaseError:
        return None
    return row[0] if row and isinstance(row[0], int) else None


def _details(conn: sqlite3.Connection) -> list[str]:
    """What the quick check finds on a read-only connection once it takes the file as it
    is (``writable_schema``), for a file it could not even start on: of the whole file,
    or else table by table."""
    try:
        conn.execute("PRAGMA writable_schema = ON")
        try:
            return quick_check(conn)
        except sqlite3.DatabaseError:
            pass
        found = []
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                     "ORDER BY name").fetchall():
            try:
                found += [f"table {table}: {f}" for f in quick_check(conn, tables=(table,))]
            except sqlite3.DatabaseError as exc:
                found.append(f"table {table}: {exc}")
        return found
    except sqlite3.DatabaseError:
        return []
    finally:
        with suppress(sqlite3.DatabaseError):
            conn.execute("PRAGMA writable_schema = OFF")


def _as_reader(conn: sqlite3.Connection) -> None:
    """Set up a read-only connection to a damaged file: it takes the file as it is
    (``writable_schema``: a file shorter than its header says is read as far as it goes),
    and it holds its shared lock on the file (it does once it has read), so that no other
    connection of this process closing can checkpoint into the file."""
    with suppress(sqlite3.DatabaseError):
        conn.execute("PRAGMA writable_schema = ON")
    with suppress(sqlite3.DatabaseError):
        conn.execute("PRAGMA user_version").fetchone()


class _Versions:
    """The operations both kinds share; :class:`ScriptVersions` and :class:`DataOverlays`."""

    kind: Kind

    def __init__(self, store: Store) -> None:
        self._store = store

    # --- what a subclass decides -------------------------------------------------------

    def _encode(self, key: str, content: Any, outcome: Outcome) -> str:
        raise NotImplementedError

    def _decode(self, text: str) -> Any:
        raise NotImplementedError

    def _check_current(self, key: str, text: str) -> None:
        """Refuse content that may not become current (data: the model says no)."""

    def _new_key(self, conn: sqlite3.Connection, key: str, outcome: Outcome, now: float) -> int:
        """Create the key's row (and any implicit original); return the next revision."""
        raise NotImplementedError

    # --- recording ---------------------------------------------------------------------

    def record_success(
        self, key: str, content: Any, *, author: str | None = None, role: str | None = None,
        trace_id: str | None = None,
    ) -> Revision:
        """Record a version that ran (or validated): it becomes current.

        Raises:
            StoreError: ``invalid_key``, ``invalid_payload``, ``unregistered_key`` (data).
        """
        return self._record(key, content, "ok", None, author, role, trace_id)

    def record_failure(
        self, key: str, content: Any, *, error: str | None = None, author: str | None = None,
        role: str | None = None, trace_id: str | None = None,
    ) -> Revision:
        """Record a failed attempt: kept in the history, never current.

        Raises:
            StoreError: ``invalid_key``, ``invalid_payload``, ``unknown_key`` (scripts:
                a key starts with a success, its original).
        """
        if error is not None and not isinstance(error, str):
            raise TypeError("error must be a string or None")
        return self._record(key, content, "failed", error, author, role, trace_id)

    def _record(self, key: str, content: Any, outcome: Outcome, error: str | None,
                author: str | None, role: str | None, trace_id: str | None) -> Revision:
        check_key(key, self.kind)
        for name, value in (("author", author), ("role", role), ("trace_id", trace_id)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a string or None")
        text = self._encode(key, content, outcome)
        digest = content_hash(text)
        now = self._store._clock()
        with self._store._transaction(write=True) as conn:
            row = conn.execute(
                "SELECT original, current, next_rev, max_revisions FROM keys "
                "WHERE kind = ? AND key = ?", (self.kind, key)).fetchone()
            if row is None:
                rev = self._new_key(conn, key, outcome, now)
                original, current, limit = 1, 1, None
            else:
                original, current, rev, limit = row
                problem = key_problem(original, current, rev, limit, now)
                if problem is not None:
                    raise self._damage(key, problem, "writing", refused=True)
            if outcome == "ok":
                current = rev
            conn.execute(
                "UPDATE keys SET current = ?, next_rev = ?, updated_at = ? "
                "WHERE kind = ? AND key = ?", (current, rev + 1, now, self.kind, key))
            conn.execute(
                f"INSERT INTO revisions (kind, key, {_REV_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (self.kind, key, rev, text, digest, now, author, role, trace_id, outcome, error))
            self._evict(conn, key, original, current, limit)
        return Revision(self.kind, key, rev, self._decode(text), digest, now, author, role,
                        trace_id, outcome, error)

    def _evict(self, conn: sqlite3.Connection, key: str, original: int, current: int,
               limit: int | None) -> None:
        limit = limit or self._store.max_revisions
        (count,) = conn.execute("SELECT COUNT(*) FROM revisions WHERE kind = ? AND key = ?",
                                (self.kind, key)).fetchone()
        if count > limit:
            conn.execute(
                "DELETE FROM revisions WHERE id IN (SELECT id FROM revisions "
                "WHERE kind = ? AND key = ? AND rev NOT IN (?, ?) ORDER BY rev LIMIT ?)",
                (self.kind, key, original, current, count - limit))

    # --- reading -----------------------------------------------------------------------

    def current(self, key: str) -> Revision:
        """The revision in use.

        Raises:
            StoreError: ``unknown_key``.
        """
        row = self._store._query(
            f"SELECT {_REV_COLUMNS} FROM keys k JOIN revisions r "
            "ON r.kind = k.kind AND r.key = k.key AND r.rev = k.current "
            "WHERE k.kind = ? AND k.key = ?", (self.kind, key), **self._reading(key))
        if row is None:
            raise self._unknown_key(key)
        return self._revision(key, row)

    def revision(self, key: str, rev: RevisionRef) -> Revision:
        """One revision: a number, ``original`` or ``current``.

        Raises:
            StoreError: ``unknown_key``; ``unknown_revision`` (never recorded or evicted).
        """
        with self._store._transaction(write=False, **self._reading(key)) as conn:
            return self._fetch(conn, key, rev)

    def original(self, key: str) -> Revision:
        """The revision the key started from (see :meth:`revision`)."""
        return self.revision(key, "original")

    def history(self, key: str, *, limit: int | None = None) -> list[Revision]:
        """The kept revisions of ``key``, newest first, at most ``limit`` of them.

        Raises:
            StoreError: ``unknown_key``.
        """
        if limit is not None and limit < 0:
            raise ValueError("limit must be zero or more")
        with self._store._transaction(write=False, **self._reading(key)) as conn:
            rows = conn.execute(
                f"SELECT {_REV_COLUMNS} FROM revisions WHERE kind = ? AND key = ? "
                "ORDER BY rev DESC LIMIT ?",
                (self.kind, key, -1 if limit is None else limit)).fetchall()
            if not rows and self._key_row(conn, key) is None:
                raise self._unknown_key(key)
        return [self._revision(key, row) for row in rows]

    def info(self, key: str) -> KeyInfo:
        """Where ``key`` stands: original, current, latest, how many revisions.

        Raises:
            StoreError: ``unknown_key``.
        """
        with self._store._transaction(write=False, **self._reading(key)) as conn:
            row = conn.execute(_INFO_SELECT + " WHERE k.kind = ? AND k.key = ?",
                               (self.kind, key)).fetchone()
        if row is None:
            raise self._unknown_key(key)
        return self._store._key_info(self.kind, row)

    def keys(self, *, prefix: str = "") -> list[KeyInfo]:
        """Every key of this kind whose name starts with ``prefix``, sorted by key."""
        with self._store._transaction(write=False, doing=f"listing the {self.kind} keys") as conn:
            return self._store._key_infos(conn, self.kind, prefix)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._store._query(
            "SELECT 1 FROM keys WHERE kind = ? AND key = ?", (self.kind, key),
            **self._reading(key)) is not None

    def diff(self, key: str, a: RevisionRef, b: RevisionRef = "current", *,
             context: int = 3) -> str:
        """A unified diff from revision ``a`` to ``b`` (``""`` if they are the same).

        Data overlays are compared as indented JSON with sorted keys.

        Raises:
            StoreError: ``unknown_key``, ``unknown_revision``.
        """
        with self._store._transaction(write=False, **self._reading(key)) as conn:
            old, new = self._fetch(conn, key, a), self._fetch(conn, key, b)
        lines = difflib.unified_diff(
            self._diff_text(old.content).splitlines(), self._diff_text(new.content).splitlines(),
            fromfile=f"{key}@{old.rev}", tofile=f"{key}@{new.rev}", lineterm="", n=context)
        return "\n".join(lines)

    def _diff_text(self, content: Any) -> str:
        return str(content)

    # --- moving current ----------------------------------------------------------------

    def rollback(self, key: str, rev: RevisionRef) -> Revision:
        """Make an earlier (or later) successful revision current again; return it.

        History is unchanged: later revisions stay, and can be rolled back to in turn.

        Raises:
            StoreError: ``unknown_key``, ``unknown_revision``, ``failed_revision`` (a
                failed attempt never becomes current), ``invalid_payload`` (data whose
                registered model now rejects it).
        """
        now = self._store._clock()
        with self._store._transaction(write=True) as conn:
            target = self._fetch(conn, key, rev, raw=True)
            if target.outcome != "ok":
                raise StoreError(
                    f"{self.kind} {key!r} revision {target.rev} is a failed attempt and cannot "
                    "become current; roll back to a revision whose outcome is ok",
                    code="failed_revision", kind=self.kind, key=key, rev=target.rev)
            self._check_current(key, target.content)
            conn.execute("UPDATE keys SET current = ?, updated_at = ? WHERE kind = ? AND key = ?",
                         (target.rev, now, self.kind, key))
        return self._decoded(target)

    def reset(self, key: str) -> Revision:
        """Make the key's original current again; return it.

        Raises:
            StoreError: ``unknown_key``.
        """
        return self.rollback(key, "original")

    def reset_all(self, *, prefix: str = "") -> int:
        """Reset every key of this kind under ``prefix``, in one transaction (see :meth:`Store.reset_all`)."""
        return self._store.reset_all(self.kind, prefix=prefix)

    def set_retention(self, key: str, max_revisions: int | None) -> KeyInfo:
        """Give ``key`` its own retention limit (``None``: the store's), evicting at once.

        Raises:
            ConfigError: a limit below :data:`MIN_MAX_REVISIONS`.
            StoreError: ``unknown_key``.
        """
        if max_revisions is not None:
            _check_retention(max_revisions)
        with self._store._transaction(write=True) as conn:
            row = self._key_row(conn, key)
            if row is None:
                raise self._unknown_key(key)
            conn.execute("UPDATE keys SET max_revisions = ? WHERE kind = ? AND key = ?",
                         (max_revisions, self.kind, key))
            self._evict(conn, key, row[0], row[1], max_revisions)
        return self.info(key)

    # --- plumbing ----------------------------------------------------------------------

    def _key_row(self, conn: sqlite3.Connection, key: str) -> Any:
        return conn.execute("SELECT original, current FROM keys WHERE kind = ? AND key = ?",
                            (self.kind, key)).fetchone()

    def _fetch(self, conn: sqlite3.Connection, key: str, rev: RevisionRef, *,
               raw: bool = False) -> Revision:
        if isinstance(rev, str):
            row = self._key_row(conn, key)
            if row is None:
                raise self._unknown_key(key)
            if rev not in ("original", "current"):
                raise StoreError(
                    f"{rev!r} is not a revision; give a number, 'original' or 'current'",
                    code="unknown_revision", kind=self.kind, key=key)
            number = row[0] if rev == "original" else row[1]
        elif isinstance(rev, int) and not isinstance(rev, bool):
            number = rev
        else:
            raise TypeError("a revision is an int, 'original' or 'current'")
        found = conn.execute(
            f"SELECT {_REV_COLUMNS} FROM revisions WHERE kind = ? AND key = ? AND rev = ?",
            (self.kind, key, number)).fetchone()
        if found is None:
            if self._key_row(conn, key) is None:
                raise self._unknown_key(key)
            raise StoreError(
                f"{self.kind} {key!r} has no revision {number} (never recorded, or evicted by "
                "retention); list its history for the revisions kept",
                code="unknown_revision", kind=self.kind, key=key, rev=number)
        return self._revision(key, found, raw=raw)

    def _revision(self, key: str, row: Any, *, raw: bool = False) -> Revision:
        problem = revision_problem(row)
        if problem is not None:
            raise self._damage(key, f"revision {row[0]!r}: {problem}", f"reading {self.kind} "
                               f"{key!r}", rev=row[0] if isinstance(row[0], int) else None)
        rev, text, digest, at, author, role, trace_id, outcome, error = row
        return Revision(self.kind, key, rev, text if raw else self._decode(text), digest, at,
                        author, role, trace_id, outcome, error)

    def _decoded(self, raw: Revision) -> Revision:
        return Revision(raw.kind, raw.key, raw.rev, self._decode(raw.content), raw.hash,
                        raw.recorded_at_s, raw.author, raw.role, raw.trace_id, raw.outcome,
                        raw.error)

    def _reading(self, key: str) -> dict[str, Any]:
        return {"doing": f"reading {self.kind} {key!r}", "kind": self.kind, "key": key}

    def _damage(self, key: str, problem: str, doing: str, *, rev: int | None = None,
                refused: bool = False) -> StoreCorrupt:
        """A damaged row of ``key``: the store's verdict from now on."""
        return self._store._damaged(StoreCorrupt(
            str(self._store.path), (f"{self.kind} {key!r} {problem}",), doing=doing,
            refused=refused, kind=self.kind, key=key, rev=rev))

    def _unknown_key(self, key: str) -> StoreError:
        return StoreError(
            f"no {self.kind} key {key!r} in the store; list the keys to see which exist",
            code="unknown_key", kind=self.kind, key=key)

    def _invalid(self, key: str, message: str) -> StoreError:
        return StoreError(message, code="invalid_payload", kind=self.kind, key=key)


class ScriptVersions(_Versions):
    """Lua source per key (a mod script such as ``waves:main``, or a logic slot).

    A key starts with its first successful record, which becomes its original (the script
    as shipped, or the first version that ran). A failed attempt needs that original first.
    """

    kind: Kind = "script"

    def _encode(self, key: str, content: Any, outcome: Outcome) -> str:
        if not isinstance(content, str):
            raise self._invalid(
                key, f"script {key!r}: the source must be text (str), not "
                f"{type(content).__name__}; decode it as UTF-8 first")
        try:
            content.encode("utf-8")
        except UnicodeEncodeError:
            raise self._invalid(
                key, f"script {key!r}: the source holds characters that are not valid "
                "Unicode (lone surrogates); decode it strictly first") from None
        return content

    def _decode(self, text: str) -> str:
        return text

    def _new_key(self, conn: sqlite3.Connection, key: str, outcome: Outcome, now: float) -> int:
        if outcome != "ok":
            raise StoreError(
                f"no script key {key!r} in the store to record a failed attempt against; "
                "record its original (a version that ran) first", code="unknown_key",
                kind=self.kind, key=key)
        conn.execute(
            "INSERT INTO keys (kind, key, original, current, next_rev, updated_at) "
            "VALUES (?, ?, 1, 1, 1, ?)", (self.kind, key, now))
        return 1


class DataOverlays(_Versions):
    """A JSON-compatible overlay per key (game balance, spawn tables) over base data.

    The host registers, per key, a pydantic model and the base data as shipped
    (:meth:`register`). An overlay becomes current only if the base with the overlay applied
    validates against the model. Revision 1 of every data key is its original, the overlay
    ``None``: the base as shipped, so :meth:`reset` always returns to it. See
    :func:`~moonbox.store.apply_overlay` for the merge rule.
    """

    kind: Kind = "data"

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._registered: dict[str, tuple[type[BaseModel], Any]] = {}

    def register(self, key: str, model: type[BaseModel], base: Any) -> None:
        """Declare the model and the base data of ``key`` for this process.

        Raises:
            StoreError: ``invalid_key``; ``invalid_payload`` if ``base`` is not
                JSON-compatible or does not validate against ``model``.
        """
        check_key(key, self.kind)
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError("model must be a pydantic BaseModel subclass")
        try:
            check_json(base, "base")
        except ValueError as exc:
            raise self._invalid(key, f"data {key!r}: {exc}") from None
        self._validate(key, model, base, "the base data")
        self._registered[key] = (model, json.loads(canonical_json(base)))

    def registered(self, key: str) -> bool:
        """Whether ``key`` has a model and base data in this process."""
        return key in self._registered

    def effective(self, key: str) -> Any:
        """The base data of ``key`` with its current overlay applied (a fresh copy).

        Raises:
            StoreError: ``unregistered_key`` if the key has no base data registered.
        """
        if key not in self._registered:
            raise self._unregistered(key, "compute its effective value")
        base = self._registered[key][1]
        overlay = self.current(key).content if key in self else None
        return apply_overlay(base, overlay)

    def _encode(self, key: str, content: Any, outcome: Outcome) -> str:
        try:
            check_json(content)
        except ValueError as exc:
            raise self._invalid(key, f"data {key!r}: {exc}") from None
        text = canonical_json(content)
        if outcome == "ok":
            if key not in self._registered:
                raise self._unregistered(key, "validate an overlay before it becomes current")
            self._check_current(key, text)
        return text

    def _decode(self, text: str) -> Any:
        return json.loads(text)

    def _diff_text(self, content: Any) -> str:
        return json.dumps(content, indent=2, sort_keys=True, ensure_ascii=False)

    def _check_current(self, key: str, text: str) -> None:
        if key in self._registered:
            model, base = self._registered[key]
            self._validate(key, model, apply_overlay(base, json.loads(text)),
                           "the base with this overlay")

    def _validate(self, key: str, model: type[BaseModel], value: Any, what: str) -> None:
        try:
            model.model_validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"]) or "value"
            raise self._invalid(
                key, f"data {key!r}: {what} does not validate against {model.__name__}: "
                f"{loc}: {first['msg']}; fix the payload") from None

    def _new_key(self, conn: sqlite3.Connection, key: str, outcome: Outcome, now: float) -> int:
        text = canonical_json(None)
        conn.execute(
            "INSERT INTO keys (kind, key, original, current, next_rev, updated_at) "
            "VALUES (?, ?, 1, 1, 2, ?)", (self.kind, key, now))
        conn.execute(
            f"INSERT INTO revisions (kind, key, {_REV_COLUMNS}) "
            "VALUES (?, ?, 1, ?, ?, ?, NULL, NULL, NULL, 'ok', NULL)",
            (self.kind, key, text, content_hash(text), now))
        return 2

    def _unregistered(self, key: str, why: str) -> StoreError:
        return StoreError(
            f"data key {key!r} has no model registered in this process to {why}; call "
            "store.data.register(key, Model, base) first", code="unregistered_key",
            kind=self.kind, key=key)


def _check_retention(max_revisions: Any) -> None:
    if (not isinstance(max_revisions, int) or isinstance(max_revisions, bool)
            or max_revisions < MIN_MAX_REVISIONS):
        raise ConfigError(
            f"max_revisions must be an int of at least {MIN_MAX_REVISIONS} (the original, the "
            f"current and the newest revision), not {max_revisions!r}")
