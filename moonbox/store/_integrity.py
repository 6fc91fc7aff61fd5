"""Is the file a sound versions store? The checks made on open, and what a failed call means.

A store must never write into a damaged file: a write there can spread the damage, and
SQLite's own recovery (a checkpoint, a WAL that starts over) can destroy what is still
readable. So before the store opens a file for writing, it reads it through a read-only
connection and checks it:

- the file itself: an SQLite header, a whole number of pages, no fewer pages than the
  header says;
- the write-ahead log (``FILE-wal``): SQLite ends the log at the first frame whose
  checksum fails, as it must after a crash mid-write, so a damaged frame silently drops
  every commit after it. Commits that follow a dropped one are never a crash's doing;
  :func:`wal_damage` looks for them;
- ``PRAGMA quick_check``: every page of every table and index is read and its structure
  checked, in time linear in the file's size (about 2 ms per MiB here). Above
  ``check_max_bytes`` only the ``keys`` table is checked on open, so opening stays
  bounded; the rest is checked as it is read, and :meth:`Store.check` checks it all.
"""

from __future__ import annotations

import os
import sqlite3
import struct
import sys
from pathlib import Path
from typing import Any

from ._errors import FINDINGS_MAX, StoreCorrupt, StoreError
from ._overlay import content_hash

__all__ = ["CHECK_MAX_BYTES", "SQLITE_MAGIC", "classify", "file_findings", "key_problem",
           "page_size_of", "quick_check", "read_only_uri", "revision_problem", "wal_damage"]

CHECK_MAX_BYTES = 64 * 2**20
"""Files (with their WAL) up to this size get the whole quick check on open."""

SQLITE_MAGIC = b"SQLite format 3\x00"
_WAL_MAGIC = (0x377F0682, 0x377F0683)
_WAL_HEADER_BYTES, _FRAME_HEADER_BYTES = 32, 24
_WAL_INDEX_VERSION = 3007000

_IO_ERRORS = ("SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_READONLY", "SQLITE_IOERR",
              "SQLITE_FULL", "SQLITE_AUTH", "SQLITE_NOMEM", "SQLITE_NOLFS")


def classify(exc: sqlite3.DatabaseError, path: Path, doing: str, *, refused: bool = False,
             kind: str | None = None, key: str | None = None) -> StoreError:
    """The :class:`StoreError` a failed SQLite call stands for.

    Lock timeouts are ``busy`` and failures to open, read or write the file (permissions,
    a full disk) are ``io_error``. Everything else is damage (:class:`StoreCorrupt`): the
    store runs only its own statements on its own schema, so a malformed page, a missing
    table, a broken constraint or text that is not UTF-8 means the file is not what the
    store wrote.
    """
    name = getattr(exc, "sqlite_errorname", None) or ""
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return StoreError(
            f"the versions store {path} is locked by another writer ({exc}, while {doing}); "
            "retry, or stop the other process", code="busy", path=str(path))
    if name.startswith(_IO_ERRORS):
        return StoreError(
            f"cannot use the versions store {path} ({exc}, while {doing}); check the file's "
            "permissions and the disk", code="io_error", path=str(path))
    return StoreCorrupt(str(path), (str(exc),), doing=doing, refused=refused, kind=kind,
                        key=key)


def revision_problem(row: Any) -> str | None:
    """What is wrong with a revision row (``rev, content, hash, recorded_at, author, role,
    trace_id, outcome, error``), or ``None``. A page can be damaged in a way no structural
    check sees: the content must still match the hash recorded with it."""
    rev, text, digest, at, author, role, trace_id, outcome, error = row
    if not _is_int(rev) or rev < 1:
        return f"its revision number is {rev!r}"
    if not isinstance(text, str) or not isinstance(digest, str) or content_hash(text) != digest:
        return "its content does not match the hash recorded with it"
    if not _is_number(at):
        return f"its time is {at!r}"
    if any(v is not None and not isinstance(v, str) for v in (author, role, trace_id, error)):
        return "its author, role, trace id or error is not text"
    if outcome not in ("ok", "failed"):
        return f"its outcome is {outcome!r}"
    return None


def key_problem(original: Any, current: Any, next_rev: Any, max_revisions: Any,
                updated_at: Any) -> str | None:
    """What is wrong with a key row's numbers, or ``None``."""
    if not (_is_int(original) and _is_int(current) and _is_int(next_rev)):
        return "its revision numbers are not numbers"
    if max_revisions is not None and (not _is_int(max_revisions) or max_revisions < 3):
        return f"its retention limit is {max_revisions!r}"
    if not _is_number(updated_at):
        return f"its time is {updated_at!r}"
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_only_uri(path: Path) -> str:
    """The URI that opens ``path`` read-only: such a connection never writes the file,
    not even the checkpoint SQLite runs when the last connection closes."""
    return Path(os.path.abspath(path)).as_uri() + "?mode=ro"


def file_findings(path: Path, header: bytes, page_size: int, page_count: int) -> list[str]:
    """Damage the file's size and header show, without reading a page.

    ``header`` is the file's first 100 bytes; ``page_size`` and ``page_count`` what SQLite
    reports for it. With no WAL in use the file holds every page, so it must be a whole
    number of pages and no shorter than the header says (a truncated file is not).
    """
    if len(header) < 100:
        return [f"the file is {len(header)} bytes, shorter than an SQLite header"]
    if _wal_bytes(path) > 0:
        return []  # pages may live in the WAL until a checkpoint
    size = path.stat().st_size
    findings = []
    if page_size < 512 or page_size & (page_size - 1):
        return [f"its header gives a page size of {page_size} bytes, which SQLite never "
                "writes"]
    if size % page_size:
        findings.append(f"the file is {size} bytes, not a whole number of {page_size}-byte "
                        "pages: it was cut short or written past its end")
    counter, in_header, valid_for = (struct.unpack(">I", header[i:i + 4])[0]
                                     for i in (24, 28, 92))
    expected = max(page_count, in_header if in_header and counter == valid_for else 0)
    if size < expected * page_size:
        findings.append(f"the file is {size} bytes but holds {expected} pages of {page_size} "
                        f"bytes ({expected * page_size} bytes): it was cut short")
    return findings


def quick_check(conn: sqlite3.Connection, *, tables: tuple[str, ...] = ()) -> list[str]:
    """``PRAGMA quick_check`` of the whole file (or of ``tables`` only): its findings,
    at most :data:`FINDINGS_MAX`; ``[]`` when it passes.

    A check that cannot even start (a file shorter than its header says, a damaged
    schema) raises; run again with ``PRAGMA writable_schema`` on, which takes the file as
    it is, it tells what it finds past that. Only a read-only connection may do so.

    Raises:
        sqlite3.DatabaseError: the check could not run.
    """
    pragmas = [f"quick_check({t})" for t in tables] or [f"quick_check({FINDINGS_MAX})"]
    findings: list[str] = []
    for pragma in pragmas:
        for (text,) in conn.execute(f"PRAGMA {pragma}"):
            findings += [line for line in str(text).splitlines()
                         if line and line != "ok" and not line.startswith("*** in database")]
    return findings[:FINDINGS_MAX]


def page_size_of(header: bytes) -> int:
    """The page size an SQLite header gives (bytes 16-17; 1 means 65536)."""
    size = struct.unpack(">H", header[16:18])[0]
    return 65536 if size == 1 else size


def wal_damage(path: Path, page_size: int) -> str | None:
    """A finding if the WAL of ``path`` holds commits SQLite cannot read, else ``None``.

    Call it after a connection has read the file, so that the WAL index (``FILE-shm``)
    says how many frames SQLite accepted. A crash can leave frames past those: the
    transaction it interrupted, its commit frame perhaps torn, and what is left of
    transactions rolled back or interrupted before (their frames are written over from the
    accepted end, so a shorter one leaves the tail of a longer one), each with at most
    its one torn commit frame. Damage leaves more: two or more commits of the same log
    (the same salts) past the accepted end. A damaged log header hides the whole log from
    SQLite; only a log longer than one frame can have held a commit. The frames are read
    before the index, so a writer in another process, which updates the index before it
    writes past a commit, is never taken for damage.
    """
    wal = Path(f"{path}-wal")
    try:
        f = open(wal, "rb")
    except OSError:
        return None
    with f:
        size = os.fstat(f.fileno()).st_size
        frame_bytes = _FRAME_HEADER_BYTES + page_size
        frames = max(0, size - _WAL_HEADER_BYTES) // frame_bytes
        header = f.read(_WAL_HEADER_BYTES)
        if not _wal_header_ok(header, page_size):
            if frames >= 2:
                return (f"the write-ahead log {wal.name} has a damaged header, so SQLite "
                        f"ignores the {frames} frames of commits in it")
            return None
        salts = header[16:24]
        ours: list[tuple[int, bool]] = []  # (frame, is a commit) for frames of this log
        for i in range(frames):
            f.seek(_WAL_HEADER_BYTES + i * frame_bytes)
            frame = f.read(_FRAME_HEADER_BYTES)
            if len(frame) == _FRAME_HEADER_BYTES and frame[8:16] == salts:
                ours.append((i, frame[4:8] != b"\0\0\0\0"))
        accepted = _wal_index_frames(path)
        f.seek(0)
        if accepted is None or f.read(_WAL_HEADER_BYTES) != header:
            return None  # no index to compare with, or the log started over meanwhile
    commits = sum(commit for i, commit in ours if i >= accepted)
    if commits < 2:
        return None  # at most what a crash leaves
    return (f"the write-ahead log {wal.name} is damaged after frame {accepted}: SQLite "
            f"drops the {commits} commits after it")


def _wal_header_ok(header: bytes, page_size: int) -> bool:
    if len(header) < _WAL_HEADER_BYTES:
        return False
    magic, version, wal_page_size = struct.unpack(">3I", header[:12])
    if magic not in _WAL_MAGIC or version != _WAL_INDEX_VERSION or wal_page_size != page_size:
        return False
    order = ">" if magic & 1 else "<"
    words = struct.unpack(f"{order}6I", header[:24])
    s1 = s2 = 0
    for i in range(0, 6, 2):
        s1 = (s1 + words[i] + s2) & 0xFFFFFFFF
        s2 = (s2 + words[i + 1] + s1) & 0xFFFFFFFF
    return (s1, s2) == struct.unpack(">2I", header[24:32])


def _wal_index_frames(path: Path) -> int | None:
    """How many WAL frames SQLite accepted, from the WAL index; ``None`` if it cannot tell."""
    try:
        with open(f"{path}-shm", "rb") as f:
            data = f.read(96)
    except OSError:
        return None
    if len(data) < 96 or data[:48] != data[48:96]:
        return None  # no index, or a writer is updating it
    order = "<" if sys.byteorder == "little" else ">"
    version, _, _, is_init, _, _, frames = struct.unpack(f"{order}3I2BHI", data[:20])
    if version != _WAL_INDEX_VERSION or not is_init:
        return None
    return int(frames)


def _wal_bytes(path: Path) -> int:
    try:
        return os.stat(f"{path}-wal").st_size
    except OSError:
        return 0
