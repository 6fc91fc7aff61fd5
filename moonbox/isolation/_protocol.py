"""Frames between the host and a worker: a 4-byte length, then one msgpack value.

Both sides speak through two pipes. The host sends requests (a list whose first item is
the operation's name); while it serves one, the worker may send ``call`` frames (a host
function it wants run) and the host answers each before the worker goes on. Outcomes and
errors cross as plain lists and dicts, rebuilt into the sandbox's own types on the host.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import msgpack

from .._errors import BudgetExceeded, Frame, ScriptError
from ..sandbox import Outcome, Stats

__all__ = [
    "EXIT_OUT_OF_MEMORY",
    "FrameError",
    "decode_error",
    "decode_outcome",
    "encode_error",
    "encode_outcome",
    "pack",
    "read_frame",
    "unpack",
    "write_frame",
]

# The worker's exit status when the OS refused it memory (its address-space limit).
EXIT_OUT_OF_MEMORY = 86
# Larger frames are refused: a result this big is a fault of the mod or of the protocol.
MAX_FRAME_BYTES = 256 << 20

_HEADER = struct.Struct("<I")


class FrameError(Exception):
    """The other side closed the pipe, or sent something that is not a frame."""


def pack(value: Any) -> bytes:
    """One frame: length and msgpack body."""
    body = msgpack.packb(value, use_bin_type=True)
    return _HEADER.pack(len(body)) + body


def unpack(body: bytes) -> Any:
    return msgpack.unpackb(body, raw=False, strict_map_key=False, use_list=True)


def write_frame(fd: int, value: Any) -> None:
    """Write one frame, whole.

    Raises:
        FrameError: the reader is gone.
        TypeError: the value is not plain data msgpack can carry.
    """
    data = memoryview(pack(value))
    try:
        while data:
            data = data[os.write(fd, data):]
    except (BrokenPipeError, OSError) as exc:
        raise FrameError(f"the pipe closed: {exc}") from None


def read_exact(fd: int, size: int) -> bytes:
    """Read exactly ``size`` bytes (blocking). Raises :class:`FrameError` at end of file."""
    chunk = os.read(fd, size)
    if len(chunk) == size:
        return chunk
    parts = [chunk]
    got = len(chunk)
    while got < size:
        if not chunk:
            raise FrameError("the pipe closed")
        chunk = os.read(fd, size - got)
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def read_frame(fd: int) -> Any:
    """Read one frame (blocking). Raises :class:`FrameError` at end of file."""
    header = os.read(fd, 4)
    if len(header) != 4:
        if not header:
            raise FrameError("the pipe closed")
        header += read_exact(fd, 4 - len(header))
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME_BYTES:
        raise FrameError(f"a frame of {size} bytes is past the limit")
    return unpack(read_exact(fd, size))


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
