"""What a sharded game is made of: mods as plain data, and the rule that places them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ClusterError", "ModSpec", "place"]


class ClusterError(Exception):
    """A sharded game cannot do what was asked (a placement that splits an import, a
    shard whose restarts are used up, a checkpoint that cannot be read).

    Attributes:
        code: a short machine-readable reason (``placement``, ``no_checkpoint``, ...).
    """

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(f"{message} [{code}]")
        self.code = code


@dataclass(frozen=True)
class ModSpec:
    """One mod of a sharded game, as plain data (it crosses to other processes).

    Attributes:
        id: the mod's id.
        source: its main chunk's Lua source.
        chunk: its chunk name (default ``@mods/<id>/main.lua``).
        imports: ids of the mods it imports from; placement keeps them on its shard.
    """

    id: str
    source: str
    chunk: str | None = None
    imports: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "source": self.source, "chunk": self.chunk,
                "imports": list(self.imports)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModSpec:
        return cls(data["id"], data["source"], data.get("chunk"),
                   tuple(data.get("imports", ())))


def place(mods: Iterable[ModSpec], shards: int,
          placement: Mapping[str, int] | None = None) -> list[list[ModSpec]]:
    """The mods of each shard, in load order.

    Without ``placement``: mods that import each other (directly or through others) form
    a group, groups are taken in the order their first mod comes, and each goes whole to
    the shard with the fewest mods so far (the lowest index on a tie). With
    ``placement`` (mod id -> shard index, every mod named): as given, checked.

    Raises:
        ClusterError: ``placement``: fewer than one shard, a duplicate id, a mod missing
            from ``placement`` or placed out of range, or two mods that import each other
            placed apart. An import of a mod that is not in the game is left to the
            engine (the ``import`` fails in the mod, as in one game).
    """
    mods = list(mods)
    if shards < 1:
        raise ClusterError("a sharded game needs at least one shard", code="placement")
    ids = [m.id for m in mods]
    if len(set(ids)) != len(ids):
        raise ClusterError("two mods have the same id", code="placement")
    parent = {i: i for i in ids}

    def root(i: str) -> str:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for m in mods:
        for dep in m.imports:
            if dep in parent:
                a, b = root(m.id), root(dep)
                if a != b:
                    parent[max(a, b, key=ids.index)] = min(a, b, key=ids.index)
    out: list[list[ModSpec]] = [[] for _ in range(shards)]
    if placement is not None:
        for m in mods:
            where = placement.get(m.id)
            if not isinstance(where, int) or not 0 <= where < shards:
                raise ClusterError(f"mod {m.id!r} has no shard in 0..{shards - 1}",
                                   code="placement")
            out[where].append(m)
        for m in mods:
            for dep in m.imports:
                if dep in placement and placement[dep] != placement[m.id]:
                    raise ClusterError(f"mod {m.id!r} imports {dep!r}, placed on another "
                                       "shard: exports stay within a shard", code="placement")
        return out
    groups: dict[str, list[ModSpec]] = {}
    for m in mods:
        groups.setdefault(root(m.id), []).append(m)
    for group in groups.values():
        target = min(range(shards), key=lambda s: (len(out[s]), s))
        out[target].extend(group)
    return out
