"""Frames between the host and a worker: a 4-byte length, then one msgpack value.

Both sides speak through two pipes. The host sends requests (a list whose first item is
the operation's name); while it serves one, the worker may send ``call`` frames (a host
function it wants run) and the host answers each before the worker goes on. Outcomes and
errors cross as plain lists and dicts, rebuilt into the sandbox's own types on the host.

A function of a mod, passed to a host function that takes functions, crosses as a
reference (msgpack extension :data:`FUNCTION_EXT`): the function stays in the worker.

Each frame is one ``write`` and, when it is no larger than a read, one ``read``: a
frame is packed whole (length and body) before it is written, and a reader takes what the
pipe holds in one system call, keeping bytes past the frame for the next one.
"""

from __future__ import annotations

import math
import os
import resource
import select
import struct
import threading
import time
from typing import Any, NamedTuple, get_args

import msgpack

from .._errors import BudgetExceeded, BudgetKind, ErrorKind, Frame, ScriptError
from ..sandbox import Outcome

__all__ = [
    "EXIT_OUT_OF_MEMORY",
    "FUNCTION_EXT",
    "FrameCorrupt",
    "FrameError",
    "FrameReader",
    "FrameTimeout",
    "FrameWriter",
    "FunctionRef",
    "WIRE_ENV",
    "compiled_wire",
    "decode_error",
    "encode_error",
    "encode_result",
    "pack",
    "write_frame",
]

# The worker's exit status when the OS refused it memory (its address-space limit).
EXIT_OUT_OF_MEMORY = 86
# Larger frames are refused: a result this big is a fault of the mod or of the protocol.
MAX_FRAME_BYTES = 256 << 20
# The msgpack extension code of a function reference (worker to host only).
FUNCTION_EXT = 1

# The environment variable that sets how long a reader busy-waits for a frame before it
# sleeps, in microseconds (0: never). The worker inherits it (see _process).
SPIN_ENV = "MOONBOX_ISOLATION_SPIN_US"
DEFAULT_SPIN_US = 100.0
MAX_SPIN_US = 10_000.0

# Busy-waiting pays only when the other side has a CPU of its own. Each interval, a
# reader that busy-waits asks whether the CPUs were contended, in two ways, either of which
# makes it sleep at once until several intervals in a row were calm:
# - the share of the time this thread, or the other side's process, was ready to run but
#   waited for a CPU (Linux's schedstat): at most 0.2% on an otherwise idle machine here,
#   15-45% with one more busy process;
# - how often the scheduler preempted this thread: a few times a second on an otherwise
#   idle machine here, hundreds to thousands with one more busy process.
# Calm intervals are needed in a row because a contended machine has calm moments: without
# busy-waiting, the wait share drops, and busy-waiting again at once would make it climb.
_RUNQUEUE_SHARE = 0.03
_PREEMPTIONS_PER_S = 1000.0
_CONTENTION_CHECK_S = 0.05
_CALM_INTERVALS = 4
_MAX_THREADS = 16  # threads whose last sample a reader keeps
_RUSAGE_WHO = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)
_OWN_SCHEDSTAT = "/proc/thread-self/schedstat"


def _runqueue_wait_ns(path: str) -> int | None:
    """The nanoseconds the thread (or process) at ``path`` waited for a CPU so far (the
    second field of a schedstat file), ``None`` where there is no such file."""
    try:
        with open(path, "rb") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None

_HEADER = struct.Struct("<I")
_READ_BYTES = 1 << 16
_read, _monotonic, _unpackb = os.read, time.monotonic, msgpack.unpackb

# The compiled round trip (see _wire.c), unless it was not built or WIRE_ENV says "python".
WIRE_ENV = "MOONBOX_ISOLATION_WIRE"
_exchange: Any = None
if os.environ.get(WIRE_ENV) != "python":
    try:
        from ._wire import exchange as _exchange
    except ImportError:  # no C compiler where moonbox was installed: the steps in Python
        pass


def compiled_wire() -> bool:
    """Whether the round trip's wait and system calls run compiled (see ``_wire.c``), not
    in Python."""
    return _exchange is not None


def spin_window() -> float:
    """How long a reader busy-waits for the other side's next frame before it sleeps, in
    seconds: :data:`SPIN_ENV` if set (clamped to 0..10 ms; one that is not a number is
    ignored), otherwise 100 µs when this process may run on two CPUs or more, and 0 on one
    (where the other side could only run once this one stops waiting)."""
    raw = os.environ.get(SPIN_ENV)
    if raw is not None:
        try:
            us = float(raw)
        except ValueError:
            us = math.nan
        if not math.isnan(us):
            return min(max(us, 0.0), MAX_SPIN_US) / 1e6
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity on this platform
        cpus = os.cpu_count() or 1
    return DEFAULT_SPIN_US / 1e6 if cpus >= 2 else 0.0


class FrameError(Exception):
    """The other side closed the pipe, or sent something that is not a frame."""


class FrameCorrupt(FrameError):
    """The other side sent something that is not a frame (it may still be running)."""


class FrameTimeout(Exception):
    """The deadline passed before a whole frame could be read or written."""


class FunctionRef(NamedTuple):
    """A mod's function as the worker names it: its key in the worker's sandbox and where
    it was defined. The host turns it into a handle (see ``_sandbox.RemoteFunction``)."""

    key: int
    chunk: str
    line: int


def function_ext(key: int, chunk: str, line: int) -> msgpack.ExtType:
    """The extension value the worker sends for one of the mod's functions."""
    return msgpack.ExtType(FUNCTION_EXT, msgpack.packb([key, chunk, line], use_bin_type=True))


def _ext_hook(code: int, data: bytes) -> FunctionRef:
    if code != FUNCTION_EXT:
        raise ValueError(f"unknown msgpack extension {code}")
    key, chunk, line = msgpack.unpackb(data, raw=False)
    if type(key) is not int or type(chunk) is not str or type(line) is not int:
        raise ValueError("a malformed function reference")
    return FunctionRef(key, chunk, line)


def pack(value: Any) -> bytes:
    """One frame: length and msgpack body (a fresh packer: safe from any thread)."""
    body = msgpack.packb(value, use_bin_type=True)
    return _HEADER.pack(len(body)) + body


# poll's longest timeout (a C int of milliseconds, 24 days): a later deadline takes several.
_MAX_POLL_MS = 2**31 - 1


def _timeout_ms(deadline: float | None) -> int | None:
    """poll's timeout for ``deadline`` (monotonic seconds; ``None``: none). A deadline
    already past still takes what is ready."""
    if deadline is None:
        return None
    left_ms = (deadline - _monotonic()) * 1000
    if left_ms <= 0:
        return 0
    return _MAX_POLL_MS if left_ms >= _MAX_POLL_MS else int(left_ms) + 1


def _poll_until(poll: Any, deadline: float | None) -> bool:
    """Whether ``poll`` (a poll object's method) found the descriptor ready by
    ``deadline``: a deadline past poll's longest timeout takes several polls."""
    while not poll(_timeout_ms(deadline)):
        if deadline is None or _monotonic() >= deadline:
            return False
    return True


class _Poller:
    """One poll object for one descriptor, registered once."""

    __slots__ = ("_poll",)

    def __init__(self, fd: int, events: int) -> None:
        self._poll = select.poll()
        self._poll.register(fd, events)

    def wait(self, deadline: float | None) -> None:
        """Wait until the descriptor is ready, at most until ``deadline`` (monotonic
        seconds; ``None``: no limit). A deadline already past still takes what is ready.

        Raises:
            FrameTimeout: the deadline passed first.
        """
        if not _poll_until(self._poll.poll, deadline):
            raise FrameTimeout("the deadline passed in the middle of a frame")


class FrameWriter:
    """Writes frames to one pipe, each packed whole and written in one system call when
    the pipe has room. The packer is reused: a writer belongs to one thread at a time.

    Args:
        fd: the pipe's write end. Non-blocking if the writes must keep deadlines (the host's
            side); blocking otherwise (the worker's side).
    """

    __slots__ = ("fd", "_packer", "_poller")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._packer = msgpack.Packer(use_bin_type=True)
        self._poller: _Poller | None = None

    def frame(self, value: Any) -> bytes:
        """``value`` packed as a frame.

        Raises:
            TypeError, ValueError, OverflowError: the value is not plain data msgpack can carry.
        """
        body = self._packer.pack(value)
        return _HEADER.pack(len(body)) + body

    def send(self, value: Any, deadline: float | None = None) -> None:
        """Pack and write one frame (see :meth:`write`)."""
        self.write(self.frame(value), deadline)

    def write(self, data: bytes, deadline: float | None = None) -> None:
        """Write packed frames, whole. When the pipe is full, wait for room at most until
        ``deadline`` (monotonic seconds; ``None``: as long as it takes).

        Raises:
            FrameError: the reader is gone.
            FrameTimeout: the deadline passed before everything was written.
        """
        fd = self.fd
        try:
            written = os.write(fd, data)
        except BlockingIOError:
            written = 0
        except OSError as exc:
            raise FrameError(f"the pipe closed: {exc}") from None
        if written == len(data):
            return
        view = memoryview(data)[written:]
        if self._poller is None:
            self._poller = _Poller(fd, select.POLLOUT)
        while view:
            self._poller.wait(deadline)
            try:
                written = os.write(fd, view)
            except BlockingIOError:
                continue
            except OSError as exc:
                raise FrameError(f"the pipe closed: {exc}") from None
            view = view[written:]


def write_frame(fd: int, value: Any, deadline: float | None = None) -> None:
    """Write one frame to ``fd`` (a fresh writer; see :class:`FrameWriter`)."""
    FrameWriter(fd).send(value, deadline)


class FrameReader:
    """Reads frames from one pipe, a large read at a time: a frame usually arrives whole in
    one system call, and bytes past it wait in the buffer for the next frame.

    A reader may busy-wait for a frame before it sleeps in ``poll``: host and worker answer
    each other within tens of microseconds, and waking a process that slept costs about as
    much again (the scheduler, and on a virtual machine the idle CPU's wake-up). It does so
    only while frames keep coming within the window: a wait that outlasts it ends the
    busy-waiting, and the next wait that ends within it starts it again, so a side that
    waits long (an idle worker, a slow handler) spends at most one window of CPU on it.

    Args:
        fd: the pipe's read end: non-blocking when reads keep deadlines (the host's side)
            or when the reader busy-waits.
        functions: accept function references (the host reading a worker).
        spin_s: the busy-wait window in seconds (0: sleep at once); see
            :func:`spin_window`. Needs a non-blocking ``fd``, unless ``sets_blocking``.
        sets_blocking: the reader sets ``fd`` non-blocking itself while it may busy-wait,
            and blocking while the CPUs are contended, when a plain read is the cheapest
            sleep (a reader that keeps no deadlines: the worker's side).
        peer_pid: the other side's process, whose waits for a CPU count as contention too
            (the host reading a worker).
    """

    __slots__ = ("fd", "_buffer", "_poller", "_ext", "_window", "_hot", "contended",
                 "_next_check", "_samples", "_sets_blocking", "_nonblocking", "_peer",
                 "_calm")

    def __init__(self, fd: int, *, functions: bool = False, spin_s: float = 0.0,
                 sets_blocking: bool = False, peer_pid: int | None = None) -> None:
        self.fd = fd
        # Whose waits for a CPU count besides this thread's: the other side's process.
        self._peer = None if peer_pid is None else f"/proc/{peer_pid}/schedstat"
        self._buffer = b""
        self._poller = _Poller(fd, select.POLLIN)
        self._ext = _ext_hook if functions else None
        self._window = spin_s
        self._hot = spin_s > 0
        self._sets_blocking = sets_blocking
        if sets_blocking:
            os.set_blocking(fd, not spin_s)
        self._nonblocking = not os.get_blocking(fd)
        # Whether the CPUs were contended lately (see _RUNQUEUE_SHARE).
        self.contended = False
        # Per thread: when it last checked, its preemptions and waits for a CPU then.
        self._samples: dict[int, tuple[float, int, tuple[int, ...] | None]] = {}
        now = _monotonic()
        self._next_check = now + _CONTENTION_CHECK_S  # a whole interval first
        if spin_s > 0:
            self._samples[threading.get_ident()] = (
                now, resource.getrusage(_RUSAGE_WHO).ru_nivcsw, self._waits())
        self._calm = _CALM_INTERVALS  # calm intervals in a row: busy-waiting from the start

    def pending(self) -> bool:
        """A whole frame is already buffered (no need to wait for the pipe)."""
        buf = self._buffer
        return len(buf) >= 4 and len(buf) - 4 >= _HEADER.unpack_from(buf)[0]

    def _waits(self) -> tuple[int, ...] | None:
        """The nanoseconds this thread, and the peer, waited for a CPU so far (``None``
        where the platform does not say)."""
        own = _runqueue_wait_ns(_OWN_SCHEDSTAT)
        if own is None:
            return None
        peer = None if self._peer is None else _runqueue_wait_ns(self._peer)
        return (own,) if peer is None else (own, peer)

    def _check_contention(self, now: float) -> None:
        """Whether the CPUs were contended since the last check (see _RUNQUEUE_SHARE): then
        the reader sleeps at once until :data:`_CALM_INTERVALS` in a row were calm."""
        self._next_check = now + _CONTENTION_CHECK_S
        preemptions = resource.getrusage(_RUSAGE_WHO).ru_nivcsw
        waits = self._waits()
        # The figures are the calling thread's, and a host reader may be used from several
        # threads in turn: each is compared with the same thread's last sample.
        thread = threading.get_ident()
        last = self._samples.get(thread)
        if last is None and len(self._samples) >= _MAX_THREADS:
            self._samples.clear()
        self._samples[thread] = (now, preemptions, waits)
        if last is None:
            return  # a first sample: the baseline, no verdict
        then, preempted, waited_before = last
        elapsed = max(now - then, 1e-6)
        busy = preemptions - preempted > _PREEMPTIONS_PER_S * elapsed
        if (not busy and waits is not None and waited_before is not None
                and len(waits) == len(waited_before)):
            waited = max(a - b for a, b in zip(waits, waited_before, strict=True))
            busy = waited > _RUNQUEUE_SHARE * elapsed * 1e9
        self._calm = 0 if busy else self._calm + 1
        contended = self._calm < _CALM_INTERVALS
        if contended != self.contended:
            self.contended = contended
            if self._sets_blocking:
                os.set_blocking(self.fd, contended)
                self._nonblocking = not contended

    def _spin(self, began: float, deadline: float | None) -> bytes:
        """Busy-wait for data until the window (or the deadline) ends: what one read took,
        or nothing when nothing came (or the pipe ended: the caller's own wait and read
        meet the end again and say so). It asks ``poll`` without waiting: a failed read
        would cost an exception each time round."""
        end = began + self._window
        if deadline is not None and deadline < end:
            end = deadline
        ready = self._poller._poll.poll
        while not ready(0):
            if _monotonic() >= end:
                return b""
        try:
            return _read(self.fd, _READ_BYTES)
        except OSError:  # BlockingIOError included: the caller's own read meets it again
            return b""

    def _read_some(self, size: int, deadline: float | None) -> bytes:
        fd = self.fd
        while True:
            if deadline is not None:
                self._poller.wait(deadline)
            try:
                chunk = os.read(fd, size)
            except BlockingIOError:
                if deadline is None:  # a non-blocking pipe read without a deadline
                    self._poller.wait(None)
                continue
            if not chunk:
                raise FrameError("the pipe closed")
            return chunk

    def read(self, deadline: float | None = None) -> Any:
        """The next frame, all of it read by ``deadline`` (monotonic seconds; ``None``: wait
        as long as it takes).

        Raises:
            FrameError: end of file, a frame past the size limit, or one that does not
                decode.
            FrameTimeout: the deadline passed before the whole frame arrived (what was read
                stays buffered).
            OSError: reading the pipe failed.
        """
        buf = self._buffer
        if buf:
            self._buffer = b""  # _take keeps what is past the frame
        else:
            # The usual frame: the pipe holds it whole, and nothing after it. One wait and
            # one read, written out (this runs twice per round trip).
            window = self._window
            if window:
                began = _monotonic()
                if began >= self._next_check:
                    self._check_contention(began)
                    began = _monotonic()  # the check is not part of the wait
                if self._hot and not self.contended:
                    buf = self._spin(began, deadline)
            if not buf:
                if deadline is not None or self._nonblocking:  # wait, then read
                    if not _poll_until(self._poller._poll.poll, deadline):
                        raise FrameTimeout("the deadline passed in the middle of a frame")
                try:
                    buf = _read(self.fd, _READ_BYTES)
                except BlockingIOError:
                    buf = self._read_some(_READ_BYTES, deadline)
                if window:
                    self._hot = _monotonic() - began <= window
        return self._take(buf, deadline)

    def exchange(self, writer: FrameWriter, data: bytes | None,
                 deadline: float | None = None) -> Any:
        """Write packed frames with ``writer`` (``None``: nothing), then :meth:`read` the
        next frame, all by ``deadline``: one side's half of a round trip. The wait and the
        two system calls run out of the interpreter where the compiled module is built.

        Raises:
            FrameError: the other side is gone (its end of a pipe closed, or writing or
                reading failed), or what :meth:`read` raises for a frame.
            FrameTimeout: the deadline passed before the request was written or the whole
                answer arrived.
        """
        try:
            if self._buffer or _exchange is None:
                if data is not None:
                    writer.write(data, deadline)
                return self.read(deadline)
            window = self._window
            spin = 0.0
            now = _monotonic()
            if window:
                if now >= self._next_check:
                    self._check_contention(now)
                if self._hot and not self.contended:
                    spin = window
            # The time left, not the deadline: the compiled wait keeps its own clock.
            got = _exchange(writer.fd, data, self.fd, spin, window,
                            None if deadline is None else deadline - now)
            if got is None:
                raise FrameTimeout("the deadline passed before the answer arrived")
            buf, whole, self._hot = got
            return self._decode(buf) if whole else self._take(buf, deadline)
        except OSError as exc:
            raise FrameError(f"the pipe failed: {exc}") from None

    def _take(self, buf: bytes, deadline: float | None) -> Any:
        """The next frame, from ``buf`` (what the last read took, after what was buffered)
        and as much more of the pipe as it needs (see :meth:`read`)."""
        got = len(buf)
        if not got:
            raise FrameError("the pipe closed")
        if got > 4 and got - 4 == _HEADER.unpack_from(buf)[0]:
            # The usual frame: the read took it whole, and nothing after it. A slice, not a
            # view: a view costs msgpack more than the copy of at most one read does.
            return self._decode(buf[4:])
        while len(buf) < 4:
            try:
                buf += self._read_some(_READ_BYTES, deadline)
            except FrameTimeout:
                self._buffer = buf
                raise
        (size,) = _HEADER.unpack_from(buf)
        if size > MAX_FRAME_BYTES:
            raise FrameCorrupt(f"a frame of {size} bytes is past the limit")
        end = 4 + size
        if len(buf) < end:
            parts = [buf]
            got = len(buf)
            while got < end:
                try:
                    chunk = self._read_some(max(_READ_BYTES, end - got), deadline)
                except FrameTimeout:
                    self._buffer = b"".join(parts)
                    raise
                parts.append(chunk)
                got += len(chunk)
            buf = b"".join(parts)
        self._buffer = buf[end:] if len(buf) > end else b""
        return self._decode(buf[4:end])

    def _decode(self, body: bytes) -> Any:
        """A frame's body as the value it packs.

        Raises:
            FrameCorrupt: it does not decode.
        """
        try:
            return _unpackb(body, raw=False, strict_map_key=False, ext_hook=self._ext)
        except Exception as exc:  # noqa: BLE001 - whatever the bytes were, not a frame
            raise FrameCorrupt(f"a frame that does not decode: {exc!r}") from None


def encode_error(error: ScriptError | None) -> dict[str, Any] | None:
    if error is None:
        return None
    data: dict[str, Any] = {
        "kind": error.kind,
        "message": error.message,
        "chunk": error.chunk,
        "line": error.line,
        "traceback": [[f.chunk, f.line, f.function] for f in error.traceback],
    }
    if isinstance(error, BudgetExceeded):
        data["budget"], data["limit"], data["used"] = error.budget, error.limit, error.used
    return data


_KINDS = frozenset(get_args(ErrorKind)) - {"budget"}  # a budget error carries its budget
_BUDGETS = frozenset(get_args(BudgetKind))
_NUMBERS = (int, float)


def _is(value: Any, kind: type) -> bool:
    """``value`` is ``None`` or exactly of ``kind`` (no subclass: a bool is no int)."""
    return value is None or type(value) is kind


def decode_error(data: dict[str, Any] | None) -> ScriptError | None:
    """The error in a worker's answer, each field checked: the worker is not trusted.

    Raises:
        ValueError: the data is no error as :func:`encode_error` writes one (a field
            missing, or of the wrong type).
    """
    if data is None:
        return None
    if type(data) is not dict:
        raise ValueError("an error is a map")
    kind, message = data.get("kind"), data.get("message")
    chunk, line, traceback = data.get("chunk"), data.get("line"), data.get("traceback")
    if not (_is(kind, str) and type(message) is str and _is(chunk, str) and _is(line, int)
            and type(traceback) is list):
        raise ValueError("an error field of the wrong type")
    frames = []
    for frame in traceback:
        if not (type(frame) is list and len(frame) == 3 and type(frame[0]) is str
                and _is(frame[1], int) and _is(frame[2], str)):
            raise ValueError("a malformed traceback frame")
        frames.append(Frame(frame[0], frame[1], frame[2]))
    if "budget" in data:
        budget, limit, used = data["budget"], data.get("limit"), data.get("used")
        if not (type(budget) is str and budget in _BUDGETS and type(limit) in _NUMBERS
                and type(used) in _NUMBERS):
            raise ValueError("a malformed budget error")
        return BudgetExceeded(budget, limit, used, chunk=chunk, line=line,  # type: ignore[arg-type]
                              traceback=tuple(frames))
    if kind is not None and kind not in _KINDS:
        raise ValueError(f"an error of kind {kind[:40]!r}")
    return ScriptError(message, chunk=chunk, line=line, traceback=tuple(frames),
                       kind=kind)  # type: ignore[arg-type]


# The answer to a request that ran mod code (``run``, ``resume``), one flat list:
# ["r", status, values, steps, peak, wall_s, error, snapshot, replacements]
# snapshot: None (none taken), [value] (the state after an ok resume), or a string (why
# none could be taken). replacements: the runtime replacements of the mod's sandbox so far.


def encode_result(outcome: Outcome, snapshot: Any, replacements: int) -> list[Any]:
    status, values, error, _, s = outcome
    return ["r", status, values, s[0], s[1], s[2],
            None if error is None else encode_error(error), snapshot, replacements]
