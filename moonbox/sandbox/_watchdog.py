"""A watchdog for work that one VM operation can make long: the host stops waiting for it.

No in-VM check runs inside one VM operation: a ``table.sort`` of long strings (each
comparison a full ``memcmp``), the rehash of a table whose number keys share one hash chain
(LuaJIT's number hash is not seeded), or a comparison of two huge strings can each run for
seconds between two metering checks. lupa lets go of the interpreter lock while Lua runs,
so the host need not wait for such a runtime: the work runs on a *runner* thread, and the
caller waits for it only until the deadline plus a margin. Past that, the runner and the
runtime it holds are **abandoned**: the caller goes on with a stall to report, nothing of the
host touches that runtime again, and the runner thread ends (dropping the runtime) when its
operation finally returns. The next call gets a new runner.

One handoff costs a few microseconds (two thread switches); the engine pays it per tick
or per resume, not per binding call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["STALL_MARGIN_S", "Stall", "Watchdog", "stall_margin_s"]

STALL_MARGIN_S = 0.25
"""The least time past its wall budget a resume may take before the host treats it as
stalled (with a watchdog) or as a time trip after the fact (without); the margin is the
wall budget itself when that is longer. It covers what the meter may overshoot by, so an
ordinary time trip, with its line, comes first."""


def stall_margin_s(wall_s: float) -> float:
    """The stall margin of a wall budget: STALL_MARGIN_S, or the budget if longer."""
    return max(STALL_MARGIN_S, wall_s)

# The longest single wait on a lock; a longer deadline is waited for in several.
_MAX_WAIT_S = min(threading.TIMEOUT_MAX, 3600.0)


class Stall:
    """What :meth:`Watchdog.call` returns when the caller stopped waiting.

    Attributes:
        waited_s: how long the caller waited, in seconds.
        deadline_s: the time (on the caller's clock) the wait ran out at.
    """

    __slots__ = ("waited_s", "deadline_s")

    def __init__(self, waited_s: float, deadline_s: float) -> None:
        self.waited_s = waited_s
        self.deadline_s = deadline_s

    def __repr__(self) -> str:
        return f"Stall(waited_s={self.waited_s:.3f})"


class _Runner:
    """One thread that runs what it is handed, one job at a time."""

    __slots__ = ("abandoned", "_job", "_ready", "_done", "_thread", "__weakref__")

    def __init__(self) -> None:
        self.abandoned = False
        self._job: list[Any] | None = None
        self._ready = threading.Lock()
        self._ready.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        self._thread = threading.Thread(target=self._serve, name="moonbox-runner", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        ready, done = self._ready, self._done
        while True:
            ready.acquire()
            job = self._job
            if job is None:  # told to stop
                return
            try:
                job[2] = job[0](*job[1])
            except BaseException as exc:  # handed back to the caller, whatever it is
                job[3] = exc
            job[0] = job[1] = None
            if self.abandoned:
                return  # nobody waits for this any more: end, dropping the work's references
            done.release()  # (abandoned just now: stop() below lets the loop end at once)

    def submit(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> list[Any]:
        job = [fn, args, None, None]
        self._job = job
        self._ready.release()
        return job

    def wait(self, timeout_s: float) -> bool:
        return self._done.acquire(timeout=min(max(timeout_s, 0.0), _MAX_WAIT_S))

    def stop(self) -> None:
        self._job = None
        try:
            self._ready.release()
        except RuntimeError:  # released already, not yet taken: the loop sees no job and ends
            pass

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()


class Watchdog:
    """Runs calls on a runner thread and stops waiting for one at its deadline.

    Not itself thread-safe: one caller thread at a time (a game's tick thread, a sandbox's
    user); sandboxes used from one thread may share one. Abandoned runners are counted in
    :attr:`stalls` and counted (while their thread still runs) by :attr:`stuck`.
    """

    def __init__(self) -> None:
        self.stalls = 0
        self._runner: _Runner | None = None
        self._stuck: list[_Runner] = []

    @property
    def stuck(self) -> int:
        """Runners abandoned whose operation has not returned yet (each holds a thread)."""
        self._stuck = [r for r in self._stuck if r.alive]
        return len(self._stuck)

    def call(self, deadline: Callable[[], float], clock: Callable[[], float],
             fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on the runner; its result, or a :class:`Stall`.

        ``deadline()`` gives the absolute time to stop waiting at, on the clock ``clock``
        (the caller's margin included: it should cover what the in-VM meter may overshoot
        by, so an ordinary time trip, with its line, wins over a stall); it is read again
        whenever the wait runs out, so work that excludes time (an approval the mod waits
        for) may move it later. What ``fn`` raises is raised here. A
        ``KeyboardInterrupt`` (or any exception) while waiting abandons the runner too,
        since the work it holds is in an unknown state, and is raised on.
        """
        runner = self._runner
        if runner is None:
            runner = self._runner = _Runner()
        job = runner.submit(fn, args)
        started = clock()
        try:
            while True:
                end = deadline()
                if runner.wait(end - clock()):
                    break
                now = clock()
                if now >= deadline():
                    self._abandon(runner)
                    return Stall(now - started, end)
        except BaseException:
            self._abandon(runner)
            raise
        exc = job[3]
        if exc is not None:
            job[3] = None
            raise exc
        return job[2]

    def _abandon(self, runner: _Runner) -> None:
        runner.abandoned = True
        runner.stop()  # its loop ends as soon as its work returns
        self._runner = None
        self.stalls += 1
        self._stuck.append(runner)

    def close(self) -> None:
        """Ends the idle runner's thread (abandoned ones end when their work returns)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.stop()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass
