"""What the sandbox's own modules see of a :class:`Sandbox` and a :class:`Run`.

The runs, the dispatcher, the values copied on the hot paths and the errors of a resume
each work on a sandbox's state, and the sandbox imports them all; they name it through
these protocols, never by importing ``_sandbox`` or ``_run``, so no two modules import each
other (tests/test_layers.py). The members are the sandbox's internals those modules use;
their meaning is documented where :class:`Sandbox` sets them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ._budget import Budget

__all__ = ["RunState", "SandboxState"]


class RunState(Protocol):
    """A run, as the dispatcher and the errors of a resume use it."""

    chunk: Any
    reports: list[str]
    status: str
    _id: int
    _open: bool
    _denials: Any
    _c_co: int
    _c_run: int

    def _add_report(self, text: str) -> None: ...


class SandboxState(Protocol):
    """A sandbox's runtime and per-resume state, as its runs, dispatcher and errors use it."""

    budget: Budget
    _rt: Any
    _running: Any
    _runs: dict[int, Any]
    _entries: Any
    _call: Any
    _closed: bool
    _clock: Callable[[], float]
    _start: float
    _deadline: float
    _limit: int
    _current_limit: int
    _fixed_limit: int | None
    _max_memory: int
    _alloc_bytes: int
    _wall_s_limit: float
    _lua_budget: Budget | None
    _excluded_s: float
    _dropped: Any
    _generation: int
    _failed: Any
    _not_enough_memory: Any
    _h_resume: Any
    _h_call: Any
    _call_limit: int
    _call_growth_limited: bool
    _call_fresh: bool
    _resumer: Any
    _h_take_end: Any
    _h_run_addresses: Any
    _h_extend: Any
    _h_expire: Any
    _h_close: Any
    _h_keep_function: Any
    _h_flat_argument: Any
    _h_check_argument: Any
    _pairs: Any
    _watchdog: Any
    _margin_s: float
    _margin_now: float
    _late_s: float
    abandoned: bool

    def _stall_at(self) -> float: ...

    def _abandon(self) -> None: ...

    def start(self, source: Any, chunk: str = ...) -> Any: ...

    def run(self, source: Any, chunk: str = ..., *args: Any, **options: Any) -> Any: ...

    def reset(self) -> None: ...

    def _loosen(self) -> None: ...

    def _close_run(self, run: Any) -> None: ...

    def _drop_handles(self) -> None: ...

    def _excluded_in_resume(self) -> float: ...

    def _send_budget(self, budget: Budget) -> None: ...

    def _limit_calls(self, heap_bytes: int, fresh: bool = False) -> None: ...
