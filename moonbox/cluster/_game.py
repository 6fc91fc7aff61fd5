"""The coordinator: ticks every shard once per game tick, forwards events between shards,
takes checkpoints and rolls the game back and replays it when a shard comes back."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import msgpack

from ._backends import Backend, LocalBackend, ShardsDown
from ._shard import atomic_write, entity_digest
from ._spec import ClusterError, ModSpec, place

__all__ = ["SERIES_TICKS", "ShardedGame"]

_MANIFEST = "coordinator-tick-{:010d}.msgpack"
SERIES_TICKS = 10_000
"""Ticks the coordinator's per-tick series keep (the newest), and its means are over."""


class ShardedGame:
    """A game split over shards that tick in lockstep.

    Each shard is one moonbox ``Game`` with its own world; a mod lives on one shard, and
    every entity in the world of the shard whose mods made it. At each game tick the
    coordinator gives every shard the events of the tick before: those the host emitted
    (:meth:`emit`) and those the other shards' mods emitted. A shard's own mods' events
    reach its own mods as in one game; all arrive on the next tick. Exports and
    ``import`` stay within a shard; :func:`place` keeps mods that import each other
    together.

    Args:
        mods: the mods, in load order.
        shards: how many shards.
        seed: the game's seed (as ``Game(seed=...)``).
        backend: where the shards run (default: :class:`LocalBackend`).
        placement: mod id -> shard index, instead of :func:`place`'s rule.
        checkpoint_dir: an empty (or new) folder for checkpoints; ``None``: none, and no
            recovery.
        checkpoint_every: ticks between checkpoints (K); one is also taken at tick 0.
        restart_timeout_s: how long to wait for a dead shard's actor to come back.
        budget: each mod call's budget on every shard, a ``Budget`` (as
            ``Game(budget=...)``); ``None``: the engine's default.
    """

    def __init__(self, mods: Iterable[ModSpec], shards: int, *, seed: int = 0,
                 backend: Backend | None = None, placement: Mapping[str, int] | None = None,
                 checkpoint_dir: str | Path | None = None, checkpoint_every: int = 10,
                 restart_timeout_s: float = 60.0, budget: Any = None) -> None:
        if checkpoint_every < 1:
            raise ClusterError("checkpoint_every must be 1 or more", code="config")
        self.placed = place(mods, shards, placement)
        self.backend: Backend = backend if backend is not None else LocalBackend()
        self.dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            if any(self.dir.iterdir()):
                raise ClusterError(f"{self.dir} is not empty: a new game's checkpoints need "
                                   "a folder of their own", code="config")
        self.every = checkpoint_every
        self.restart_timeout_s = restart_timeout_s
        self.tick_count = 0
        self.live = list(range(shards))
        self.lost: dict[int, list[str]] = {}  # shard -> its mods, once its restarts ran out
        self.recoveries: list[dict[str, Any]] = []
        self.checkpoints: list[dict[str, Any]] = []  # tick, bytes (all shards), ms (slowest)
        # Per tick, the newest SERIES_TICKS: the coordinator's own work (forwarding
        # events); the whole tick, calls included; the wall less the shards' own time (the
        # slowest's when they run at once, all of theirs when one after the other: the
        # calls and their answers); the slowest shard's own time less the fastest's.
        self.coordinator_ms: deque[float] = deque(maxlen=SERIES_TICKS)
        self.tick_wall_ms: deque[float] = deque(maxlen=SERIES_TICKS)
        self.overhead_ms: deque[float] = deque(maxlen=SERIES_TICKS)
        self.skew_ms: deque[float] = deque(maxlen=SERIES_TICKS)
        self._host: list[tuple[str, Any]] = []  # host events for the next tick
        self._inputs: dict[int, list[tuple[str, Any]]] = {}  # tick -> host events since cp
        self._forward: dict[int, list[tuple[str, Any]]] = {i: [] for i in self.live}
        self._cp: int | None = None
        self._cp_forward: dict[int, list[tuple[str, Any]]] = {}
        configs = []
        for i, group in enumerate(self.placed):
            mods_of: list[dict[str, Any]] | str = [m.to_dict() for m in group]
            if self.dir is not None:  # a restarted shard reads its mods from disk
                path = self.dir / f"mods-shard-{i}.msgpack"
                atomic_write(path, msgpack.packb(mods_of, use_bin_type=True))
                mods_of = str(path)
            configs.append({"index": i, "mods": mods_of, "seed": seed,
                            "checkpoint_dir": None if self.dir is None else str(self.dir),
                            "budget": None if budget is None else budget.model_dump()})
        self.backend.start(configs)
        self.info()  # every shard built (an actor's start is not a tick's time)
        if self.dir is not None:
            self.checkpoint()

    # -- the host's side -----------------------------------------------------------
    def emit(self, event: str, data: Any = None) -> None:
        """Send a game event to the mods of every shard, delivered on the next tick."""
        self._host.append((event, data))

    def tick(self) -> dict[int, dict[str, Any]]:
        """Run one game tick on every shard; returns each live shard's answer (tick, ms,
        calls, failures, events). A checkpoint follows every ``checkpoint_every`` ticks."""
        t = self.tick_count + 1
        self._inputs[t], self._host = self._host, []
        out = self._run(t)
        if self.dir is not None and t % self.every == 0:
            self.checkpoint()
        return out

    def run(self, ticks: int) -> None:
        for _ in range(ticks):
            self.tick()

    def checkpoint(self) -> dict[str, Any]:
        """Every shard writes its snapshot; then the coordinator writes what it holds at
        this tick boundary (the events on their way between shards). Only a checkpoint
        with the coordinator's file is one the game rolls back to."""
        if self.dir is None:
            raise ClusterError("this game has no checkpoint folder", code="no_checkpoint")
        answers = self._call("checkpoint", {i: () for i in self.live})
        doc = {"tick": self.tick_count, "live": self.live,
               "forward": {str(i): v for i, v in self._forward.items()}}
        atomic_write(self.dir / _MANIFEST.format(self.tick_count),
                     msgpack.packb(doc, use_bin_type=True))
        for old in sorted(self.dir.glob("coordinator-tick-*.msgpack"))[:-3]:
            old.unlink(missing_ok=True)
        self._cp = self.tick_count
        self._cp_forward = {i: list(v) for i, v in self._forward.items()}
        self._inputs = {t: v for t, v in self._inputs.items() if t > self.tick_count}
        figure = {"tick": self.tick_count, "bytes": sum(a["bytes"] for a in answers.values()),
                  "ms": max(a["ms"] for a in answers.values())}
        self.checkpoints.append(figure)
        return figure

    # -- reading -----------------------------------------------------------------
    def world_hashes(self) -> dict[int, str]:
        """Each live shard's world ``content_hash()``."""
        return self._call("world_hash", {i: () for i in self.live})

    def combined_hash(self) -> str:
        """One hash of the whole game's world: :func:`entity_digest` over every live
        shard's entities, by name. Equal to the digest of one unsharded game's world when
        the two hold the same things.

        Raises:
            ClusterError: ``entity_owner``: two shards hold an entity of the same name.
        """
        entities: list[dict[str, Any]] = []
        owner: dict[str, int] = {}
        for i, rows in self._call("entities", {i: () for i in self.live}).items():
            for row in rows:
                if row["name"] in owner:
                    raise ClusterError(f"entity {row['name']!r} is held by shards "
                                       f"{owner[row['name']]} and {i}", code="entity_owner")
                owner[row["name"]] = i
            entities += rows
        return entity_digest(entities)

    def figures(self) -> dict[int, dict[str, Any]]:
        """Per live shard: mods, ticks run, ms per tick (mean, max), restarts, pid."""
        out = self._call("figures", {i: () for i in self.live})
        for i, f in out.items():
            f["restarts"] = self.backend.restarts(i)
        return out

    def observe(self) -> dict[str, Any]:
        """The game's figures as plain data, what ``moonbox cluster --json`` and the
        dashboard show: each live shard's (mods, ticks, own ms per tick: mean and max,
        CPU ms per tick, restarts, pid, the tick it was restored from); the skew between
        shards (per tick, the slowest shard's own time less the fastest's: mean and max);
        the coordinator's cost (per tick: its own work, and the wall less the shards' own
        time, in all and per shard: the calls and their answers); the checkpoints (tick,
        bytes of all shards, ms of the slowest), recoveries and lost shards. A shard's
        figures are over the ticks it ran since it was built, the coordinator's over its
        newest :data:`SERIES_TICKS` (replayed ticks included in both). It calls every
        shard: call it where the game is ticked."""
        def mean(values: deque[float]) -> float:
            return round(sum(values) / len(values), 4) if values else 0.0

        shards = []
        for i, f in sorted(self.figures().items()):
            shards.append({"shard": i, "mods": f["mods"],
                           "mod_ids": [m.id for m in self.placed[i]], "tick": f["tick"],
                           "ticks_run": f["ticks_run"], "ms_per_tick": round(f["ms_mean"], 4),
                           "ms_max": round(f["ms_max"], 4),
                           "cpu_ms_per_tick": round(f["cpu_ms_mean"], 4),
                           "restarts": f["restarts"],
                           "pid": f["pid"], "restored_from": f["restored_from"]})
        overhead = mean(self.overhead_ms)
        return {
            "backend": self.backend.name, "tick": self.tick_count, "shards": shards,
            "skew_ms": mean(self.skew_ms), "skew_max_ms": round(max(self.skew_ms, default=0.0),
                                                                4),
            "tick_ms": mean(self.tick_wall_ms),
            "coordinator_ms_per_tick": mean(self.coordinator_ms),
            "overhead_ms_per_tick": overhead,
            "overhead_ms_per_shard_per_tick": round(overhead / len(self.live), 4)
            if self.live else 0.0,
            "checkpoints": list(self.checkpoints), "last_checkpoint":
                self.checkpoints[-1] if self.checkpoints else None,
            "recoveries": list(self.recoveries),
            "lost": {str(k): v for k, v in self.lost.items()},
        }

    def info(self) -> dict[int, dict[str, Any]]:
        return self._call("info", {i: () for i in self.live})

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> ShardedGame:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- inside ------------------------------------------------------------------
    def _run(self, t: int) -> dict[int, dict[str, Any]]:
        host = self._inputs.get(t, [])
        inbox = {i: (self._forward[i] + host,) for i in self.live}
        called = time.perf_counter()
        try:
            answers = self.backend.call("tick", inbox)
        except ShardsDown as down:
            self._recover(down.down)  # back at tick t - 1, replayed: run t again
            return self._run(t)
        start = time.perf_counter()
        self._forward = {i: [] for i in self.live}
        for i, answer in answers.items():
            sent = [(name, data) for name, data, _source in answer["events"]]
            if sent:
                for j in self.live:
                    if j != i:
                        self._forward[j] += sent
        self.tick_count = t
        end = time.perf_counter()
        self.coordinator_ms.append((end - start) * 1000)
        own = [a["ms"] for a in answers.values()]
        wall = (end - called) * 1000
        self.tick_wall_ms.append(wall)
        busy = max(own, default=0.0) if getattr(self.backend, "parallel", True) else sum(own)
        self.overhead_ms.append(max(0.0, wall - busy))
        self.skew_ms.append(max(own, default=0.0) - min(own, default=0.0))
        return answers

    def _call(self, method: str, args: dict[int, tuple[Any, ...]]) -> dict[int, Any]:
        try:
            return self.backend.call(method, args)
        except ShardsDown as down:
            self._recover(down.down)
            return self.backend.call(method, {i: a for i, a in args.items() if i in self.live})

    def _recover(self, down: list[int]) -> None:
        """Shards died: wait for Ray to start them again (each loads its newest checkpoint),
        roll every shard back to the last checkpoint, and replay the host's events since.
        A shard that does not come back is lost: its mods are reported, the rest go on."""
        if self._cp is None:
            raise ClusterError(f"shards {down} died and the game has no checkpoint",
                               code="no_checkpoint")
        start = time.perf_counter()
        for i in down:
            if not self.backend.wait_up(i, self.restart_timeout_s):
                self.live.remove(i)
                self.lost[i] = [m.id for m in self.placed[i]]
        target = self.tick_count
        self.backend.call("rollback", {i: (self._cp,) for i in self.live})
        self.tick_count = self._cp
        self._forward = {i: list(self._cp_forward.get(i, [])) for i in self.live}
        while self.tick_count < target:
            self._run(self.tick_count + 1)
        self.recoveries.append({"down": list(down), "from_tick": self._cp, "to_tick": target,
                                "lost": [i for i in down if i in self.lost],
                                "ms": (time.perf_counter() - start) * 1000})
