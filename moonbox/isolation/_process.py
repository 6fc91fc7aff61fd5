"""One worker process, seen from the host: start, frames with a watchdog, kill, accounting."""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import psutil

from .._errors import HostError, ScriptError
from ._protocol import EXIT_OUT_OF_MEMORY, FrameError, FrameReader, write_frame
from ._worker import TEST_HOOKS_ENV

__all__ = ["LossCause", "WorkerCrashed", "WorkerLost", "WorkerProcess", "WorkerStats"]

log = logging.getLogger("moonbox.isolation")

_HOST_BUG = "the host failed to handle this call (a host bug, logged)"

LossCause = Literal["time", "memory", "crashed"]

# The worker sets its own address-space limit before it loads anything (see _worker.main).
_BOOT = (
    "import resource, sys\n"
    "limit = int(sys.argv[3])\n"
    "if limit > 0:\n"
    "    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
    "from moonbox.isolation._worker import main\n"
    "main()\n"
)


class WorkerCrashed(ScriptError):
    """The worker running the mod died: a crash of the VM (a signal such as SIGSEGV or
    SIGABRT) or an exit nobody asked for. The mod's state was restored from its last
    snapshot in a fresh worker.

    Attributes:
        signal: the signal that ended the worker (its name, e.g. ``SIGSEGV``), or ``None``.
        exit_code: its exit status when it exited without a signal, or ``None``.
    """

    kind = "crashed"

    def __init__(self, message: str, *, chunk: str | None = None,
                 signal: str | None = None, exit_code: int | None = None) -> None:
        super().__init__(message, chunk=chunk)
        self.signal = signal
        self.exit_code = exit_code


class WorkerLost(Exception):
    """Internal: the worker is gone (killed by the watchdog, out of memory, or crashed)."""

    def __init__(self, cause: LossCause, detail: str, *, signal: str | None = None,
                 exit_code: int | None = None) -> None:
        super().__init__(detail)
        self.cause = cause
        self.detail = detail
        self.signal = signal
        self.exit_code = exit_code


@dataclass(frozen=True, slots=True)
class WorkerStats:
    """What one worker process uses, read through the OS.

    Attributes:
        pid: the worker's process id (``None`` when it is not running).
        rss_bytes: resident memory.
        vms_bytes: address space in use (what the memory limit bounds).
        cpu_user_s: user CPU seconds of this process.
        cpu_system_s: system CPU seconds of this process.
        memory_limit_bytes: its address-space limit (0: none).
        respawns: how many times a fresh worker took over from a lost one.
        mods: the mods pinned to it.
    """

    pid: int | None
    rss_bytes: int
    vms_bytes: int
    cpu_user_s: float
    cpu_system_s: float
    memory_limit_bytes: int
    respawns: int
    mods: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {
            "pid": self.pid, "rss_bytes": self.rss_bytes, "vms_bytes": self.vms_bytes,
            "cpu_user_s": round(self.cpu_user_s, 3), "cpu_system_s": round(self.cpu_system_s, 3),
            "memory_limit_bytes": self.memory_limit_bytes, "respawns": self.respawns,
            "mods": list(self.mods),
        }


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill and reap (no zombie is left behind). Used by finalizers too."""
    if proc.poll() is None:
        try:
            proc.kill()
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process SIGKILL cannot stop
        log.error("worker %d did not exit after SIGKILL", proc.pid)


def _close_fds(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _finalize(proc: subprocess.Popen[bytes], fds: tuple[int, int]) -> None:
    _close_fds(*fds)
    _kill(proc)


class WorkerProcess:
    """A worker process and the two pipes to it; replaced whole when it is lost.

    Requests are serialized by a re-entrant lock: a host function serving one mod's call may
    run another mod of the same worker (the worker answers nested requests in order).

    Args:
        memory_limit_bytes: the worker's address-space limit (0: none).
        startup_timeout_s: how long a new worker may take to say it is ready.
        test_hooks: give the worker's sandboxes the test-only functions (tests only).
    """

    def __init__(self, *, memory_limit_bytes: int, startup_timeout_s: float = 30.0,
                 test_hooks: bool = False) -> None:
        self.memory_limit_bytes = memory_limit_bytes
        self.startup_timeout_s = startup_timeout_s
        self.test_hooks = test_hooks
        self.lock = threading.RLock()
        self.generation = 0
        self.respawns = 0
        self.mods: list[str] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._psutil: psutil.Process | None = None
        self._closed = False
        self._spawn()

    # -- lifecycle -----------------------------------------------------------------------

    def _spawn(self) -> None:
        to_worker_r, to_worker_w = os.pipe()
        from_worker_r, from_worker_w = os.pipe()
        env = dict(os.environ)
        env.pop(TEST_HOOKS_ENV, None)
        if self.test_hooks:
            env[TEST_HOOKS_ENV] = "1"
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, str(to_worker_r), str(from_worker_w),
                 str(self.memory_limit_bytes)],
                stdin=subprocess.DEVNULL,
                pass_fds=(to_worker_r, from_worker_w),
                env=env,
                close_fds=True,
            )
        finally:
            _close_fds(to_worker_r, from_worker_w)
        self._proc = proc
        self._write_fd = to_worker_w
        self._read_fd = from_worker_r
        self._reader = FrameReader(from_worker_r)
        self._poll = select.poll()
        self._poll.register(from_worker_r, select.POLLIN | select.POLLHUP | select.POLLERR)
        self._killed_for: LossCause | None = None
        self._finalizer = weakref.finalize(self, _finalize, proc, (to_worker_w, from_worker_r))
        self.generation += 1
        try:
            ready = self.receive(time.monotonic() + self.startup_timeout_s)
        except WorkerLost as lost:
            self._reap()
            raise HostError(f"a worker process could not start: {lost.detail}") from None
        if ready[0] != "ready":
            self._reap()
            raise HostError(f"a worker process sent {ready[0]!r} instead of ready")
        self._psutil = psutil.Process(proc.pid)

    def respawn(self) -> None:
        """Reap the lost worker and start a fresh one (a new generation)."""
        self._reap()
        self.respawns += 1
        self._spawn()

    def _reap(self) -> None:
        self._finalizer()  # closes the pipes, kills and waits: no zombie

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def alive(self) -> bool:
        return not self._closed and self._proc is not None and self._proc.poll() is None

    def close(self, timeout_s: float = 2.0) -> None:
        """Ask the worker to exit (end of its input), kill it after ``timeout_s``; reap it."""
        if self._closed:
            return
        self._closed = True
        proc = self._proc
        _close_fds(self._write_fd)
        if proc is not None:
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
        self._reap()

    # -- frames --------------------------------------------------------------------------

    def send(self, value: Any) -> None:
        """Send one frame. Raises :class:`WorkerLost` when the worker is gone."""
        try:
            write_frame(self._write_fd, value)
        except FrameError:
            raise self._lost("crashed") from None

    def receive(self, deadline: float | None) -> Any:
        """The next frame, waiting at most until ``deadline`` (monotonic seconds).

        Raises:
            WorkerLost: the worker died, or did not answer in time (it is killed then).
        """
        reader = self._reader
        if deadline is not None and not reader.pending():
            left = deadline - time.monotonic()
            if left <= 0 or not self._poll.poll(int(left * 1000) + 1):
                raise self._lost("time")
        try:
            return reader.read()
        except (FrameError, OSError):
            raise self._lost("crashed") from None

    def request(self, value: Any, deadline: float | None,
                serve: Callable[[list[Any]], list[Any]] | None = None,
                extend: Callable[[], float | None] | None = None) -> list[Any]:
        """Send a request and return its answer, serving ``call`` frames on the way.

        ``serve`` answers a ``call`` frame (a host function); ``extend`` gives a new deadline
        when the worker reports the start of another resume (a ``tick`` frame).

        Raises:
            WorkerLost: see :meth:`receive`.
        """
        with self.lock:
            self.send(value)
            while True:
                reply = self.receive(deadline)
                kind = reply[0]
                if kind == "call":
                    if serve is None:
                        self.send(["err", "no host functions are served here", "failed"])
                    else:
                        answer = serve(reply)
                        try:
                            self.send(answer)
                        except (TypeError, ValueError, OverflowError):
                            log.exception("a host function returned what cannot cross")
                            self.send(["err", _HOST_BUG, "failed"])
                elif kind == "tick":
                    if extend is not None:
                        deadline = extend()
                else:
                    return reply

    def _lost(self, cause: LossCause) -> WorkerLost:
        """Classify the loss of the worker, after making sure it is dead and reaped."""
        proc = self._proc
        assert proc is not None
        if cause == "time" and proc.poll() is None:
            self._killed_for = "time"
            proc.send_signal(signal.SIGKILL)
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            _kill(proc)
            code = proc.returncode
        self._reap()
        if self._killed_for == "time":
            return WorkerLost("time", "the worker overran its wall budget and was killed",
                              signal="SIGKILL")
        if code == EXIT_OUT_OF_MEMORY:
            return WorkerLost("memory", "the worker ran out of its memory limit",
                              exit_code=code)
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            if -code == signal.SIGKILL:
                # Nobody here sent it: the usual sender is the kernel's out-of-memory killer.
                return WorkerLost("memory", "the worker was killed by the OS (SIGKILL)",
                                  signal=name)
            return WorkerLost("crashed", f"the worker crashed ({name})", signal=name)
        return WorkerLost("crashed", f"the worker exited unexpectedly (status {code})",
                          exit_code=code)

    # -- accounting ----------------------------------------------------------------------

    def stats(self) -> WorkerStats:
        """Memory and CPU of the worker now (zeros when it is not running)."""
        rss = vms = 0
        user = system = 0.0
        pid = self.pid
        if pid is not None and self._psutil is not None:
            try:
                with self._psutil.oneshot():
                    mem = self._psutil.memory_info()
                    cpu = self._psutil.cpu_times()
                rss, vms, user, system = mem.rss, mem.vms, cpu.user, cpu.system
            except psutil.Error:
                pid = None
        return WorkerStats(pid, rss, vms, user, system, self.memory_limit_bytes,
                           self.respawns, tuple(self.mods))
