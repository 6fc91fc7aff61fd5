"""The mod API over a store: ``coreai_lua_*`` and ``coreai_data_*`` bindings.

The only module of :mod:`moonbox.store` that knows the bindings; the store itself runs
without them. A mod (or the Programmer) reads versions and moves a key's current revision;
recording new versions stays with the host, which is the one that ran them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from .._errors import BindingError
from ..bindings import Binding
from ..sandbox import HostCall
from ._errors import StoreError
from ._model import Kind, Revision
from ._store import DataOverlays, ScriptVersions, Store

__all__ = ["HISTORY_MAX_ENTRIES", "store_bindings"]

HISTORY_MAX_ENTRIES = 100
"""The most revisions one history call returns."""

_PREFIX: dict[Kind, str] = {"script": "coreai_lua", "data": "coreai_data"}


class KeyArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: StrictStr = Field(min_length=1)


class HistoryArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: StrictStr = Field(min_length=1)
    limit: StrictInt = Field(default=10, ge=1, le=HISTORY_MAX_ENTRIES)


class RevisionArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: StrictStr = Field(min_length=1)
    rev: StrictInt = Field(ge=1)


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


def store_bindings(
    store: Store, *, prefix: str = "", scripts: bool = True, data: bool = True,
) -> tuple[Binding, ...]:
    """The versions bindings over ``store``, for the host to grant to a mod or the Programmer.

    For each kind (``coreai_lua_*`` for scripts, ``coreai_data_*`` for data overlays):

    - ``get_current(key)``: the current revision as a table (``rev``, ``source`` or
      ``payload``, ``hash``, ``recorded_at_s``, ``author``, ``role``, ``trace_id``,
      ``outcome``); for data with a registered model, also ``effective``, the base with the
      overlay applied. Risk ``read``.
    - ``history(key, limit = 10)``: up to ``limit`` (at most 100) revisions, newest first,
      each as above plus ``error`` and the flags ``current`` and ``original``. Risk ``read``.
    - ``reset(key)``: make the original current again; returns it. Risk ``write``.
    - ``reset_revision(key, rev)``: make revision ``rev`` current again (it must have
      succeeded); returns it. Risk ``write``.
    - ``reset_all()``: reset every key of the kind the bindings can see; returns how many
      changed. Risk ``write`` (history is kept, so it can be undone key by key).

    Args:
        store: the store to serve.
        prefix: the bindings see only keys that start with it (others are unknown to
            them, and ``reset_all`` leaves them alone). ``""`` is every key.
        scripts: include the ``coreai_lua_*`` bindings.
        data: include the ``coreai_data_*`` bindings.

    A store error reaches Lua as one line, ``name: message``, with the store's code as
    the binding's reason (``unknown_key``, ``unknown_revision``, ``failed_revision``, ...).
    A failure of the store's file (``corrupt_store``, ``io_error``, ``busy``) reaches it
    without the file's path: a neutral line that the host must recover the store.
    """
    out: list[Binding] = []
    if scripts:
        out += _kind_bindings(store.scripts, prefix)
    if data:
        out += _kind_bindings(store.data, prefix)
    return tuple(out)


def _kind_bindings(versions: ScriptVersions | DataOverlays, prefix: str) -> list[Binding]:
    kind = versions.kind
    name = _PREFIX[kind]
    what = "script" if kind == "script" else "data overlay"

    def visible(key: str) -> str:
        if not key.startswith(prefix):
            # Indistinguishable from a key that does not exist: no probing outside the scope.
            raise BindingError(versions._unknown_key(key).message, reason="unknown_key")
        return key

    def get_current(call: HostCall, args: KeyArgs) -> dict[str, Any]:
        with _store_errors():
            return _current_table(versions, versions.current(visible(args.key)))

    def history(call: HostCall, args: HistoryArgs) -> list[dict[str, Any]]:
        with _store_errors():
            key = visible(args.key)
            info = versions.info(key)
            return [
                {**_revision_table(r), "current": r.rev == info.current,
                 "original": r.rev == info.original}
                for r in versions.history(key, limit=args.limit)
            ]

    def reset(call: HostCall, args: KeyArgs) -> dict[str, Any]:
        with _store_errors():
            return _current_table(versions, versions.reset(visible(args.key)))

    def reset_revision(call: HostCall, args: RevisionArgs) -> dict[str, Any]:
        with _store_errors():
            return _current_table(versions, versions.rollback(visible(args.key), args.rev))

    def reset_all(call: HostCall, args: NoArgs) -> int:
        with _store_errors():
            return versions.reset_all(prefix=prefix)

    return [
        Binding(f"{name}_get_current", KeyArgs, get_current, risk="read",
                group="versions", cost=1,
                description=f"The current version of a {what}: a table with rev, hash, "
                            "author, role, trace_id and its content."),
        Binding(f"{name}_history", HistoryArgs, history, risk="read",
                group="versions", cost=5,
                description=f"Recent revisions of a {what}, newest first (limit 1-100, "
                            "default 10), with outcome and error."),
        Binding(f"{name}_reset", KeyArgs, reset, risk="write",
                group="versions", cost=5,
                description=f"Make the original of a {what} current again; returns it."),
        Binding(f"{name}_reset_revision", RevisionArgs, reset_revision, risk="write",
                group="versions", cost=5,
                description=f"Make an earlier successful revision of a {what} current "
                            "again; returns it."),
        Binding(f"{name}_reset_all", NoArgs, reset_all, risk="write",
                group="versions", cost=20,
                description=f"Reset every {what} back to its original; returns how many "
                            "changed."),
    ]


def _revision_table(r: Revision) -> dict[str, Any]:
    out = r.to_dict()
    del out["kind"]
    return {k: v for k, v in out.items() if v is not None}


def _current_table(versions: ScriptVersions | DataOverlays, r: Revision) -> dict[str, Any]:
    out = _revision_table(r)
    out.pop("error", None)
    if isinstance(versions, DataOverlays) and versions.registered(r.key):
        out["effective"] = versions.effective(r.key)
    return out


# Failures of the store's file are the host's to mend: a mod sees what it can do about
# them, never the file's path or what SQLite said.
_FILE_FAILURES: dict[str, str] = {
    "corrupt_store": "the versions store is damaged and read-only; the host must recover it",
    "io_error": "the versions store cannot be used now; the host must check it",
    "busy": "the versions store is busy; try again later",
}


@contextmanager
def _store_errors() -> Iterator[None]:
    """Turn a :class:`StoreError` into the one-line :class:`BindingError` a mod sees."""
    try:
        yield
    except StoreError as exc:
        raise BindingError(_FILE_FAILURES.get(exc.code, exc.message), reason=exc.code) from None
