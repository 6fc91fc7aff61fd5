"""The store's errors, with a stable code for programs."""

from __future__ import annotations

from typing import Literal

from .._errors import MoonboxError

__all__ = ["FINDINGS_MAX", "FINDING_MAX_CHARS", "StoreCorrupt", "StoreError", "StoreErrorCode"]

StoreErrorCode = Literal[
    "unknown_key",
    "unknown_revision",
    "failed_revision",
    "invalid_key",
    "invalid_payload",
    "unregistered_key",
    "key_exists",
    "invalid_export",
    "no_store",
    "not_a_store",
    "schema_too_new",
    "corrupt_store",
    "io_error",
    "busy",
    "closed",
]

FINDINGS_MAX = 10
"""The most findings a :class:`StoreCorrupt` carries (the integrity check stops there)."""

FINDING_MAX_CHARS = 200
"""The longest finding, in characters; a longer one is cut."""


class StoreError(MoonboxError):
    """A versions-store operation that cannot be done as asked.

    The message is a sentence that names the fix; ``code`` is stable for programs:

    - ``unknown_key``: no such key of that kind in the store.
    - ``unknown_revision``: the key has no such revision (never recorded, or evicted).
    - ``failed_revision``: a failed attempt was asked to become current; only a revision
      recorded as a success can.
    - ``invalid_key``: a key that is empty, too long or holds control characters.
    - ``invalid_payload``: content the store cannot take: a data overlay that is not
      JSON-compatible or that its key's model rejects, a script that is not text.
    - ``unregistered_key``: a data overlay recorded as a success for a key that has no
      model registered in this process, so it cannot be validated.
    - ``key_exists``: an import would overwrite keys already in the store.
    - ``invalid_export``: an import file that is not a well-formed export.
    - ``no_store``: no store file at the path, or an empty one (and creating one was not
      asked for), or only the WAL of one (creating a store would delete it).
    - ``not_a_store``: the path holds something else: a directory, a file that is not an
      SQLite database, or an SQLite database that is not a versions store.
    - ``schema_too_new``: the file was written by a newer moonbox.
    - ``corrupt_store``: the file is damaged (see :class:`StoreCorrupt`); the store is
      read-only from then on.
    - ``io_error``: the file cannot be opened, read or written: permissions, a read-only
      file or file system, a full or failing disk.
    - ``busy``: another writer held the file's lock for longer than the busy timeout.
    - ``closed``: the store was closed.

    Attributes:
        code: one of the codes above.
        kind: ``script`` or ``data``, when the error is about one key.
        key: the key, when the error is about one key.
        rev: the revision, when the error is about one revision.
        path: the store's file, when the error is about the file.
        findings: what the integrity check (or the failed read) found, for
            ``corrupt_store``: at most :data:`FINDINGS_MAX` lines.
    """

    def __init__(
        self,
        message: str,
        *,
        code: StoreErrorCode,
        kind: str | None = None,
        key: str | None = None,
        rev: int | None = None,
        path: str | None = None,
        findings: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code: StoreErrorCode = code
        self.kind = kind
        self.key = key
        self.rev = rev
        self.path = path
        self.findings = findings

    def to_dict(self) -> dict[str, object]:
        """The JSON shape of ``moonbox versions ... --json`` errors."""
        return {
            "code": self.code, "message": self.message, "kind": self.kind, "key": self.key,
            "rev": self.rev, "path": self.path, "findings": list(self.findings),
        }


class StoreCorrupt(StoreError):
    """The store's file is damaged: ``corrupt_store``.

    Raised when the integrity check on open finds damage (then every write is refused
    with this error, and reads go on as far as they can), and by any read or write that
    meets damage the check did not see (from then on the store is read-only too).
    Nothing is ever written to a file found damaged.

    The fix: export what is still readable (:meth:`Store.export_json`, or
    ``moonbox versions export FILE``; the export skips what it cannot read and lists it),
    move the damaged file aside with its WAL (``FILE-wal``: left behind, a new store at the
    path would have SQLite delete it), and import the export into a new store.

    Attributes:
        path: the store's file.
        findings: the first findings of the integrity check, or the error of the read
            that failed: at most :data:`FINDINGS_MAX` lines of at most
            :data:`FINDING_MAX_CHARS` characters.
        doing: what was being done when the damage showed (``checking it``,
            ``reading script 'waves:main'``, ``writing``).
    """

    def __init__(
        self,
        path: str,
        findings: tuple[str, ...] | list[str],
        *,
        doing: str = "checking it",
        refused: bool = False,
        kind: str | None = None,
        key: str | None = None,
        rev: int | None = None,
    ) -> None:
        shown = tuple(_cut(f) for f in list(findings)[:FINDINGS_MAX]) or ("no detail",)
        more = len(shown) - 1
        also = f", with {more} more finding{'s' if more > 1 else ''}" if more else ""
        message = (
            f"the versions store {path} is damaged ({shown[0]}; found while {doing}{also}); "
            f"{'nothing was written; ' if refused else ''}it is read-only now: export what "
            f"is still readable (moonbox versions export FILE --store {path}), then move "
            f"{path} and {path}-wal aside and import the export into a new store"
        )
        super().__init__(message, code="corrupt_store", kind=kind, key=key, rev=rev, path=path,
                         findings=shown)
        self.doing = doing


def _cut(finding: str) -> str:
    finding = " ".join(str(finding).split())
    return finding if len(finding) <= FINDING_MAX_CHARS else finding[:FINDING_MAX_CHARS - 3] + "..."
