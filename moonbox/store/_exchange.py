"""Export to and import from a readable JSON document.

The document::

    {"format": "moonbox-versions", "format_version": 1, "exported_at_s": 1700000000.0,
     "keys": [{"kind": "script", "key": "waves:main", "original": 1, "current": 3,
               "next_rev": 5, "max_revisions": null, "updated_at_s": 1700000000.0,
               "revisions": [{"rev": 1, "source": "...", "hash": "...", "recorded_at_s": ...,
                              "author": null, "role": null, "trace_id": null,
                              "outcome": "ok", "error": null}, ...]}, ...]}

Script revisions carry ``source`` (text), data revisions ``payload`` (JSON). An import
checks every hash against its content, so a hand-edited file cannot slip in content
under another version's hash. An export salvaged from a damaged store (see ``_salvage``)
also has ``lost``, the list of what could not be read; an import takes what is there.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr
from pydantic import ValidationError as _ValidationError

from ._errors import StoreCorrupt, StoreError
from ._integrity import key_problem, revision_problem
from ._model import CONTENT_FIELD, check_key
from ._overlay import canonical_json, check_json, content_hash

__all__ = ["EXPORT_FORMAT", "EXPORT_FORMAT_VERSION", "export_rows", "import_rows", "parse_export",
           "write_json"]

EXPORT_FORMAT = "moonbox-versions"
EXPORT_FORMAT_VERSION = 1

_Time = StrictFloat | StrictInt


class _Revision(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rev: StrictInt = Field(ge=1)
    source: StrictStr | None = None
    payload: Any = None
    hash: StrictStr
    recorded_at_s: _Time
    author: StrictStr | None = None
    role: StrictStr | None = None
    trace_id: StrictStr | None = None
    outcome: Literal["ok", "failed"]
    error: StrictStr | None = None


class _Key(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["script", "data"]
    key: StrictStr
    original: StrictInt
    current: StrictInt
    next_rev: StrictInt
    max_revisions: StrictInt | None = Field(default=None, ge=3)
    updated_at_s: _Time
    revisions: list[_Revision] = Field(min_length=1)


class _Lost(BaseModel):
    model_config = ConfigDict(extra="forbid")
    what: Literal["revision", "key", "pointer", "rows"]
    kind: StrictStr | None = None
    key: StrictStr | None = None
    rev: StrictInt | None = None
    reason: StrictStr


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: Literal["moonbox-versions"]
    format_version: Literal[1]
    exported_at_s: _Time
    keys: list[_Key]
    lost: list[_Lost] | None = None  # only in an export salvaged from a damaged store


def export_rows(conn: sqlite3.Connection, now: float, path: str) -> dict[str, Any]:
    """Every key and revision, in a read transaction the caller holds.

    Raises:
        StoreCorrupt: a row that is damaged (a revision whose content does not match its
            hash, one with no key, a key row that is not numbers); the caller salvages.
    """
    keys: list[dict[str, Any]] = []
    by_key: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for kind, key, original, current, next_rev, limit, updated in conn.execute(
            "SELECT kind, key, original, current, next_rev, max_revisions, updated_at "
            "FROM keys ORDER BY kind, key"):
        problem = key_problem(original, current, next_rev, limit, updated)
        if problem is not None or kind not in CONTENT_FIELD:
            raise StoreCorrupt(path, (problem or f"a key of kind {kind!r}",),
                               doing=f"exporting key {key!r}")
        revisions: list[dict[str, Any]] = []
        by_key[(kind, key)] = revisions
        keys.append({"kind": kind, "key": key, "original": original, "current": current,
                     "next_rev": next_rev, "max_revisions": limit, "updated_at_s": updated,
                     "revisions": revisions})
    for kind, key, *row in conn.execute(
            "SELECT kind, key, rev, content, hash, recorded_at, author, role, trace_id, "
            "outcome, error FROM revisions ORDER BY kind, key, rev"):
        rev, text, digest, at, author, role, trace_id, outcome, error = row
        problem = revision_problem(row)
        if problem is None and (kind, key) not in by_key:
            problem = "it belongs to no key"
        if problem is not None:
            raise StoreCorrupt(path, (problem,), doing=f"exporting {kind} {key!r} revision "
                                                       f"{rev}", kind=kind, key=key)
        by_key[(kind, key)].append({
            "rev": rev, CONTENT_FIELD[kind]: text if kind == "script" else json.loads(text),
            "hash": digest, "recorded_at_s": at, "author": author, "role": role,
            "trace_id": trace_id, "outcome": outcome, "error": error,
        })
    return {"format": EXPORT_FORMAT, "format_version": EXPORT_FORMAT_VERSION,
            "exported_at_s": now, "keys": keys}


def write_json(data: dict[str, Any], path: Path) -> None:
    """Write an export to ``path`` as readable JSON, atomically: a temporary file in the
    same directory, flushed to disk, then renamed over ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, ensure_ascii=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _bad(message: str) -> StoreError:
    return StoreError(f"not a valid versions export: {message}", code="invalid_export")


def parse_export(data: Any) -> list[tuple[_Key, list[str]]]:
    """Validate an export; return each key with the stored text of each revision.

    Raises:
        StoreError: ``invalid_export``, naming the first problem found.
    """
    try:
        doc = _Document.model_validate(data)
    except _ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "document"
        raise _bad(f"{loc}: {first['msg']}") from None
    out: list[tuple[_Key, list[str]]] = []
    seen: set[tuple[str, str]] = set()
    for entry in doc.keys:
        name = f"{entry.kind} {entry.key!r}"
        try:
            check_key(entry.key, entry.kind)
        except StoreError as exc:
            raise _bad(exc.message) from None
        if (entry.kind, entry.key) in seen:
            raise _bad(f"{name} appears twice")
        seen.add((entry.kind, entry.key))
        texts: list[str] = []
        revs: dict[int, _Revision] = {}
        field, other = CONTENT_FIELD[entry.kind], CONTENT_FIELD["data" if entry.kind == "script"
                                                               else "script"]
        for r in entry.revisions:
            if r.rev in revs:
                raise _bad(f"{name} has revision {r.rev} twice")
            revs[r.rev] = r
            if field not in r.model_fields_set or other in r.model_fields_set:
                raise _bad(f"{name} revision {r.rev} needs '{field}' (and no '{other}')")
            if entry.kind == "script":
                if r.source is None:
                    raise _bad(f"{name} revision {r.rev}: source must be text")
                text = r.source
            else:
                try:
                    check_json(r.payload)
                except ValueError as exc:
                    raise _bad(f"{name} revision {r.rev}: {exc}") from None
                text = canonical_json(r.payload)
            if content_hash(text) != r.hash:
                raise _bad(f"{name} revision {r.rev}: the hash does not match its content")
            texts.append(text)
        for role, number in (("original", entry.original), ("current", entry.current)):
            if number not in revs:
                raise _bad(f"{name}: its {role} revision {number} is not among its revisions")
            if revs[number].outcome != "ok":
                raise _bad(f"{name}: its {role} revision {number} is a failed attempt")
        if entry.next_rev <= max(revs):
            raise _bad(f"{name}: next_rev {entry.next_rev} is not above its revisions")
        out.append((entry, texts))
    return out


def import_rows(conn: sqlite3.Connection, keys: list[tuple[_Key, list[str]]], *,
                replace: bool) -> None:
    """Write parsed keys, in a write transaction the caller holds.

    Raises:
        StoreError: ``key_exists`` for keys already present when ``replace`` is false.
    """
    present = [
        f"{entry.kind} {entry.key!r}" for entry, _ in keys
        if conn.execute("SELECT 1 FROM keys WHERE kind = ? AND key = ?",
                        (entry.kind, entry.key)).fetchone()
    ]
    if present and not replace:
        shown = ", ".join(present[:5]) + (f" and {len(present) - 5} more" if len(present) > 5
                                          else "")
        raise StoreError(f"the store already has {shown}; import with replace to overwrite "
                         "them, or into another store", code="key_exists")
    for entry, texts in keys:
        ident = (entry.kind, entry.key)
        conn.execute("DELETE FROM revisions WHERE kind = ? AND key = ?", ident)
        conn.execute("DELETE FROM keys WHERE kind = ? AND key = ?", ident)
        conn.execute(
            "INSERT INTO keys (kind, key, original, current, next_rev, updated_at, "
            "max_revisions) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (*ident, entry.original, entry.current, entry.next_rev, entry.updated_at_s,
             entry.max_revisions))
        conn.executemany(
            "INSERT INTO revisions (kind, key, rev, content, hash, recorded_at, author, role, "
            "trace_id, outcome, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(*ident, r.rev, text, r.hash, r.recorded_at_s, r.author, r.role, r.trace_id,
              r.outcome, r.error) for r, text in zip(entry.revisions, texts, strict=True)])
