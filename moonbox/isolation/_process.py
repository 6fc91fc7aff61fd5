"""One worker process, seen from the host: start, frames with a watchdog, kill, accounting."""

from __future__ import annotations

import logging
import os
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

from .._errors import HostError, SandboxClosed, ScriptError
from ._protocol import (
    EXIT_OUT_OF_MEMORY,
    SPIN_ENV,
    WIRE_ENV,
    FrameCorrupt,
    FrameError,
    FrameReader,
    FrameTimeout,
    FrameWriter,
    spin_window,
)
from ._worker import TEST_HOOKS_ENV

__all__ = ["LossCause", "SpareWorkers", "WorkerCrashed", "WorkerLost", "WorkerProcess",
           "WorkerStats"]

log = logging.getLogger("moonbox.isolation")

_HOST_BUG = "the host failed to handle this call (a host bug, logged)"

LossCause = Literal["time", "memory", "crashed"]

_CPU_WINDOW_S = 1.0  # the shortest window a worker's CPU share is taken over
_CLOSE_WAIT_S = 5.0  # how long close() waits for a request in flight to let go

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
        cpu_percent: its CPU use over the last second or more, in percent of one core.
    """

    pid: int | None
    rss_bytes: int
    vms_bytes: int
    cpu_user_s: float
    cpu_system_s: float
    memory_limit_bytes: int
    respawns: int
    mods: tuple[str, ...]
    cpu_percent: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "pid": self.pid, "rss_bytes": self.rss_bytes, "vms_bytes": self.vms_bytes,
            "cpu_user_s": round(self.cpu_user_s, 3), "cpu_system_s": round(self.cpu_system_s, 3),
            "cpu_percent": self.cpu_percent,
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


class _Pipes:
    """The host's ends of the two pipes to one worker, each closed exactly once: a closed
    end reads as -1, so no later close (the finalizer's included) can hit a descriptor
    number the OS has given to someone else since."""

    __slots__ = ("write_fd", "read_fd", "_lock")

    def __init__(self, write_fd: int, read_fd: int) -> None:
        self.write_fd = write_fd
        self.read_fd = read_fd
        self._lock = threading.Lock()

    def close_write(self) -> None:
        with self._lock:
            fd, self.write_fd = self.write_fd, -1
        if fd >= 0:
            _close_fds(fd)

    def close(self) -> None:
        with self._lock:
            fds = [fd for fd in (self.write_fd, self.read_fd) if fd >= 0]
            self.write_fd = self.read_fd = -1
        _close_fds(*fds)


def _finalize(proc: subprocess.Popen[bytes], pipes: _Pipes) -> None:
    pipes.close()
    _kill(proc)


# What the worker's environment keeps of the host's, by name: nothing else crosses (the
# host's secrets, tokens and configuration stay in the host).
_ENV_ALLOWED = frozenset({
    "PATH",             # finding programs, as any process does
    "PYTHONPATH",       # where moonbox and its libraries are imported from
    "PYTHONHOME",       # an interpreter installed outside its default prefix
    "PYTHONHASHSEED",   # the same hashing as the host (reproducible runs)
    "PYTHONUTF8",       # text encoding of the interpreter
    "PYTHONIOENCODING",
    SPIN_ENV,           # both sides busy-wait alike
    WIRE_ENV,           # both sides wait and read alike (compiled, or in Python)
    "PYTHONDONTWRITEBYTECODE",
    "LD_LIBRARY_PATH",  # an interpreter or LuaJIT linked against libraries off the default path
    "LANG",             # locale (also every LC_* variable, below)
    "LANGUAGE",
    "TZ",
})
_ENV_ALLOWED_PREFIXES = ("LC_",)
# The directory the worker runs in: none of the host's (a relative path a mod reaches
# through some bug resolves against the root, not the game's folder).
_WORKER_CWD = "/"


def worker_environment(test_hooks: bool) -> dict[str, str]:
    """The environment a worker starts with: the allowlisted variables of the host's, the
    directory moonbox is imported from first on ``PYTHONPATH`` (the worker runs in ``/``),
    and the test-hook switch only when asked."""
    env = {k: v for k, v in os.environ.items()
           if k in _ENV_ALLOWED or k.startswith(_ENV_ALLOWED_PREFIXES)}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    if test_hooks:
        env[TEST_HOOKS_ENV] = "1"
    return env


def _boot_settings(test_hooks: bool) -> tuple[str, str, dict[str, str]]:
    """What a worker starts with, as things are now: the interpreter, the boot script and
    the environment."""
    return sys.executable, _BOOT, worker_environment(test_hooks)


class _Boot:
    """A worker process started and not adopted yet: its ready frame is still unread. Killed
    and reaped when dropped (or by :meth:`discard`) unless a worker adopts it.

    Attributes:
        settings: what it was started with (see :func:`_boot_settings`).
    """

    __slots__ = ("proc", "pipes", "settings", "finalizer", "__weakref__")

    def __init__(self, memory_limit_bytes: int, test_hooks: bool) -> None:
        self.settings = executable, boot, env = _boot_settings(test_hooks)
        to_worker_r, to_worker_w = os.pipe()
        try:
            from_worker_r, from_worker_w = os.pipe()
        except BaseException:
            _close_fds(to_worker_r, to_worker_w)
            raise
        pipes = _Pipes(to_worker_w, from_worker_r)
        try:
            # The host's ends never block: every read and write waits under the watchdog.
            os.set_blocking(to_worker_w, False)
            os.set_blocking(from_worker_r, False)
            proc = subprocess.Popen(
                [executable, "-c", boot, str(to_worker_r), str(from_worker_w),
                 str(memory_limit_bytes)],
                stdin=subprocess.DEVNULL,
                pass_fds=(to_worker_r, from_worker_w),
                env=env,
                cwd=_WORKER_CWD,
                close_fds=True,
            )
        except BaseException:
            pipes.close()
            raise
        finally:
            _close_fds(to_worker_r, from_worker_w)
        self.proc = proc
        self.pipes = pipes
        self.finalizer = weakref.finalize(self, _finalize, proc, pipes)

    def discard(self) -> None:
        self.finalizer()


class SpareWorkers:
    """Worker processes started ahead of need. A worker takes one when it starts or is
    replaced, and another starts booting in its place: the call that needs a fresh worker
    finds one that has (usually) finished its imports, instead of waiting ~0.4 s for a
    process to start, and a game's tick does not stall on it. Nothing starts before the
    first :meth:`take`.

    A spare is not adopted when it died waiting, or when what a worker starts with changed
    since it booted (the interpreter, the boot script, the environment): it is replaced.
    After :data:`MAX_BOOT_FAILURES` spares in a row that could not take over, no more are
    booted ahead (each worker then starts when needed) until one takes over again.

    Args:
        count: how many to keep booted (0: none; every worker then starts when needed).
        memory_limit_bytes, test_hooks: as :class:`WorkerProcess`; the same for all.
    """

    MAX_BOOT_FAILURES = 3

    def __init__(self, count: int, *, memory_limit_bytes: int, test_hooks: bool = False) -> None:
        self.count = count
        self.memory_limit_bytes = memory_limit_bytes
        self.test_hooks = test_hooks
        self._spares: list[_Boot] = []
        self._lock = threading.Lock()
        self._closed = False
        self._failures = 0  # spares in a row that could not take over

    def take(self) -> _Boot | None:
        """A booted spare for a worker to adopt (``None`` when there is none fit to), and
        the spares topped up: a failure to start another is logged, never raised.

        Raises:
            SandboxClosed: closed.
        """
        with self._lock:
            if self._closed:
                raise SandboxClosed("the spare workers are closed (their pool was closed)")
            boot = self._spares.pop(0) if self._spares else None
        if boot is not None and (boot.proc.poll() is not None
                                 or boot.settings != _boot_settings(self.test_hooks)):
            boot.discard()  # died waiting (killed from outside), or booted as things were
            boot = None
        self._fill()
        return boot

    def failed(self) -> None:
        """A spare from :meth:`take` could not take over (it never said ready)."""
        with self._lock:
            self._failures += 1

    def succeeded(self) -> None:
        """A spare from :meth:`take` took over."""
        with self._lock:
            self._failures = 0

    def _fill(self) -> None:
        with self._lock:
            # Spares that died waiting are reaped now (no zombie waits for the next take).
            for boot in [b for b in self._spares if b.proc.poll() is not None]:
                self._spares.remove(boot)
                boot.discard()
            while (not self._closed and len(self._spares) < self.count
                   and self._failures < self.MAX_BOOT_FAILURES):
                try:
                    self._spares.append(_Boot(self.memory_limit_bytes, self.test_hooks))
                except OSError as exc:  # out of processes, descriptors or memory
                    log.warning("a spare worker could not be started: %s", exc)
                    break

    @property
    def pids(self) -> tuple[int, ...]:
        """The spares' process ids."""
        with self._lock:
            return tuple(b.proc.pid for b in self._spares)

    def close(self) -> None:
        """Kill and reap every spare; later takes are refused. Idempotent."""
        with self._lock:
            self._closed = True
            spares, self._spares = self._spares, []
        for boot in spares:
            boot.discard()


class WorkerProcess:
    """A worker process and the two pipes to it; replaced whole when it is lost.

    Requests are serialized by a re-entrant lock: a host function serving one mod's call may
    run another mod of the same worker (the worker answers nested requests in order).

    A lost worker is reaped at once and stays down until :meth:`revive` starts a fresh one
    (a new :attr:`generation`): runs and sandboxes of the old one are gone.

    Args:
        memory_limit_bytes: the worker's address-space limit (0: none).
        startup_timeout_s: how long a new worker may take to say it is ready.
        test_hooks: give the worker's sandboxes the test-only functions (tests only).
        spares: where a fresh worker comes from (a pool's, already booted); ``None``:
            each is started when needed. Its memory limit and hooks are the worker's then.
    """

    def __init__(self, *, memory_limit_bytes: int, startup_timeout_s: float = 30.0,
                 test_hooks: bool = False, spares: SpareWorkers | None = None) -> None:
        if spares is not None:
            memory_limit_bytes, test_hooks = spares.memory_limit_bytes, spares.test_hooks
        self.memory_limit_bytes = memory_limit_bytes
        self.startup_timeout_s = startup_timeout_s
        self.test_hooks = test_hooks
        self._spares = spares
        self.lock = threading.RLock()
        self.generation = 0
        self.respawns = 0
        self.mods: list[str] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._psutil: psutil.Process | None = None
        self._cpu_seen: tuple[float, float] | None = None
        self._closed = False
        self._abandoned = False
        self._down = True
        self._spawn()

    # -- lifecycle -----------------------------------------------------------------------

    def _spawn(self) -> None:
        spares = self._spares
        if spares is not None:
            boot = spares.take()
            if boot is not None:
                try:
                    self._adopt(boot)
                except HostError as exc:  # a spare that died before it said ready
                    spares.failed()
                    log.warning("a spare worker could not take over (%s); starting another",
                                exc)
                else:
                    spares.succeeded()
                    return
        self._adopt(_Boot(self.memory_limit_bytes, self.test_hooks))
        if spares is not None:
            spares.succeeded()  # workers start again: spares are booted ahead again

    def _adopt(self, boot: _Boot) -> None:
        """Make ``boot`` this worker's process and wait for its ready frame.

        Raises:
            HostError: it did not become ready in time, or sent something else first.
            SandboxClosed: this worker was closed meanwhile (by another thread): the
                process is reaped, not kept.
        """
        proc, pipes = boot.proc, boot.pipes
        self._proc = proc
        self._pipes = pipes
        self._reader = FrameReader(pipes.read_fd, functions=True, spin_s=spin_window(),
                                   peer_pid=proc.pid)
        self._writer = FrameWriter(pipes.write_fd)
        self._killed_for: LossCause | None = None
        self._abandoned = False
        self._down = False
        self._cpu_seen = None
        self._finalizer = weakref.finalize(self, _finalize, proc, pipes)
        boot.finalizer.detach()  # the worker's own finalizer above took over
        self.generation += 1
        try:
            ready = self.receive(time.monotonic() + self.startup_timeout_s)
        except WorkerLost as lost:
            raise HostError(f"a worker process could not start: {lost.detail}") from None
        if ready[0] != "ready":
            self._reap()
            self._down = True
            raise HostError(f"a worker process sent {ready[0]!r} instead of ready")
        if self._closed:  # closed while it started: close() found nothing to stop yet
            self._reap()
            self._down = True
            raise SandboxClosed("the worker is closed (its pool or sandbox was closed)")
        self._psutil = psutil.Process(proc.pid)
        try:  # its CPU share counts from now, not from a spare's idle wait
            cpu = self._psutil.cpu_times()
            self._cpu_seen = (time.time(), cpu.user + cpu.system)
        except psutil.Error:
            self._cpu_seen = None

    def respawn(self) -> None:
        """Reap the worker (if it still runs) and start a fresh one (a new generation).

        Raises:
            SandboxClosed: this worker was closed (its pool or sandbox closed).
            HostError: the fresh worker could not start.
        """
        self._check_open()
        self._reap()
        self._down = True
        self.respawns += 1
        self._spawn()

    def revive(self) -> bool:
        """Start a fresh worker if the last one was lost or stopped mid-request; whether
        one was started.

        Raises:
            SandboxClosed: this worker was closed.
            HostError: the fresh worker could not start.
        """
        self._check_open()
        if self._down or self._abandoned:
            self.respawn()
            return True
        return False

    def _abandon(self) -> None:
        """Stop a worker whose request the host gave up on: its answer (and every frame
        after it) would otherwise reach whatever request came next. Its mods lose their
        generation and are rebuilt from their snapshots in the fresh worker."""
        self._abandoned = True
        self._down = True
        self.generation += 1  # runs and mods of the stopped worker no longer match it
        self._reap()

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxClosed("the worker is closed (its pool or sandbox was closed)")

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def down(self) -> bool:
        """The worker was lost (or stopped) and no fresh one runs yet."""
        return self._down

    @property
    def _write_fd(self) -> int:
        return self._pipes.write_fd  # -1 once closed

    @property
    def _read_fd(self) -> int:
        return self._pipes.read_fd  # -1 once closed

    def _reap(self) -> None:
        self._finalizer()  # closes the pipes, kills and waits: no zombie

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and not self._down and proc.poll() is None else None

    @property
    def alive(self) -> bool:
        return not self._closed and self.pid is not None

    def close(self, timeout_s: float = 2.0) -> None:
        """Ask the worker to exit (end of its input), kill it after ``timeout_s``; reap it.

        The end of the pipe it answers on is closed only once no request is reading it:
        the worker is dead by then, so a request in flight on another thread meets the end
        of the pipe and lets go (a descriptor closed under a reader could be reused by a
        file opened meanwhile, which the reader would then read from). Only a host function
        holding the worker for more than :data:`_CLOSE_WAIT_S` is not waited for.
        """
        if self._closed:
            return
        self._closed = True
        proc = self._proc
        self._pipes.close_write()
        if proc is not None and not self._down:
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
            _kill(proc)
        if self.lock.acquire(timeout=_CLOSE_WAIT_S):
            try:
                self._reap()
            finally:
                self.lock.release()
        else:
            log.warning("worker %s closed while a request still held it",
                        None if proc is None else proc.pid)
            self._reap()
        self._down = True

    # -- frames --------------------------------------------------------------------------

    def _failure(self, exc: Exception) -> WorkerLost:
        """What a failed read or write of a frame means: a deadline that passed (the worker
        is killed for time), a frame that is none (killed for breaking the protocol), or
        a worker that is gone."""
        if isinstance(exc, FrameTimeout):
            return self._lost("time")
        if isinstance(exc, FrameCorrupt):
            return self.violation(str(exc))
        return self._lost("crashed")

    def receive(self, deadline: float | None) -> list[Any]:
        """The next message, all of it read by ``deadline`` (monotonic seconds): what a
        worker sends first (see :meth:`exchange_locked`, which this is without a request).

        Raises:
            WorkerLost: the worker died, sent what is not a message, or did not answer in
                time (it is killed then).
        """
        return self.exchange_locked(None, self.generation, deadline, None, None)

    def request(self, value: Any, deadline: float | None,
                serve: Callable[[list[Any]], list[Any]] | None = None,
                watch: Any = None, notes: list[Any] | None = None) -> list[Any]:
        """Send a request and return its answer, serving ``call`` frames on the way.

        ``serve`` answers a ``call`` frame (a host function). ``watch``, if given, holds the
        deadline instead of ``deadline``: its ``deadline`` attribute is read before every
        wait, ``tick()`` is called when the worker reports the start of another resume (a
        ``tick`` frame; one it answers false, or any without a watch, is a protocol
        violation) and ``served(begun)`` after each call the host answered, with the monotonic
        time the host began serving it; no call is served once its ``overdue`` is true. ``notes`` are
        frames the worker takes without answering, sent in the same write before the
        request.

        Any other exception on the way (a ``KeyboardInterrupt``, a ``BaseException`` from a
        host function, a signal handler's timeout) abandons the request: the worker is killed,
        since its answer would reach the next request, and it is re-raised; the next request
        needs :meth:`revive` first, which starts a fresh worker.

        Raises:
            SandboxClosed: this worker was closed.
            WorkerLost: see :meth:`receive`; also when the worker was lost while the host
                served one of its calls (a nested request to the same worker lost it), or
                is down.
            TypeError: the request is not plain data (nothing was sent).
        """
        with self.lock:
            return self.request_locked(value, deadline, serve, watch, notes)

    def request_locked(self, value: Any, deadline: float | None,
                       serve: Callable[[list[Any]], list[Any]] | None = None,
                       watch: Any = None, notes: list[Any] | None = None) -> list[Any]:
        """:meth:`request`, by a caller that holds :attr:`lock` already."""
        self._check_open()
        if self._down:
            raise WorkerLost("crashed", "the worker is down (revive it first)")
        return self.exchange_locked(self.pack(value, notes), self.generation, deadline,
                                    serve, watch)

    def pack(self, value: Any, notes: list[Any] | None = None) -> bytes:
        """A request as the frames to write: ``notes`` first (see :meth:`request`).

        Raises:
            TypeError, ValueError, OverflowError: what is not plain data msgpack can carry.
        """
        frame = self._writer.frame
        data = frame(value)
        if notes:  # (map, not a generator: a closure would cost every call a cell)
            data = b"".join([*map(frame, notes), data])
        return data

    def exchange_locked(self, data: bytes | None, generation: int, deadline: float | None,
                        serve: Callable[[list[Any]], list[Any]] | None,
                        watch: Any) -> list[Any]:
        """Write a packed request (``None``: none, only read) and return the worker's
        answer, serving its ``call`` and ``tick`` frames on the way (see :meth:`request` for
        ``deadline``, ``serve``, ``watch`` and what abandons the request). The caller holds
        :attr:`lock` and made sure the worker of ``generation`` is up.

        Raises:
            SandboxClosed: the worker was closed while the host served one of its calls.
            WorkerLost: see :meth:`request`.
        """
        writer, pipes, reader = self._writer, self._pipes, self._reader
        try:
            while True:
                due = deadline if watch is None else watch.deadline
                try:
                    if pipes.read_fd < 0 or (data is not None and pipes.write_fd < 0):
                        raise FrameError("the pipe is closed")
                    reply = reader.exchange(writer, data, due)
                except (FrameError, FrameTimeout, OSError) as exc:
                    raise self._failure(exc) from None
                if type(reply) is not list or not reply or type(reply[0]) is not str:
                    raise self.violation(f"a frame that is no message: {str(reply)[:80]}")
                kind = reply[0]
                if kind == "call":
                    if len(reply) != 3 or type(reply[1]) is not str \
                            or type(reply[2]) is not list:
                        raise self.violation(f"a malformed call: {str(reply)[:80]}")
                    # A worker past its deadline gets no more calls served: one that only
                    # ever sends calls would otherwise never be waited on, and never meet
                    # the watchdog. Nor does one whose last call was answered past its
                    # time (the watch says overdue): the host's time in serving calls does
                    # not count against the deadline.
                    begun = time.monotonic()
                    if (due is not None and begun > due) or (
                            watch is not None and watch.overdue):
                        raise self._lost("time")
                    answer = (["err", "no host functions are served here", "failed"]
                              if serve is None else serve(reply))
                    if self.generation != generation:
                        raise WorkerLost("crashed", "the worker was lost while the host "
                                         "served one of its calls")
                    self._check_open()  # closed by the host function (its sandbox or pool)
                    try:
                        data = writer.frame(answer)
                    except (TypeError, ValueError, OverflowError):
                        log.exception("a host function returned what cannot cross")
                        data = writer.frame(["err", _HOST_BUG, "failed"])
                    if watch is not None:
                        watch.served(begun)
                elif kind == "tick":
                    # Only a run of several resumes sends these, one as each resume after
                    # the first begins; any other would reset the watchdog without limit.
                    if watch is None or not watch.tick():
                        raise self.violation("a tick frame the request does not allow")
                    data = None
                else:
                    return reply
        except (WorkerLost, SandboxClosed):
            raise
        except BaseException:
            # Anything else (an interrupt, a host function's BaseException, a signal
            # handler's timeout) abandons the request: its answer would reach the next one.
            self._abandon_request()
            raise

    def _abandon_request(self) -> None:
        """The host gave up on the request in flight (an exception other than the worker's
        loss): the worker is stopped, since its answer would reach the next request."""
        if not self._down and self._proc is not None:
            log.warning("worker %d stopped: the host abandoned its request", self._proc.pid)
            self._abandon()

    def violation(self, detail: str) -> WorkerLost:
        """The worker broke the protocol (what it sent is no frame, or no answer the host
        can read): it is killed and reaped, as a crash. A worker that runs the mods' code
        as written never does this; one that a VM bug took over might."""
        proc = self._proc
        if proc is not None and not self._down:
            log.warning("worker %d broke the protocol: %s", proc.pid, detail)
            _kill(proc)
            self._reap()
            self._down = True
            self.generation += 1
        return WorkerLost("crashed", f"the worker broke the protocol ({detail}) and was killed",
                          signal="SIGKILL")

    def _lost(self, cause: LossCause) -> WorkerLost:
        """Classify the loss of the worker, after making sure it is dead and reaped."""
        proc = self._proc
        assert proc is not None
        if self._down and not self._abandoned:
            return WorkerLost("crashed", "the worker is down")
        if cause == "time" and proc.poll() is None:
            self._killed_for = "time"
            proc.send_signal(signal.SIGKILL)
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            _kill(proc)
            code = proc.returncode
        self._reap()
        if not self._down:
            self._down = True
            self.generation += 1
        if self._abandoned:
            return WorkerLost("crashed", "the worker was stopped: the host abandoned a request",
                              signal="SIGKILL")
        if self._killed_for == "time":
            return WorkerLost("time", "the worker overran its wall budget and was killed",
                              signal="SIGKILL")
        if code == EXIT_OUT_OF_MEMORY:
            return WorkerLost("memory", "the worker ran out of its memory limit",
                              exit_code=code)
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:  # a signal with no name of its own (a real-time one)
                name = f"SIG{-code}"
            if -code == signal.SIGKILL:
                # Nobody here sent it: the usual sender is the kernel's out-of-memory killer.
                return WorkerLost("memory", "the worker was killed by the OS (SIGKILL)",
                                  signal=name)
            return WorkerLost("crashed", f"the worker crashed ({name})", signal=name)
        return WorkerLost("crashed", f"the worker exited unexpectedly (status {code})",
                          exit_code=code)

    # -- accounting ----------------------------------------------------------------------

    def stats(self) -> WorkerStats:
        """Memory and CPU of the worker now (zeros when it is not running). The CPU share is
        taken over the time since an earlier reading at least a second old (since the
        worker started, at first)."""
        rss = vms = 0
        user = system = share = 0.0
        pid = self.pid
        if pid is not None and self._psutil is not None:
            try:
                with self._psutil.oneshot():
                    mem = self._psutil.memory_info()
                    cpu = self._psutil.cpu_times()
                    started = self._psutil.create_time()
                rss, vms, user, system = mem.rss, mem.vms, cpu.user, cpu.system
                now = time.time()
                seen_at, seen_cpu = self._cpu_seen or (started, 0.0)
                if now > seen_at:
                    share = max(0.0, (user + system - seen_cpu) / (now - seen_at) * 100)
                if now - seen_at >= _CPU_WINDOW_S:  # readings close together share a window
                    self._cpu_seen = (now, user + system)
            except psutil.Error:
                pid = None
        return WorkerStats(pid, rss, vms, user, system, self.memory_limit_bytes,
                           self.respawns, tuple(self.mods), round(share, 1))
