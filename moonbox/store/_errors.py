"""The store's one error type, with a stable code for programs."""

from __future__ import annotations

from typing import Literal

from .._errors import MoonboxError

__all__ = ["StoreError", "StoreErrorCode"]

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
    "closed",
]


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
    - ``no_store``: no store file at the path (and creating one was not asked for).
    - ``not_a_store``: the file is an SQLite database, but not a versions store.
    - ``schema_too_new``: the file was written by a newer moonbox.
    - ``closed``: the store was closed.

    Attributes:
        code: one of the codes above.
        kind: ``script`` or ``data``, when the error is about one key.
        key: the key, when the error is about one key.
        rev: the revision, when the error is about one revision.
    """

    def __init__(
        self,
        message: str,
        *,
        code: StoreErrorCode,
        kind: str | None = None,
        key: str | None = None,
        rev: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code: StoreErrorCode = code
        self.kind = kind
        self.key = key
        self.rev = rev

    def to_dict(self) -> dict[str, object]:
        """The JSON shape of ``moonbox versions ... --json`` errors."""
        return {
            "code": self.code, "message": self.message, "kind": self.kind, "key": self.key,
            "rev": self.rev,
        }
