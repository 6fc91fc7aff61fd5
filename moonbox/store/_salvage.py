"""Export what a damaged store can still read, row by row, and list what it cannot.

A damaged page stops a plain table scan at the first row on it, and loses every row
after. So each table is read in rowid order; where the read breaks, the next row the
table can still reach is found by probing rowids (doubling the step, then halving it
back), so one damaged page costs the rows on it and at most about 130 probes, not the
rest of the table. The unique indexes are separate trees that name every key and revision
(and its rowid) without the table's pages: what they name and the scan missed is read
again by rowid, and what still fails is listed by name.

Each revision read must still match the hash recorded with it. A key keeps what could
be read of it: if its original or current revision is lost, the oldest (or newest)
readable success stands in, and if its key row is lost it is rebuilt from its revisions;
each such change is listed. The document is an export :func:`parse_export` accepts, plus
``lost``: one entry per thing that is not in it, or not as it was::

    {"what": "revision" | "key" | "pointer" | "rows", "kind": ..., "key": ...,
     "rev": ..., "reason": "..."}

``revision``: that revision is not in the export. ``key``: the key is not (no success of
it could be read). ``pointer``: the key is, but its original, current or next revision
number was lost and the reason says what stands in. ``rows``: rows that could not be read
and that no index names, so what they held is unknown.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from ._errors import StoreError
from ._exchange import EXPORT_FORMAT, EXPORT_FORMAT_VERSION
from ._integrity import key_problem, revision_problem
from ._model import CONTENT_FIELD, check_key

__all__ = ["salvage_rows"]

_MIN_ROWID, _MAX_ROWID = -(2**63), 2**63 - 1
_KEY_COLUMNS = "kind, key, original, current, next_rev, max_revisions, updated_at"
_REV_COLUMNS = "kind, key, rev, content, hash, recorded_at, author, role, trace_id, outcome, error"
_KEYS_INDEX = "sqlite_autoindex_keys_1"
_REVISIONS_INDEX = "sqlite_autoindex_revisions_1"

Row = tuple[Any, ...]
Lost = dict[str, Any]


def salvage_rows(conn: sqlite3.Connection, now: float) -> dict[str, Any]:
    """Every key and revision that can still be read, as an export with ``lost`` added."""
    lost: list[Lost] = []
    if not conn.in_transaction:
        try:
            conn.execute("BEGIN")  # one snapshot, if the file lets us take one
        except sqlite3.DatabaseError:
            pass
    try:
        key_rows = _read_table(conn, "keys", _KEY_COLUMNS, _KEYS_INDEX, "kind, key", lost)
        rev_rows = _read_table(conn, "revisions", _REV_COLUMNS, _REVISIONS_INDEX,
                               "kind, key, rev", lost)
    finally:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.DatabaseError:
                pass
    keys = _assemble(key_rows, rev_rows, lost)
    lost.sort(key=lambda e: (e["kind"] or "", e["key"] or "", e["rev"] or 0, e["what"]))
    return {"format": EXPORT_FORMAT, "format_version": EXPORT_FORMAT_VERSION,
            "exported_at_s": now, "keys": keys, "lost": lost}


def _lost(what: str, reason: str, kind: str | None = None, key: str | None = None,
          rev: int | None = None) -> Lost:
    return {"what": what, "kind": kind, "key": key, "rev": rev, "reason": reason}


# --- reading what can be read ----------------------------------------------------------

def _read_table(conn: sqlite3.Connection, table: str, columns: str, index: str,
                index_columns: str, lost: list[Lost]) -> dict[int, Row]:
    """The rows of ``table`` that can be read, by rowid; what cannot goes to ``lost``."""
    rows, broken = _scan(conn, table, columns)
    named: dict[int, Row] = {}
    complete = True
    try:
        for rowid, *name in conn.execute(
                f"SELECT rowid, {index_columns} FROM {table} INDEXED BY {index}"):
            named[rowid] = tuple(name)
    except sqlite3.DatabaseError:
        complete = False
    point = f"SELECT {columns} FROM {table} WHERE rowid = ?"
    for rowid, name in named.items():
        if rowid in rows:
            continue
        try:
            row = conn.execute(point, (rowid,)).fetchone()
        except sqlite3.DatabaseError as exc:
            lost.append(_named_loss(table, name, f"could not be read ({exc})"))
            continue
        if row is None:
            lost.append(_named_loss(table, name, "is named by the index but not in the table"))
        else:
            rows[rowid] = tuple(row)
    if not complete:
        for first, last, error in broken:
            ids = f"ids {first} and up" if last is None else (
                f"id {first}" if first == last else f"ids {first} to {last}")
            lost.append(_lost("rows", f"{table} rows with {ids} could not be read ({error}) "
                                      "and no index names them: what they held is unknown"))
    return rows


def _named_loss(table: str, name: Row, reason: str) -> Lost:
    if table == "keys":
        kind, key = name
        return _lost("pointer", f"its key row {reason}", kind, key)
    kind, key, rev = name
    return _lost("revision", f"this revision {reason}", kind, key, rev)


def _scan(conn: sqlite3.Connection, table: str,
          columns: str) -> tuple[dict[int, Row], list[tuple[int, int | None, str]]]:
    """Read ``table`` in rowid order, stepping over what cannot be read.

    Returns the rows read, by rowid, and the rowid ranges that broke (``last`` ``None``:
    to the end), each with the error that broke it.
    """
    scan = f"SELECT rowid, {columns} FROM {table} WHERE rowid >= ? ORDER BY rowid"
    point = f"SELECT rowid, {columns} FROM {table} WHERE rowid = ?"
    probe = _prober(conn, table)
    rows: dict[int, Row] = {}
    broken: list[tuple[int, int | None, str]] = []
    start = _MIN_ROWID
    while True:
        try:
            for rowid, *row in conn.execute(scan, (start,)):
                if not isinstance(rowid, int) or rowid < start:
                    continue  # a damaged page out of order: what it holds is garbage
                rows[rowid] = tuple(row)
                start = rowid + 1
            return rows, broken
        except sqlite3.DatabaseError as exc:
            error = str(exc)
        reached = probe(start)
        if reached is _BROKEN:
            # The tree cannot be walked from here: find the next rowid it can reach.
            resume = _next_reachable(probe, start)
            if resume is None:
                broken.append((start, None, error))
                return rows, broken
            broken.append((start, resume - 1, error))
            start = resume
            continue
        if reached is None:
            broken.append((start, None, error))
            return rows, broken
        # The tree reaches the next row: the row itself (its overflow pages) may be bad.
        assert isinstance(reached, int)
        try:
            found = conn.execute(point, (reached,)).fetchone()
        except sqlite3.DatabaseError as exc:
            broken.append((reached, reached, str(exc)))
            found = None
        if found is not None:
            rows[reached] = tuple(found[1:])
        start = reached + 1


_BROKEN = object()


def _prober(conn: sqlite3.Connection, table: str) -> Callable[[int], object]:
    sql = f"SELECT rowid FROM {table} WHERE rowid >= ? ORDER BY rowid LIMIT 1"

    def probe(rowid: int) -> object:
        """The first rowid at or after ``rowid``; ``None`` if none; ``_BROKEN`` if the
        tree cannot be walked there."""
        try:
            row = conn.execute(sql, (rowid,)).fetchone()
        except sqlite3.DatabaseError:
            return _BROKEN
        if row is None:
            return None
        return row[0] if isinstance(row[0], int) and row[0] >= rowid else _BROKEN

    return probe


def _next_reachable(probe: Callable[[int], object], start: int) -> int | None:
    """The smallest rowid after ``start`` (whose probe broke) from which the tree can be
    walked again; ``None`` if there is none. At most about 2 x 64 probes."""
    step, bad = 1, start
    while True:
        at = min(start + step, _MAX_ROWID)
        if probe(at) is not _BROKEN:
            break
        if at == _MAX_ROWID:
            return None
        bad, step = at, step * 2
    good = at
    while good - bad > 1:
        mid = (bad + good) // 2
        if probe(mid) is _BROKEN:
            bad = mid
        else:
            good = mid
    return good


# --- putting the keys back together ----------------------------------------------------

def _assemble(key_rows: dict[int, Row], rev_rows: dict[int, Row],
              lost: list[Lost]) -> list[dict[str, Any]]:
    keys: dict[tuple[str, str], Row] = {}
    for rowid in sorted(key_rows):
        kind, key, *numbers = key_rows[rowid]
        name = _name(kind, key)
        if name is None:
            lost.append(_lost("rows", f"keys row {rowid} names no valid key ({kind!r}, "
                                      f"{str(key)[:40]!r}): it is damaged"))
            continue
        problem = key_problem(*numbers)
        if problem is not None:
            lost.append(_lost("pointer", f"its key row is damaged ({problem})", kind, key))
        elif name in keys:
            lost.append(_lost("pointer", "it has two key rows; the first is kept", kind, key))
        else:
            keys[name] = tuple(numbers)
    revisions: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for rowid in sorted(rev_rows):
        kind, key, *row = rev_rows[rowid]
        name = _name(kind, key)
        if name is None:
            lost.append(_lost("rows", f"revisions row {rowid} names no valid key ({kind!r}, "
                                      f"{str(key)[:40]!r}): it is damaged"))
            continue
        problem = revision_problem(row)
        rev = row[0] if isinstance(row[0], int) else None
        if problem is not None:
            lost.append(_lost("revision", f"this revision is damaged: {problem}", kind, key,
                              rev))
            continue
        assert rev is not None
        mine = revisions.setdefault(name, {})
        if rev in mine:
            lost.append(_lost("revision", "this revision appears twice; the first is kept",
                              kind, key, rev))
            continue
        _, text, digest, at, author, role, trace_id, outcome, error = row
        mine[rev] = {"rev": rev, CONTENT_FIELD[kind]: text if kind == "script"
                     else json.loads(text), "hash": digest, "recorded_at_s": at,
                     "author": author, "role": role, "trace_id": trace_id,
                     "outcome": outcome, "error": error}
    out = []
    for name in sorted(set(keys) | set(revisions)):
        entry = _key_entry(name, keys.get(name), revisions.get(name, {}), lost)
        if entry is not None:
            out.append(entry)
    return out


def _name(kind: Any, key: Any) -> tuple[str, str] | None:
    if kind not in ("script", "data"):
        return None
    try:
        check_key(key, kind)
    except StoreError:
        return None
    return kind, key


def _key_entry(name: tuple[str, str], numbers: Row | None, revs: dict[int, dict[str, Any]],
               lost: list[Lost]) -> dict[str, Any] | None:
    kind, key = name
    oks = sorted(r for r, v in revs.items() if v["outcome"] == "ok")
    if not oks:
        failed = f" (only {len(revs)} failed attempts)" if revs else ""
        lost.append(_lost("key", f"no successful revision of it could be read{failed}, so "
                                 "it is not in the export", kind, key))
        return None
    if numbers is None:
        original, current, next_rev, limit = oks[0], oks[-1], max(revs) + 1, None
        updated = max(v["recorded_at_s"] for v in revs.values())
        lost.append(_lost("pointer", "its key row could not be read; it is rebuilt from its "
                                     f"readable revisions: original {original}, current "
                                     f"{current}, the store's retention limit", kind, key))
    else:
        original, current, next_rev, limit, updated = numbers
        if original not in oks:
            lost.append(_lost("pointer", f"its original revision {original} could not be "
                                         f"read; revision {oks[0]}, the oldest readable "
                                         "success, is its original here", kind, key))
            original = oks[0]
        if current not in oks:
            lost.append(_lost("pointer", f"its current revision {current} could not be "
                                         f"read; revision {oks[-1]}, the newest readable "
                                         "success, is current here", kind, key))
            current = oks[-1]
        if next_rev <= max(revs):
            lost.append(_lost("pointer", f"its next revision number {next_rev} is damaged; "
                                         f"{max(revs) + 1} is used here", kind, key))
            next_rev = max(revs) + 1
    return {"kind": kind, "key": key, "original": original, "current": current,
            "next_rev": next_rev, "max_revisions": limit, "updated_at_s": updated,
            "revisions": [revs[r] for r in sorted(revs)]}
