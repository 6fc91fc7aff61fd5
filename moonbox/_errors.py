"""The one exception tree of moonbox.

Script faults (:class:`ScriptError` and its kinds) are the mod's doing and are what a modder
or the Programmer sees. Everything else under :class:`MoonboxError` is the host's concern:
a bad configuration, a closed sandbox, a bug.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "DENIAL_REASONS",
    "BindingError",
    "BudgetExceeded",
    "BudgetKind",
    "ConfigError",
    "ErrorKind",
    "Frame",
    "HostError",
    "MoonboxError",
    "SandboxClosed",
    "ScriptError",
]

# "crashed": the worker process running the mod died (moonbox.isolation).
ErrorKind = Literal["syntax", "runtime", "budget", "denied", "crashed"]
BudgetKind = Literal["steps", "memory", "time"]


class MoonboxError(Exception):
    """Base class of every error moonbox raises."""


class ConfigError(MoonboxError, ValueError):
    """A limit or option that cannot be enforced as given."""


class HostError(MoonboxError):
    """A fault of the host side (a bug in moonbox or in a host binding), not of the mod."""


# Reasons of a BindingError that refuse the call on the host's authority (permissions,
# approval, a hook's veto): a mod that fails on one fails with kind ``denied``.
DENIAL_REASONS = frozenset({"denied", "not_approved", "approval_timed_out",
                            "approval_cancelled", "vetoed"})


class BindingError(MoonboxError):
    """Raised by a host function to fail the call: the mod sees ``name: <this message>``.

    ``reason`` is a stable code for programs: ``invalid_arguments``, ``failed``, a denial
    (``denied``, ``not_approved``, ``approval_timed_out``, ``approval_cancelled``,
    ``vetoed``), ``unavailable``, ``aborted``, ``refused``, a query refusal
    (``unknown_source``, ``timed_out``, ...) or a host's own ``namespace:name``.
    ``call_id`` is the id of the call that failed, when the bindings layer gave it one.
    """

    def __init__(self, message: str, *, reason: str = "invalid_arguments") -> None:
        super().__init__(message)
        self.reason = reason
        self.call_id: int | None = None

    @property
    def denied(self) -> bool:
        """The host refused the call (permissions, approval or a hook), not the arguments."""
        return self.reason in DENIAL_REASONS


class SandboxClosed(MoonboxError):
    """The sandbox or run was closed (or replaced after an out-of-memory trip)."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame of the mod's own code in a traceback, innermost first."""

    chunk: str
    line: int | None
    function: str | None

    def __str__(self) -> str:
        where = f"{_short(self.chunk)}:{self.line}" if self.line else _short(self.chunk)
        return f"{where}: in {self.function}" if self.function else f"{where}: in function"

    def to_dict(self) -> dict[str, object]:
        return {"chunk": self.chunk, "line": self.line, "function": self.function}


def _short(chunk: str | None) -> str:
    if not chunk:
        return "?"
    return chunk[1:] if chunk[0] in "@=" else chunk


class ScriptError(MoonboxError):
    """A fault of the mod's script: its syntax, a runtime error, a budget, a denial.

    Attributes:
        kind: ``syntax``, ``runtime``, ``budget`` or ``denied``.
        message: what went wrong, without the position prefix.
        chunk: the chunk name (``@mods/waves/main.lua``), when known.
        line: the line in that chunk, when known.
        traceback: the mod's own frames, innermost first.
    """

    kind: ErrorKind = "runtime"

    def __init__(
        self,
        message: str,
        *,
        chunk: str | None = None,
        line: int | None = None,
        traceback: tuple[Frame, ...] = (),
        kind: ErrorKind | None = None,
    ) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind
        self.message = message
        self.chunk = chunk
        self.line = line
        self.traceback = tuple(traceback)

    @property
    def where(self) -> str:
        """``file:line`` of the fault, or the chunk alone, or ``?``."""
        if self.line:
            return f"{_short(self.chunk)}:{self.line}"
        return _short(self.chunk)

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.chunk else self.message

    def to_dict(self) -> dict[str, object]:
        """The JSON shape of ``moonbox run --json``."""
        return {
            "kind": self.kind,
            "message": self.message,
            "chunk": self.chunk,
            "line": self.line,
            "traceback": [f.to_dict() for f in self.traceback],
        }


MAX_SOURCE_BYTES = 4 << 20
"""The largest mod source moonbox loads, in bytes (4 MiB): a larger one is refused before it
reaches the VM or the instrumenter (a source of tens of MB can make LuaJIT run out of memory
in an unprotected call, which ends the process)."""


class SourceTooLarge(ScriptError):
    """A source over :data:`MAX_SOURCE_BYTES`: refused before it is read further.

    Attributes:
        code: ``source_too_large``.
        limit_bytes: the limit.
        size_bytes: the source's size (its UTF-8 bytes).
    """

    kind: ErrorKind = "syntax"
    code = "source_too_large"

    def __init__(self, size_bytes: int, limit_bytes: int, *, chunk: str | None = None) -> None:
        super().__init__(
            f"the source is {size_bytes:,} bytes; moonbox loads sources of at most "
            f"{limit_bytes:,} bytes [source_too_large]: split the mod into files, or keep "
            "large data outside its source", chunk=chunk)
        self.limit_bytes = limit_bytes
        self.size_bytes = size_bytes


class BudgetExceeded(ScriptError):
    """A budget tripped: the run is over and cannot be resumed.

    Attributes:
        budget: ``steps``, ``memory`` or ``time``.
        limit: the limit that tripped (steps, bytes or seconds).
        used: what had been used when it tripped (same unit).
    """

    kind: ErrorKind = "budget"

    _UNITS = {"steps": "steps", "memory": "bytes", "time": "s"}
    _FIX = {
        "steps": "make the loop do less per resume, or yield and continue on a later resume",
        "memory": "keep less data alive, or build large strings and tables in parts",
        "time": "do less work per resume, or yield and continue on a later resume",
    }

    def __init__(
        self,
        budget: BudgetKind,
        limit: float,
        used: float,
        *,
        chunk: str | None = None,
        line: int | None = None,
        traceback: tuple[Frame, ...] = (),
    ) -> None:
        unit = self._UNITS[budget]
        shown_limit = f"{limit:g}" if isinstance(limit, float) else f"{limit:,}"
        shown_used = f"{used:.3g}" if isinstance(used, float) else f"{used:,}"
        if budget == "memory":
            # The allocation that failed is not in `used`: say what the limit was and what
            # was in use when an allocation would have passed it.
            message = (
                f"memory budget exceeded: an allocation would pass the limit of {shown_limit} "
                f"bytes ({shown_used} bytes in use); {self._FIX[budget]}"
            )
        else:
            message = (
                f"{budget} budget exceeded: used {shown_used} {unit} of {shown_limit} {unit} "
                f"allowed; {self._FIX[budget]}"
            )
        super().__init__(message, chunk=chunk, line=line, traceback=traceback)
        self.budget: BudgetKind = budget
        self.limit = limit
        self.used = used


def first_error(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """The error to report of a validation's errors (pydantic's ``errors()``), the same
    whatever order a mod's table gave its keys in: the first field in the schema's order
    that failed, and within it the error at the smallest location. A Lua table's key order
    follows the runtime's string hash, which is seeded per runtime: taking pydantic's first
    error as it comes would name a different problem from one run of a seeded game to the
    next."""
    head = errors[0]["loc"][:1]
    return min((e for e in errors if e["loc"][:1] == head),
               key=lambda e: tuple(str(p) for p in e["loc"]))
