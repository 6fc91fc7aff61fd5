"""Where shards run: in this process (:class:`LocalBackend`) or as Ray actors, one per
shard (:class:`RayBackend`). Both run :class:`~moonbox.cluster.Shard` unchanged."""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Protocol

from ._shard import Shard
from ._spec import ClusterError

__all__ = ["Backend", "LocalBackend", "RayBackend", "ShardsDown", "start_local_ray"]

_LOOPBACK = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


class ShardsDown(Exception):
    """Shards whose actor died during a call. ``results`` holds the others' answers
    (none for the shards in ``down``)."""

    def __init__(self, down: list[int], results: list[Any]) -> None:
        super().__init__(f"shards {down} are down")
        self.down = down
        self.results = results


class Backend(Protocol):
    """What the coordinator needs of a backend."""

    name: str

    def start(self, configs: list[dict[str, Any]]) -> None: ...
    def call(self, method: str, args: dict[int, tuple[Any, ...]]) -> dict[int, Any]: ...
    def wait_up(self, index: int, timeout_s: float) -> bool: ...
    def restarts(self, index: int) -> int: ...
    def close(self) -> None: ...


class LocalBackend:
    """Every shard in this process, called one after the other."""

    name = "local"

    def __init__(self) -> None:
        self._shards: list[Shard] = []

    def start(self, configs: list[dict[str, Any]]) -> None:
        self._shards = [Shard(**c) for c in configs]

    def call(self, method: str, args: dict[int, tuple[Any, ...]]) -> dict[int, Any]:
        return {i: getattr(self._shards[i], method)(*a) for i, a in args.items()}

    def wait_up(self, index: int, timeout_s: float) -> bool:
        return True

    def restarts(self, index: int) -> int:
        return 0

    def close(self) -> None:
        for s in self._shards:
            s.close()
        self._shards = []


def start_local_ray(num_cpus: int = 2, **options: Any) -> Any:
    """Start a one-node Ray instance on loopback for this process (and return
    ``ray.init``'s context): no dashboard, token auth, every socket on 127.0.0.1. End it
    with ``ray.shutdown()``, never ``ray stop``.

    Ray reads whether it may leave loopback (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``: it
    may not) and its auth mode (``RAY_AUTH_MODE=token``) when it is first imported: call
    this before anything imports ``ray``, or set both in the environment.

    Raises:
        ClusterError: ``loopback``: ``ray`` was imported before without that setting.
    """
    if "ray" in sys.modules and (os.environ.get(_LOOPBACK) != "0"
                                 or os.environ.get("RAY_AUTH_MODE") != "token"):
        raise ClusterError(f"ray was imported before {_LOOPBACK}=0 and RAY_AUTH_MODE=token "
                           "were set: its servers would listen beyond loopback, or refuse "
                           "this process's token", code="loopback")
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ[_LOOPBACK] = "0"
    import ray

    return ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                    configure_logging=False, **options)


class RayBackend:
    """One Ray actor per shard, on the Ray instance this process is connected to.

    Args:
        max_restarts: how many times Ray starts a dead shard's actor again; its
            constructor then loads the shard's newest checkpoint. Calls are never retried
            (``max_task_retries=0``): the coordinator decides what a death means.
        num_cpus: CPUs each actor holds (0.5 by default, so that two shards fit a 2-CPU
            node beside the driver).
    """

    name = "ray"

    def __init__(self, *, max_restarts: int = 3, num_cpus: float = 0.5) -> None:
        import ray

        self._ray = ray
        self.max_restarts = max_restarts
        self._remote = ray.remote(Shard).options(max_restarts=max_restarts,
                                                 max_task_retries=0, num_cpus=num_cpus)
        self._actors: list[Any] = []
        self._restarts: list[int] = []

    def start(self, configs: list[dict[str, Any]]) -> None:
        self._actors = [self._remote.remote(**c) for c in configs]
        self._restarts = [0] * len(configs)

    def call(self, method: str, args: dict[int, tuple[Any, ...]]) -> dict[int, Any]:
        ray = self._ray
        refs = {i: getattr(self._actors[i], method).remote(*x) for i, x in args.items()}
        results: dict[int, Any] = {}
        down: list[int] = []
        for i, ref in refs.items():
            try:
                results[i] = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                down.append(i)
        if down:
            for i in down:
                self._restarts[i] += 1
            raise ShardsDown(down, results)
        return results

    def wait_up(self, index: int, timeout_s: float) -> bool:
        """Whether shard ``index``'s actor answers again within ``timeout_s`` (restarted
        by Ray); ``False`` once its restarts are used up or the time is over."""
        ray = self._ray
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                ray.get(self._actors[index].info.remote(), timeout=max(0.1, deadline
                                                                      - time.monotonic()))
                return True
            except ray.exceptions.ActorDiedError:
                return False
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                    ray.exceptions.GetTimeoutError):
                time.sleep(0.1)
        return False

    def restarts(self, index: int) -> int:
        return self._restarts[index]

    def close(self) -> None:
        ray = self._ray
        for a in self._actors:
            try:
                ray.get(a.close.remote(), timeout=10)
            except Exception:  # noqa: BLE001 - a dead shard has nothing to close
                pass
            ray.kill(a, no_restart=True)
        self._actors = []

