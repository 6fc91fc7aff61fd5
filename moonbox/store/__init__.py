"""Versioned scripts and data overlays, on disk: original, current and history per key.

A game that lets an LLM (or a modder) change its scripts and data needs one thing above
all: getting back to a known good state, fast, after any crash. :class:`Store` keeps, per
key, the original, the current revision and a bounded history in one SQLite file per game;
every write is atomic and durable, and two processes may write at once without losing an
update. A damaged file opens read-only and exports what can still be read
(:class:`StoreCorrupt`). See docs/store.md.

The store stands alone: it imports nothing of the sandbox or the bindings.
:func:`store_bindings` (in ``_mod_api``, which imports the bindings) is the mod API over it.
"""

from typing import TYPE_CHECKING

from ._errors import StoreCorrupt, StoreError, StoreErrorCode
from ._exchange import EXPORT_FORMAT, EXPORT_FORMAT_VERSION
from ._model import KEY_MAX_CHARS, KeyInfo, Kind, Outcome, Revision, RevisionRef
from ._overlay import apply_overlay
from ._schema import SCHEMA_VERSION
from ._store import (
    CHECK_MAX_BYTES,
    DEFAULT_MAX_REVISIONS,
    MIN_MAX_REVISIONS,
    DataOverlays,
    ScriptVersions,
    Store,
)

if TYPE_CHECKING:
    from ._mod_api import store_bindings

__all__ = [
    "CHECK_MAX_BYTES",
    "DEFAULT_MAX_REVISIONS",
    "EXPORT_FORMAT",
    "EXPORT_FORMAT_VERSION",
    "KEY_MAX_CHARS",
    "MIN_MAX_REVISIONS",
    "SCHEMA_VERSION",
    "DataOverlays",
    "KeyInfo",
    "Kind",
    "Outcome",
    "Revision",
    "RevisionRef",
    "ScriptVersions",
    "Store",
    "StoreCorrupt",
    "StoreError",
    "StoreErrorCode",
    "apply_overlay",
    "store_bindings",
]


def __getattr__(name: str) -> object:
    # Imported on first use: the store runs without the bindings, and a bindings module
    # may import the store without a cycle.
    if name == "store_bindings":
        from ._mod_api import store_bindings

        return store_bindings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
