"""A reference model of the versions store, in memory, and the operations both understand.

The property tests and the crash tests run the same operations on a real store and on
:class:`Model`, then compare :func:`snapshot` of the store with :meth:`Model.snapshot`. The
model is deliberately naive: dicts and loops, no SQL, written from the documented rules.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from moonbox.store import Store, StoreError, apply_overlay

KINDS = ("script", "data")
BASE = {"hp": 10, "speed": 1.5, "loot": {"gold": 1, "gems": [1, 2]}}


class Stats(BaseModel):
    """The model registered for every data key of these tests."""

    hp: int
    speed: float


Op = tuple[Any, ...]
"""("success" | "failure", kind, key, content), ("rollback", kind, key, rev),
("reset", kind, key), ("reset_all", kind | None), ("retention", kind, key, n | None)."""


@dataclass
class KeyModel:
    original: int
    current: int
    next_rev: int
    limit: int | None = None
    revs: dict[int, tuple[Any, str, str | None]] = field(default_factory=dict)


class Model:
    """What the store should hold after a sequence of operations."""

    def __init__(self, max_revisions: int) -> None:
        self.max_revisions = max_revisions
        self.keys: dict[tuple[str, str], KeyModel] = {}

    def apply(self, op: Op) -> str | None:
        """Apply one operation; return the error code the store should raise, or None."""
        name, *rest = op
        return getattr(self, f"_{name}")(*rest)

    def _success(self, kind: str, key: str, content: Any) -> str | None:
        if kind == "data" and not _valid(content):
            return "invalid_payload"
        return self._record(kind, key, content, "ok", None)

    def _failure(self, kind: str, key: str, content: Any) -> str | None:
        return self._record(kind, key, content, "failed", "it failed")

    def _record(self, kind: str, key: str, content: Any, outcome: str,
                error: str | None) -> str | None:
        k = self.keys.get((kind, key))
        if k is None:
            if kind == "script":
                if outcome != "ok":
                    return "unknown_key"
                k = KeyModel(original=1, current=1, next_rev=1)
            else:
                k = KeyModel(original=1, current=1, next_rev=2, revs={1: (None, "ok", None)})
            self.keys[(kind, key)] = k
        rev = k.next_rev
        k.next_rev += 1
        k.revs[rev] = (content, outcome, error)
        if outcome == "ok":
            k.current = rev
        self._evict(k)
        return None

    def _evict(self, k: KeyModel) -> None:
        limit = k.limit or self.max_revisions
        while len(k.revs) > limit:
            oldest = min(r for r in k.revs if r not in (k.original, k.current))
            del k.revs[oldest]

    def _rollback(self, kind: str, key: str, rev: int) -> str | None:
        k = self.keys.get((kind, key))
        if k is None:
            return "unknown_key"
        if rev not in k.revs:
            return "unknown_revision"
        if k.revs[rev][1] != "ok":
            return "failed_revision"
        k.current = rev
        return None

    def _reset(self, kind: str, key: str) -> str | None:
        k = self.keys.get((kind, key))
        if k is None:
            return "unknown_key"
        k.current = k.original
        return None

    def _reset_all(self, kind: str | None) -> str | None:
        for (kk, _), k in self.keys.items():
            if kind in (None, kk):
                k.current = k.original
        return None

    def _retention(self, kind: str, key: str, n: int | None) -> str | None:
        k = self.keys.get((kind, key))
        if k is None:
            return "unknown_key"
        k.limit = n
        self._evict(k)
        return None

    def snapshot(self) -> dict[tuple[str, str], Any]:
        return {
            ident: (k.original, k.current, k.next_rev, k.limit,
                    {rev: value for rev, value in sorted(k.revs.items())})
            for ident, k in sorted(self.keys.items())
        }


def _valid(content: Any) -> bool:
    try:
        Stats.model_validate(apply_overlay(BASE, content))
    except ValidationError:
        return False
    return True


def open_store(path: Any, max_revisions: int, **kwargs: Any) -> Store:
    """A store with :class:`Stats` registered for every data key the generators use."""
    store = Store(path, max_revisions=max_revisions, **kwargs)
    for key in DATA_KEYS:
        store.data.register(key, Stats, BASE)
    return store


def apply_to_store(store: Store, op: Op) -> str | None:
    """Apply one operation to a real store; return the code of the StoreError, or None."""
    name, kind, *rest = op
    try:
        if name == "reset_all":
            store.reset_all(kind)
            return None
        v = store.versions(kind)
        key = rest[0]
        if name == "success":
            v.record_success(key, rest[1])
        elif name == "failure":
            v.record_failure(key, rest[1], error="it failed")
        elif name == "rollback":
            v.rollback(key, rest[1])
        elif name == "reset":
            v.reset(key)
        elif name == "retention":
            v.set_retention(key, rest[1])
        else:
            raise ValueError(name)
    except StoreError as exc:
        return exc.code
    return None


def snapshot(store: Store) -> dict[tuple[str, str], Any]:
    """The state of a store in the model's shape (times left out), read from its export."""
    out = {}
    for entry in store.export()["keys"]:
        field_name = "source" if entry["kind"] == "script" else "payload"
        out[(entry["kind"], entry["key"])] = (
            entry["original"], entry["current"], entry["next_rev"], entry["max_revisions"],
            {r["rev"]: (r[field_name], r["outcome"], r["error"]) for r in entry["revisions"]},
        )
    return dict(sorted(out.items()))


def check_invariants(store: Store) -> None:
    """What holds of any store, whatever happened to it."""
    for info in store.keys():
        v = store.versions(info.kind)
        history = v.history(info.key)
        revs = {r.rev: r for r in history}
        assert info.original in revs and info.current in revs
        assert revs[info.original].outcome == "ok" and revs[info.current].outcome == "ok"
        assert v.current(info.key) == revs[info.current]
        assert info.revisions == len(history) == len(revs)
        assert info.latest == max(revs)
        assert info.revisions <= (info.max_revisions or store.max_revisions)
        assert [r.rev for r in history] == sorted(revs, reverse=True)


SCRIPT_KEYS = tuple(f"mod{i}:main" for i in range(6))
DATA_KEYS = tuple(f"table{i}" for i in range(3))


def random_ops(seed: int, count: int) -> list[Op]:
    """A deterministic mix of every operation, errors included."""
    rng = random.Random(seed)
    ops: list[Op] = []
    for i in range(count):
        kind = rng.choice(KINDS)
        key = rng.choice(SCRIPT_KEYS if kind == "script" else DATA_KEYS)
        roll = rng.random()
        if roll < 0.45:
            content: Any = (f"-- {i}\nreturn {rng.randint(0, 9)}\n" if kind == "script"
                            else {"hp": rng.choice([rng.randint(0, 99), "bad"]),
                                  "loot": {"gems": [i]}})
            ops.append(("success", kind, key, content))
        elif roll < 0.65:
            content = f"return ({i}" if kind == "script" else {"hp": i, "speed": "fast"}
            ops.append(("failure", kind, key, content))
        elif roll < 0.8:
            ops.append(("rollback", kind, key, rng.randint(1, max(1, i // 4))))
        elif roll < 0.88:
            ops.append(("reset", kind, key))
        elif roll < 0.93:
            ops.append(("reset_all", rng.choice([None, kind])))
        else:
            ops.append(("retention", kind, key, rng.choice([None, 3, 5, 8])))
    return ops
