"""Frames between the host and a worker: a 4-byte length, then one msgpack value.

Both sides speak through two pipes. The host sends requests (a list whose first item is
the operation's name); while it serves one, the worker may send ``call`` frames (a host
function it wants run) and the host answers each before the worker goes on. Outcomes and
errors cross as plain lists and dicts, rebuilt into the sandbox's own types on the host.
"""

from __future__ import annotations

import os
import select
import struct
import time
from typing import Any

import msgpack

from .._errors import BudgetExceeded, Frame, ScriptError
from ..sandbox import Outcome, Stats

__all__ = [
    "EXIT_OUT_OF_MEMORY",
    "FrameError",
    "FrameTimeout",
    "decode_error",
    "decode_outcome",
    "encode_error",
    "encode_outcome",
    "FrameReader",
    "pack",
    "write_frame",
    "write_packed",
]

# The worker's exit status when the OS refused it memory (its address-space limit).
EXIT_OUT_OF_MEMORY = 86
# Larger frames are refused: a result this big is a fault of the mod or of the protocol.
MAX_FRAME_BYTES = 256 << 20

_HEADER = struct.Struct("<I")


class FrameError(Exception):
    """The other side closed the pipe, or sent something that is not a frame."""


class FrameTimeout(Exception):
    """The deadline passed before a whole frame could be read or written."""


def _wait(fd: int, events: int, deadline: float | None) -> None:
    """Wait until ``fd`` is ready for ``events``, at most until ``deadline`` (monotonic
    seconds; ``None``: no limit). A deadline already past still takes what is ready now.

    Raises:
        FrameTimeout: the deadline passed first.
    """
    timeout_ms = None
    if deadline is not None:
        timeout_ms = max(0, int((deadline - time.monotonic()) * 1000) + 1)
    poll = select.poll()
    poll.register(fd, events)
    if not poll.poll(timeout_ms):
        raise FrameTimeout("the deadline passed in the middle of a frame")


def pack(value: Any) -> bytes:
    """One frame: length and msgpack body."""
    body = msgpack.packb(value, use_bin_type=True)
    return _HEADER.pack(len(body)) + body


def write_frame(fd: int, value: Any, deadline: float | None = None) -> None:
    """Write one frame, whole. With a ``deadline`` (monotonic seconds) the write waits for
    room in the pipe at most until then; ``fd`` should then be non-blocking, or one large
    write could still block past it.

    Raises:
        FrameError: the reader is gone.
        FrameTimeout: the deadline passed before the whole frame was written.
        TypeError: the value is not plain data msgpack can carry.
    """
    write_packed(fd, pack(value), deadline)


def write_packed(fd: int, data: bytes, deadline: float | None = None) -> None:
    """Write one frame made by :func:`pack` (see :func:`write_frame`)."""
    view = memoryview(data)
    while view:
        if deadline is not None:
            _wait(fd, select.POLLOUT, deadline)
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            if deadline is None:
                _wait(fd, select.POLLOUT, None)
            continue
        except OSError as exc:
            raise FrameError(f"the pipe closed: {exc}") from None
        view = view[written:]


class FrameReader:
    """Reads frames from one pipe, a large read at a time: a frame usually arrives whole in
    one system call, and bytes past it wait in the buffer for the next frame."""

    __slots__ = ("fd", "_buffer")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = b""

    def pending(self) -> bool:
        """A whole frame is already buffered (no need to wait for the pipe)."""
        buf = self._buffer
        return len(buf) >= 4 and len(buf) - 4 >= _HEADER.unpack_from(buf)[0]

    def _read_some(self, size: int, deadline: float | None) -> bytes:
        fd = self.fd
        while True:
            if deadline is not None:
                _wait(fd, select.POLLIN, deadline)
            try:
                chunk = os.read(fd, size)
            except BlockingIOError:
                if deadline is None:
                    _wait(fd, select.POLLIN, None)
                continue
            if not chunk:
                raise FrameError("the pipe closed")
            return chunk

    def read(self, deadline: float | None = None) -> Any:
        """The next frame, all of it read by ``deadline`` (monotonic seconds; ``None``: wait
        as long as it takes).

        Raises:
            FrameError: end of file, or a frame past the size limit.
            FrameTimeout: the deadline passed before the whole frame arrived (what was read
                stays buffered).
            OSError: reading the pipe failed.
        """
        buf = self._buffer
        while len(buf) < 4:
            try:
                buf += self._read_some(_READ_BYTES, deadline)
            except FrameTimeout:
                self._buffer = buf
                raise
        (size,) = _HEADER.unpack_from(buf)
        if size > MAX_FRAME_BYTES:
            raise FrameError(f"a frame of {size} bytes is past the limit")
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
        self._buffer = buf[end:]
        return msgpack.unpackb(buf[4:end], raw=False, strict_map_key=False)


_READ_BYTES = 1 << 16


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


def decode_error(data: dict[str, Any] | None) -> ScriptError | None:
    if data is None:
        return None
    frames = tuple(Frame(c, ln, fn) for c, ln, fn in data["traceback"])
    if "budget" in data:
        return BudgetExceeded(data["budget"], data["limit"], data["used"], chunk=data["chunk"],
                              line=data["line"], traceback=frames)
    return ScriptError(data["message"], chunk=data["chunk"], line=data["line"],
                       traceback=frames, kind=data["kind"])


def encode_outcome(outcome: Outcome) -> list[Any]:
    s = outcome.stats
    return [outcome.status, list(outcome.values), encode_error(outcome.error),
            [s.steps, s.memory_peak_bytes, s.wall_s]]


def decode_outcome(data: list[Any], reports: tuple[str, ...]) -> Outcome:
    """The outcome a worker sent, with the reports the host collected while serving it."""
    status, values, error, stats = data
    return Outcome(status, tuple(values), decode_error(error), reports, Stats(*stats))
