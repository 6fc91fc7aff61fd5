"""What process isolation costs per call round trip, against the in-process sandbox: the
part of ``moonbox bench`` that starts workers, and the handlers and floor that
``benchmarks/test_isolation_bench.py`` reuses.

Three handlers run as loaded chunks of a sandbox with the default bindings and the world
bindings: a trivial one (``return 1``), one issuing 10 binding calls (``add``) and one
issuing 10 world commands (``coreai_world_set_color``, validated and queued by the host's
world). In a worker every call is one round trip, and so is every binding call it makes:
the overhead per round trip is (isolated - in process) / (1 + binding calls).

The floor: a worker process running a raw LuaJIT function (no sandbox) for each request, a
4-byte length and a msgpack body each way over two pipes, nothing checked, each side
busy-waiting for the other's frame as moonbox's do. Its round trip less the same call in
process is what the pipes, the frames and the waits cost by themselves.
"""

from __future__ import annotations

import os
import select
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import msgpack

from ..bindings import Registry, default_bindings
from ..isolation import IsolatedSandbox
from ..isolation._protocol import spin_window
from ..sandbox import Budget
from ..world import World, world_bindings
from ._baseline import interleaved, raw_luajit

__all__ = [
    "EXPECTED",
    "HANDLERS",
    "ISOLATION_MODES",
    "ROUND_TRIPS",
    "TARGET_ROUND_TRIP_US",
    "IsolationBench",
    "RawPipeFloor",
    "isolation_costs",
    "raw_in_process",
]

# Target of issue 9: the overhead of process isolation per call round trip.
TARGET_ROUND_TRIP_US = 30.0

HANDLERS = {
    "trivial": "return 1",
    "10-bindings": "local s = 0 for i = 1, 10 do s = add(s, i) end return s",
    "10-world-commands": ("for i = 1, 10 do coreai_world_set_color('lamp', i / 10, 0, 0) end "
                          "return 10"),
}
EXPECTED = {"trivial": 1, "10-bindings": 55, "10-world-commands": 10}
ROUND_TRIPS = {"trivial": 1, "10-bindings": 11, "10-world-commands": 11}
ISOLATION_MODES = ("in-process", "isolated", "isolated-no-state")

_BUDGET = Budget(steps=200_000, wall_s=5.0)  # loose: the machine may be shared


class IsolationBench:
    """A sandbox with the default bindings and the world bindings over a world of its own
    (one entity, ``lamp``, owned by the mod); ``handler(name)`` is a call of that loaded
    handler, which drops the commands it queued.

    Args:
        mode: ``in-process``; ``isolated`` (the mod's state global snapshotted after each
            call, as by default); ``isolated-no-state`` (none: the same work as in process).
    """

    def __init__(self, mode: str) -> None:
        self.world = World()
        self.world.submit("spawn", {"prefab": "cube", "name": "lamp"}, "bench")
        self.world.apply()
        self.registry = Registry([*default_bindings(), *world_bindings(self.world)])
        self.api = self.registry.mod("bench")
        self.sandbox: Any
        if mode == "in-process":
            self.sandbox = self.api.sandbox(_BUDGET)
        else:
            state = None if mode == "isolated-no-state" else "state"
            self.sandbox = IsolatedSandbox(_BUDGET, host_functions=self.api.host_functions,
                                           state_global=state)

    def handler(self, name: str) -> Callable[[], Any]:
        chunk = self.sandbox.load(HANDLERS[name], f"=({name})")
        run, discard = self.sandbox.run, self.world.discard

        def call() -> Any:
            outcome = run(chunk)
            discard("bench", 0)
            return outcome

        return call

    def close(self) -> None:
        self.sandbox.close()
        self.api.close()
        self.registry.close()


_RAW_WORKER = """
import os, select, struct, sys, time, msgpack
from moonbox.bench._baseline import raw_luajit
rfd, wfd, window = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
fn = raw_luajit().eval("function(x) return x end")
packer, head = msgpack.Packer(use_bin_type=True), struct.Struct("<I")
poll = select.poll()
poll.register(rfd, select.POLLIN)
ready, clock = poll.poll, time.monotonic
while True:
    end = clock() + window
    while not ready(0) and clock() < end:
        pass
    ready(None)
    data = os.read(rfd, 65536)
    if not data:
        break
    request = msgpack.unpackb(data[4:], raw=False)
    body = packer.pack(["r", fn(request[1])])
    os.write(wfd, head.pack(len(body)) + body)
"""


class RawPipeFloor:
    """A raw worker process and the host's side of one request: ``call()`` sends
    ``["run", 1]`` and reads ``["r", 1]``."""

    def __init__(self) -> None:
        to_r, self._to_w = os.pipe()
        self._from_r, from_w = os.pipe()
        window = spin_window()
        self._proc = subprocess.Popen([sys.executable, "-c", _RAW_WORKER, str(to_r), str(from_w),
                                       str(window)], pass_fds=(to_r, from_w))
        os.close(to_r)
        os.close(from_w)
        packer, head = msgpack.Packer(use_bin_type=True), struct.Struct("<I")
        unpack, read, write = msgpack.unpackb, os.read, os.write
        rfd, wfd = self._from_r, self._to_w
        poll = select.poll()
        poll.register(rfd, select.POLLIN)
        ready, clock = poll.poll, time.monotonic

        def call() -> Any:
            body = packer.pack(["run", 1])
            write(wfd, head.pack(len(body)) + body)
            end = clock() + window
            while not ready(0) and clock() < end:
                pass
            ready(None)
            return unpack(read(rfd, 65536)[4:], raw=False)[1]

        self.call = call
        if call() != 1:
            raise RuntimeError("the raw worker answered wrong")

    def close(self) -> None:
        os.close(self._to_w)
        self._proc.wait(timeout=10)
        os.close(self._from_r)


def raw_in_process() -> Callable[[], Any]:
    """The raw worker's function, called in process."""
    fn = raw_luajit().eval("function(x) return x end")
    return lambda: fn(1)


# Untimed calls at the start of each sample. A worker that waited while the other sampler
# ran has gone to sleep (see _protocol.spin_window), and so have the caches; its first
# calls pay the wake-up, several times a round trip on this kind of machine. The round
# trip is what is measured here; a call after a long wait is measured on its own by
# benchmarks/test_isolation_bench.py.
_SETTLING_CALLS = 5


def _batch_sampler(fn: Callable[[], Any], calls: int) -> Callable[[], float]:
    def sample() -> float:
        for _ in range(_SETTLING_CALLS):
            fn()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t0) / calls

    return sample


def _watched(sample: Callable[[], float], sandbox: IsolatedSandbox,
             contended: list[int]) -> Callable[[], float]:
    """``sample``, counting in ``contended`` the samples that ended with the host's reader
    of the sandbox's worker finding the CPUs contended: it slept for each frame then,
    instead of busy-waiting (see ``_protocol.FrameReader``)."""

    def watched() -> float:
        took = sample()
        if sandbox._worker._reader.contended:
            contended[0] += 1
        return took

    return watched


def isolation_costs(rounds: int, calls: int) -> dict[str, Any]:
    """Per call, in process and in a worker (no state snapshot: the same work), interleaved
    round robin as the rest of ``moonbox bench``: medians in µs, the overhead per round
    trip, and how many of the worker's samples ended with the CPUs found contended (another
    process took a CPU: the sides slept instead of busy-waiting). Also the raw floor.

    One handler (or the floor) at a time, with only its own worker alive: a worker the
    host has just left busy-waits for its next request for up to a window (see
    ``_protocol.spin_window``), and the workers of other handlers doing so in the middle of
    a sample would measure the machine's contention, not the round trip."""
    report: dict[str, Any] = {}
    for name in ("trivial", "10-world-commands", "raw floor"):
        with ExitStack() as stack:
            samplers: dict[str, Callable[[], float]] = {}
            contended = [0]
            if name == "raw floor":
                floor = RawPipeFloor()
                stack.callback(floor.close)
                samplers["isolated-no-state"] = _batch_sampler(floor.call, calls)
                samplers["in-process"] = _batch_sampler(raw_in_process(), calls)
            else:
                for mode in ("in-process", "isolated-no-state"):
                    bench = IsolationBench(mode)
                    stack.callback(bench.close)
                    call = bench.handler(name)
                    for _ in range(50):  # warm: the first call starts what later ones reuse
                        outcome = call()
                    if outcome.values != (EXPECTED[name],):
                        raise RuntimeError(f"{name} ({mode}) returned {outcome.values!r}")
                    samplers[mode] = _batch_sampler(call, calls)
                    if mode != "in-process":
                        samplers[mode] = _watched(samplers[mode], bench.sandbox, contended)
            samples = interleaved(samplers, rounds)
        in_process = statistics.median(samples["in-process"]) * 1e6
        isolated = statistics.median(samples["isolated-no-state"]) * 1e6
        trips = ROUND_TRIPS.get(name, 1)
        report[name] = {"in_process_us": in_process, "isolated_us": isolated,
                        "round_trips": trips,
                        "per_round_trip_us": (isolated - in_process) / trips}
        if name != "raw floor":  # a raw worker does not check the CPUs
            report[name].update(contended_samples=contended[0], samples=rounds)
    return report
