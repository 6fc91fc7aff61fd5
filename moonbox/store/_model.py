"""What the store hands out: revisions and key summaries, as frozen plain objects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ._errors import StoreError

__all__ = ["CONTENT_FIELD", "KEY_MAX_CHARS", "KeyInfo", "Kind", "Outcome", "Revision", "RevisionRef", "check_key"]

Kind = Literal["script", "data"]
"""``script``: Lua source per key. ``data``: a JSON-compatible overlay per key."""

Outcome = Literal["ok", "failed"]
"""``ok``: the version ran (or validated) and may be current. ``failed``: history only."""

RevisionRef = int | Literal["original", "current"]
"""A revision number, or the key's ``original`` or ``current`` revision."""

KEY_MAX_CHARS = 256
"""The longest key, in characters."""

CONTENT_FIELD: dict[str, str] = {"script": "source", "data": "payload"}


@dataclass(frozen=True, slots=True)
class Revision:
    """One recorded version of a key.

    Attributes:
        kind: ``script`` or ``data``.
        key: the key it belongs to (a script such as ``waves:main``, a data set such as
            ``balance``).
        rev: its number: 1 for the first revision of the key, one more for each record,
            never reused (an evicted number stays a gap).
        content: the Lua source (``str``) of a script; the overlay (a JSON-compatible
            value) of a data key.
        hash: SHA-256 of the content as stored (the source's UTF-8, the overlay's canonical
            JSON), in hex.
        recorded_at_s: when it was recorded, in Unix seconds.
        author: who wrote it (``human``, a person, a model), if known.
        role: the role that produced it (``programmer``, ``hot_reload``, ...), if known.
        trace_id: the trace of the run or repair round that produced it, if any.
        outcome: ``ok`` or ``failed``.
        error: why it failed (the diagnostic), for a failed attempt.
    """

    kind: Kind
    key: str
    rev: int
    content: Any
    hash: str
    recorded_at_s: float
    author: str | None
    role: str | None
    trace_id: str | None
    outcome: Outcome
    error: str | None

    def to_dict(self, *, content: bool = True) -> dict[str, Any]:
        """Plain data: the content under ``source`` (scripts) or ``payload`` (data)."""
        out: dict[str, Any] = {"kind": self.kind, "key": self.key, "rev": self.rev}
        if content:
            out[CONTENT_FIELD[self.kind]] = self.content
        out.update(
            hash=self.hash, recorded_at_s=self.recorded_at_s, author=self.author,
            role=self.role, trace_id=self.trace_id, outcome=self.outcome, error=self.error,
        )
        return out


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """Where a key stands.

    Attributes:
        kind: ``script`` or ``data``.
        key: the key.
        original: the revision the key started from (never evicted).
        current: the revision in use (never evicted, always an ``ok`` one).
        latest: the newest revision kept (a failed attempt may be newer than current).
        revisions: how many revisions are kept.
        max_revisions: the key's own retention limit, or ``None`` for the store's default.
        updated_at_s: when the key last changed, in Unix seconds.
    """

    kind: Kind
    key: str
    original: int
    current: int
    latest: int
    revisions: int
    max_revisions: int | None
    updated_at_s: float

    def to_dict(self) -> dict[str, Any]:
        """Plain data, one entry per attribute."""
        return {
            "kind": self.kind, "key": self.key, "original": self.original,
            "current": self.current, "latest": self.latest, "revisions": self.revisions,
            "max_revisions": self.max_revisions, "updated_at_s": self.updated_at_s,
        }


def check_key(key: Any, kind: str) -> None:
    """Refuse a key that is not 1-:data:`KEY_MAX_CHARS` printable characters.

    Raises:
        StoreError: ``invalid_key``.
    """
    if not isinstance(key, str):
        raise StoreError(f"a {kind} key is a string, not {type(key).__name__}",
                         code="invalid_key", kind=kind)
    if not key or len(key) > KEY_MAX_CHARS or any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise StoreError(
            f"{kind} key {key[:40]!r} is not valid: use 1-{KEY_MAX_CHARS} printable characters",
            code="invalid_key", kind=kind, key=key[:KEY_MAX_CHARS])
