"""A bounded set of worker processes shared by many mods, each mod pinned to one worker."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from .._errors import ConfigError, SandboxClosed
from ..sandbox import Budget, HostFunction
from ._process import SpareWorkers, WorkerProcess, WorkerStats
from ._sandbox import DEFAULT_MEMORY_LIMIT_BYTES, IsolatedSandbox

__all__ = ["WorkerPool"]


class WorkerPool:
    """At most ``workers`` worker processes for any number of mods.

    A mod is pinned to one worker for its life (its runtime and state live there): the
    first worker to start, then the one with the fewest mods. When a worker is lost, the
    mod whose call lost it gets the structured result; the other mods pinned there are
    restored from their snapshots in the fresh worker on their next call.

    Args:
        workers: the most worker processes (each started when first needed).
        memory_limit_bytes: each worker's OS address-space limit (0: none).
        spare_workers: processes kept booted beside the workers, from the first worker's
            start on: a worker that is lost (or started later) takes one over at once
            instead of waiting ~0.4 s for a process to start, which would stall every
            mod's call behind it. Each costs a process's memory (~35 MiB resident). 0:
            none.

    Raises:
        ConfigError: ``workers`` below 1, a negative memory limit or spare count.
    """

    def __init__(self, workers: int = 2, *, memory_limit_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES,
                 spare_workers: int = 1, _test_hooks: bool = False) -> None:
        if workers < 1:
            raise ConfigError("a pool needs at least one worker")
        if memory_limit_bytes < 0:
            raise ConfigError("memory_limit_bytes cannot be negative")
        if spare_workers < 0:
            raise ConfigError("spare_workers cannot be negative")
        self.max_workers = workers
        self.memory_limit_bytes = memory_limit_bytes
        self._test_hooks = _test_hooks
        self._spares = SpareWorkers(spare_workers, memory_limit_bytes=memory_limit_bytes,
                                    test_hooks=_test_hooks) if spare_workers else None
        self._workers: list[WorkerProcess] = []
        self._pins: dict[str, WorkerProcess] = {}
        self._lock = threading.Lock()
        self._closed = False

    def sandbox(self, mod_id: str, budget: Budget | None = None, *,
                host_functions: Iterable[HostFunction] = (), **options: Any) -> IsolatedSandbox:
        """A sandbox for ``mod_id`` in one of the pool's workers (other options as
        :class:`IsolatedSandbox`).

        Raises:
            ConfigError: ``mod_id`` already has a sandbox in this pool.
            SandboxClosed: the pool is closed.
        """
        return IsolatedSandbox(budget, host_functions=host_functions, pool=self, mod_id=mod_id,
                               **options)

    def pin(self, mod_id: str) -> WorkerProcess:
        """Pin ``mod_id`` to a worker and return it: the first worker to start, then the
        one with the fewest mods. What a sandbox of the pool asks for when it is made (use
        :meth:`sandbox`).

        Raises:
            ConfigError: ``mod_id`` is pinned already.
            SandboxClosed: the pool is closed.
        """
        with self._lock:
            if self._closed:
                raise SandboxClosed("the worker pool is closed")
            if mod_id in self._pins:
                raise ConfigError(f"mod {mod_id!r} already has a sandbox in this pool")
            if len(self._workers) < self.max_workers:
                worker = WorkerProcess(memory_limit_bytes=self.memory_limit_bytes,
                                       test_hooks=self._test_hooks, spares=self._spares)
                self._workers.append(worker)
            else:
                worker = min(self._workers, key=lambda w: len(w.mods))
            worker.mods.append(mod_id)
            self._pins[mod_id] = worker
            return worker

    def unpin(self, mod_id: str) -> None:
        """Let ``mod_id`` go from its worker (a sandbox of the pool closing). Idempotent."""
        with self._lock:
            worker = self._pins.pop(mod_id, None)
            if worker is not None and mod_id in worker.mods:
                worker.mods.remove(mod_id)

    def worker_of(self, mod_id: str) -> WorkerStats:
        """The statistics of the worker ``mod_id`` is pinned to.

        Raises:
            KeyError: no such mod in the pool.
        """
        return self._pins[mod_id].stats()

    def stats(self) -> list[WorkerStats]:
        """Memory and CPU of every worker, with the mods pinned to it."""
        return [w.stats() for w in self._workers]

    @property
    def closed(self) -> bool:
        """The pool was closed: its sandboxes raise :class:`SandboxClosed`."""
        return self._closed

    @property
    def pids(self) -> tuple[int, ...]:
        """The running workers' process ids (spares not included)."""
        return tuple(pid for w in self._workers if (pid := w.pid) is not None)

    @property
    def spare_pids(self) -> tuple[int, ...]:
        """The process ids of the spares booted beside the workers."""
        return () if self._spares is None else self._spares.pids

    def close(self) -> None:
        """Stop every worker and reap it. Idempotent; sandboxes of the pool are unusable
        afterwards."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            workers, self._workers = self._workers, []
        for worker in workers:
            worker.close()
        if self._spares is not None:
            self._spares.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
