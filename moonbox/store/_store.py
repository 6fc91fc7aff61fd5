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
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from .._errors import ConfigError
from . import _exchange
from ._errors import StoreError
from ._model import KeyInfo, Kind, Outcome, Revision, RevisionRef, check_key
from ._overlay import apply_overlay, canonical_json, check_json, content_hash
from ._schema import connect, open_schema

__all__ = [
    "DEFAULT_MAX_REVISIONS", "DataOverlays", "MIN_MAX_REVISIONS",
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

    Args:
        path: the SQLite file (one per game), created if missing unless ``create`` is false.
        max_revisions: revisions kept per key unless a key has its own limit (see
            ``set_retention``); at least :data:`MIN_MAX_REVISIONS`. The oldest are evicted
            first; a key's original and current revision are never evicted.
        create: create the file if it does not exist.
        durable: a write is on disk when it returns (``synchronous=FULL``). With false, a
            power cut may lose the last writes; a crash still never tears one.
        busy_timeout_s: how long a write waits for another writer before failing.
        clock: the time source for ``recorded_at_s`` (Unix seconds); inject one in tests.

    Raises:
        ConfigError: a retention limit or timeout that cannot be enforced.
        StoreError: ``no_store``, ``not_a_store`` or ``schema_too_new`` (see
            :class:`StoreError`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_revisions: int = DEFAULT_MAX_REVISIONS,
        create: bool = True,
        durable: bool = True,
        busy_timeout_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        _check_retention(max_revisions)
        if not busy_timeout_s >= 0:
            raise ConfigError("busy_timeout_s must be zero or more seconds")
        self.path = Path(path)
        self.max_revisions = max_revisions
        self._clock = clock
        self._lock = threading.RLock()
        conn = connect(self.path, create=create, durable=durable, busy_timeout_s=busy_timeout_s)
        try:
            self.schema_version = open_schema(conn, self.path)
        except sqlite3.DatabaseError as exc:
            conn.close()
            if exc.sqlite_errorname != "SQLITE_NOTADB":
                raise
            raise StoreError(f"{self.path} is not a versions store ({exc}); check the path",
                             code="not_a_store") from None
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn
        self.scripts = ScriptVersions(self)
        self.data = DataOverlays(self)

    def __repr__(self) -> str:
        state = "closed" if self._conn is None else "open"
        return f"<Store {str(self.path)!r} {state}>"

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file. Idempotent; every later operation raises ``closed``."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._conn is None

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
        with self._transaction(write=False) as conn:
            for k in kinds:
                out += _key_infos(conn, k, prefix)
        return out

    def reset_all(self, kind: Kind | None = None, *, prefix: str = "") -> int:
        """Set every key (of one kind, if given; under ``prefix``) back to its original.

        One transaction: all keys are reset, or (on a crash) none. History is kept, so each
        key can be rolled forward again. Returns how many keys changed.
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
        """Everything in the store as plain data (the shape of :meth:`export_json`)."""
        with self._transaction(write=False) as conn:
            return _exchange.export_rows(conn, self._clock())

    def export_json(self, path: str | os.PathLike[str]) -> int:
        """Write :meth:`export` to a readable JSON file (atomically); return the key count."""
        data = self.export()
        target = Path(path)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=2, ensure_ascii=False)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        return len(data["keys"])

    def import_data(self, data: Any, *, replace: bool = False) -> int:
        """Load an export (as plain data) into the store, in one transaction; return the key count.

        Each key in the export arrives with its whole history, revision numbers and
        original and current as they were. Keys already in the store are refused unless
        ``replace`` is true, which replaces them (their history too); other keys are
        untouched.

        Raises:
            StoreError: ``invalid_export`` for a malformed export or a hash that does not
                match its content; ``key_exists`` for keys present without ``replace``.
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

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        """One transaction; a write one holds the file's write lock from its first statement."""
        with self._lock:
            conn = self._conn
            if conn is None:
                raise StoreError("the store is closed; open it again", code="closed")
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def _query(self, sql: str, params: tuple[Any, ...]) -> Any:
        """One read statement (its own snapshot), first row or ``None``."""
        with self._lock:
            conn = self._conn
            if conn is None:
                raise StoreError("the store is closed; open it again", code="closed")
            return conn.execute(sql, params).fetchone()


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
            "WHERE k.kind = ? AND k.key = ?", (self.kind, key))
        if row is None:
            raise self._unknown_key(key)
        return self._revision(key, row)

    def revision(self, key: str, rev: RevisionRef) -> Revision:
        """One revision: a number, ``original`` or ``current``.

        Raises:
            StoreError: ``unknown_key``; ``unknown_revision`` (never recorded or evicted).
        """
        with self._store._transaction(write=False) as conn:
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
        with self._store._transaction(write=False) as conn:
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
        with self._store._transaction(write=False) as conn:
            row = conn.execute(_INFO_SELECT + " WHERE k.kind = ? AND k.key = ?",
                               (self.kind, key)).fetchone()
        if row is None:
            raise self._unknown_key(key)
        return KeyInfo(self.kind, *row)

    def keys(self, *, prefix: str = "") -> list[KeyInfo]:
        """Every key of this kind whose name starts with ``prefix``, sorted by key."""
        with self._store._transaction(write=False) as conn:
            return _key_infos(conn, self.kind, prefix)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._store._query(
            "SELECT 1 FROM keys WHERE kind = ? AND key = ?", (self.kind, key)) is not None

    def diff(self, key: str, a: RevisionRef, b: RevisionRef = "current", *,
             context: int = 3) -> str:
        """A unified diff from revision ``a`` to ``b`` (``""`` if they are the same).

        Data overlays are compared as indented JSON with sorted keys.

        Raises:
            StoreError: ``unknown_key``, ``unknown_revision``.
        """
        with self._store._transaction(write=False) as conn:
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
        rev, text, digest, at, author, role, trace_id, outcome, error = row
        return Revision(self.kind, key, rev, text if raw else self._decode(text), digest, at,
                        author, role, trace_id, outcome, error)

    def _decoded(self, raw: Revision) -> Revision:
        return Revision(raw.kind, raw.key, raw.rev, self._decode(raw.content), raw.hash,
                        raw.recorded_at_s, raw.author, raw.role, raw.trace_id, raw.outcome,
                        raw.error)

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


def _key_infos(conn: sqlite3.Connection, kind: Kind, prefix: str) -> list[KeyInfo]:
    rows = conn.execute(
        _INFO_SELECT + " WHERE k.kind = ? AND substr(k.key, 1, ?) = ? ORDER BY k.key",
        (kind, len(prefix), prefix)).fetchall()
    return [KeyInfo(kind, *row) for row in rows]


def _check_retention(max_revisions: Any) -> None:
    if (not isinstance(max_revisions, int) or isinstance(max_revisions, bool)
            or max_revisions < MIN_MAX_REVISIONS):
        raise ConfigError(
            f"max_revisions must be an int of at least {MIN_MAX_REVISIONS} (the original, the "
            f"current and the newest revision), not {max_revisions!r}")
