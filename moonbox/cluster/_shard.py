"""A shard: one moonbox :class:`~moonbox.engine.Game` and its checkpoints on disk.

The class is plain Python: the local backend holds it in this process, the Ray backend
makes it an actor. Everything it takes and gives is plain data.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path
from typing import Any

import msgpack

from ..engine import DEFAULT_BUDGET, Game
from ._spec import ClusterError, ModSpec

__all__ = ["KEEP_CHECKPOINTS", "Shard", "atomic_write", "entity_digest"]

KEEP_CHECKPOINTS = 3
"""Checkpoints a shard keeps on disk; older ones are removed after a new one is written."""
_NAME = re.compile(r"^tick-(\d{10})\.snap$")


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all: a temporary file beside it, flushed
    and fsynced, renamed over ``path``, then the folder fsynced so the rename is durable."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def entity_digest(entities: list[dict[str, Any]]) -> str:
    """sha256 (hex) of entities as content, by name: each entity's fields without its id
    and parent id (numbers a world hands out in its own order), sorted by name. Two
    worlds, or a set of shards, holding the same things hash alike."""
    rows = []
    for e in entities:
        rows.append({k: v for k, v in e.items() if k not in ("id", "parent")})
    rows.sort(key=lambda r: r["name"])
    return hashlib.sha256(msgpack.packb(rows, use_bin_type=True)).hexdigest()


class Shard:
    """One shard of a sharded game.

    Args:
        index: the shard's number.
        mods: its mods (:meth:`ModSpec.to_dict` each), in load order, or the path of a
            file holding that list as msgpack. A Ray actor's constructor arguments are
            kept for its restarts only while they are small; large ones live in the object
            store, which does not keep them, so a sharded game with checkpoints passes a
            file.
        seed: the game's seed (each mod's generator is seeded from it and the mod's id, as
            in one game).
        checkpoint_dir: where its checkpoints go (a folder of its own is made under it);
            ``None``: no checkpoints. A shard built where checkpoints exist starts from the
            newest (a restarted actor's constructor runs again with the same arguments).
        budget: each call's budget, as ``Budget(...).model_dump()`` (plain data, as every
            argument of an actor); ``None``: the engine's default.
    """

    def __init__(self, index: int, mods: list[dict[str, Any]] | str, seed: int,
                 checkpoint_dir: str | None = None,
                 budget: dict[str, Any] | None = None) -> None:
        self.index = index
        if isinstance(mods, str):  # a file of them: what a restarted actor reads again
            mods = msgpack.unpackb(Path(mods).read_bytes(), raw=False)
        self.mods = [ModSpec.from_dict(m) for m in mods]
        self.seed = seed
        self.dir = (Path(checkpoint_dir) / f"shard-{index}") if checkpoint_dir else None
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
        # (The engine's Budget, checked again: the cluster reaches the engine alone.)
        self.game = Game(seed=seed, budget=None if budget is None
                         else type(DEFAULT_BUDGET).model_validate(budget))
        self.restored_from: int | None = None
        # Ticks run, and their wall and CPU (this process's) time: sums and the worst.
        self.ticks_run = 0
        self.ms_sum = self.cpu_ms_sum = self.ms_max = 0.0
        newest = self._checkpoints()
        if newest:  # a restore builds every mod from the snapshot: no load first
            self._restore(newest[-1][0])
        else:
            for m in self.mods:
                self.game.load_mod(m.id, m.source, chunk=m.chunk)

    # -- what the coordinator calls -------------------------------------------------
    def info(self) -> dict[str, Any]:
        """The shard's pid, tick, mods and the tick it was restored from (or ``None``)."""
        return {"index": self.index, "pid": os.getpid(), "tick": self.game.tick_count,
                "mods": [m.id for m in self.mods], "restored_from": self.restored_from}

    def tick(self, inbox: list[tuple[str, Any]]) -> dict[str, Any]:
        """Deliver ``inbox`` (events from the host and other shards, as host events: they
        reach this shard's mods this tick) and run one tick. Returns the tick's number,
        the events this shard's mods emitted (for the other shards), and figures."""
        for name, data in inbox:
            self.game.emit(name, data)
        start, cpu = time.perf_counter(), time.process_time()
        report = self.game.tick()
        ms = (time.perf_counter() - start) * 1000
        cpu_ms = (time.process_time() - cpu) * 1000
        self.ticks_run += 1
        self.ms_sum += ms
        self.cpu_ms_sum += cpu_ms
        self.ms_max = max(self.ms_max, ms)
        return {"tick": report.tick, "ms": ms, "cpu_ms": cpu_ms, "calls": report.calls,
                "failures": len(report.failures),
                "events": [(e.name, e.data, e.source) for e in report.events]}

    def checkpoint(self) -> dict[str, Any]:
        """Write the game's snapshot at this tick boundary; returns tick, bytes and ms."""
        if self.dir is None:
            raise ClusterError("this shard has no checkpoint folder", code="no_checkpoint")
        start = time.perf_counter()
        data = self.game.snapshot().to_bytes()
        tick = self.game.tick_count
        atomic_write(self.dir / f"tick-{tick:010d}.snap", data)
        for _, path in self._checkpoints()[:-KEEP_CHECKPOINTS]:
            path.unlink(missing_ok=True)
        return {"tick": tick, "bytes": len(data), "ms": (time.perf_counter() - start) * 1000}

    def rollback(self, tick: int) -> dict[str, Any]:
        """Put the game back to its checkpoint of ``tick``."""
        self._restore(tick)
        return self.info()

    def world_hash(self) -> str:
        """The shard's world's ``content_hash()``."""
        return self.game.world.content_hash()

    def entities(self) -> list[dict[str, Any]]:
        """Every entity of the shard's world, as plain data."""
        return [e.to_dict() for e in self.game.world.entities()]

    def figures(self) -> dict[str, Any]:
        """Mods, ticks run, ms per tick (mean, max) and CPU ms per tick (mean: the
        process's, a figure other work on the machine does not inflate) since the shard
        was built."""
        n = self.ticks_run
        return {"index": self.index, "pid": os.getpid(), "mods": len(self.mods),
                "tick": self.game.tick_count, "ticks_run": n,
                "ms_mean": self.ms_sum / n if n else 0.0, "ms_max": self.ms_max,
                "cpu_ms_mean": self.cpu_ms_sum / n if n else 0.0,
                "restored_from": self.restored_from}

    def close(self) -> None:
        self.game.close()

    # -- inside -----------------------------------------------------------------
    def _checkpoints(self) -> list[tuple[int, Path]]:
        if self.dir is None:
            return []
        found = []
        for path in self.dir.iterdir():
            match = _NAME.match(path.name)
            if match:
                found.append((int(match.group(1)), path))
        return sorted(found)

    def _restore(self, tick: int) -> None:
        path = None if self.dir is None else self.dir / f"tick-{tick:010d}.snap"
        if path is None or not path.exists():
            raise ClusterError(f"shard {self.index} has no checkpoint of tick {tick}",
                               code="no_checkpoint")
        self.game.restore(path.read_bytes())
        self.restored_from = tick
