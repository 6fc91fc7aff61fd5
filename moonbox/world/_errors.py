"""The world's error type and the reason codes of refused commands."""

from __future__ import annotations

from typing import Literal

from .._errors import MoonboxError

__all__ = ["REASONS", "Reason", "WorldError"]

Reason = Literal[
    "unknown_prefab",
    "invalid_name",
    "duplicate_name",
    "not_found",
    "missing_parent",
    "parent_cycle",
    "not_owner",
    "not_finite",
    "out_of_bounds",
    "invalid_properties",
    "world_full",
    "transaction_failed",
]

REASONS: dict[str, str] = {
    "unknown_prefab": "the prefab is not in the world's prefab registry",
    "invalid_name": "a name must be 1-64 printable characters",
    "duplicate_name": "another entity already has that name",
    "not_found": "no entity has that name",
    "missing_parent": "the parent named does not exist",
    "parent_cycle": "the entity would become its own ancestor",
    "not_owner": "the entity (or the parent, or a descendant) belongs to someone else",
    "not_finite": "a coordinate, rotation, scale, color or property is NaN or infinite",
    "out_of_bounds": "a value is outside the world's bounds",
    "invalid_properties": "the properties do not fit the prefab's schema",
    "world_full": "the world holds its maximum number of entities",
    "transaction_failed": "another command of the same transaction or batch was refused",
}
"""Every reason code a refused command can carry, with what it means."""


class WorldError(MoonboxError):
    """A world operation the host asked for that cannot be done as asked.

    ``code`` is stable for programs: ``queue_full`` (too many commands pending),
    ``bad_snapshot`` (a snapshot that does not load), ``transaction`` (begin/commit/rollback
    out of order, or a transaction past its size), ``no_mod`` (a world binding called
    without a mod identity).
    """

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code
