"""Hooks around binding calls: ``pre_call`` observes and may veto, ``post_call`` may amend."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ..sandbox import HostCall

if TYPE_CHECKING:
    from ._binding import Binding

__all__ = ["CallInfo", "Hook", "PostCall", "PreCall", "Veto"]

_MATCH = re.compile(r"^[A-Za-z0-9_]{0,64}\*$|^[A-Za-z_][A-Za-z0-9_]{0,63}$")


@dataclass(frozen=True, slots=True)
class CallInfo:
    """One binding call, as hooks see it.

    Attributes:
        mod: the id of the mod making the call.
        binding: the binding called.
        args: the validated arguments (the binding's model).
        call: the sandbox's call context (the run, its reports).
        call_id: unique to this call (among every call of the process): approval requests,
            hooks, refusals and the log lines of the call carry it.
        prepared: what the binding's ``prepare`` step bound, or ``None`` without one.
        trace_id: the trace the mod's calls run under (:attr:`ModApi.trace_id`: the
            agent's attempt, say), or ``None``.
    """

    mod: str
    binding: Binding
    args: BaseModel
    call: HostCall
    call_id: int = 0
    prepared: Any = None
    _aborted: Callable[[], str | None] | None = field(default=None, repr=False, compare=False)
    trace_id: str | None = None

    @property
    def aborted(self) -> bool:
        """The binding was removed, or the mod unloaded, since the call began: it will not
        run, or its result will be dropped."""
        return self._aborted is not None and self._aborted() is not None


@dataclass(frozen=True, slots=True)
class Veto:
    """What a ``pre_call`` hook returns to refuse a call; the mod sees ``reason``."""

    reason: str


PreCall = Callable[[CallInfo], "Veto | None"]
PostCall = Callable[[CallInfo, Any], Any]


@dataclass(frozen=True)
class Hook:
    """Code the host runs around binding calls.

    Hooks run in ascending ``order`` (ties: the order they were added). Every ``pre_call``
    hook runs, even after one has vetoed (an audit hook late in the order still sees the
    call); the first veto in that order is the one the mod sees. A hook that raises is
    logged and skipped: only a returned :class:`Veto` refuses a call. ``post_call`` hooks
    run only for a call that ran.

    Attributes:
        name: for logs and removal.
        pre_call: ``fn(info) -> Veto | None``, after validation, preparation and approval,
            before the binding runs.
        post_call: ``fn(info, result) -> result``: what it returns replaces the result
            (return the result unchanged to keep it).
        order: position among hooks.
        match: a binding name or ``prefix*`` (``*``: every binding).
    """

    name: str
    pre_call: PreCall | None = field(default=None, repr=False)
    post_call: PostCall | None = field(default=None, repr=False)
    order: int = 0
    match: str = "*"

    def __post_init__(self) -> None:
        if self.pre_call is None and self.post_call is None:
            raise ValueError(f"hook {self.name!r} has neither pre_call nor post_call")
        if not _MATCH.match(self.match):
            raise ValueError(f"hook {self.name!r}: match a binding name or a 'prefix*'")

    def matches(self, binding_name: str) -> bool:
        if self.match[-1:] == "*":
            return binding_name.startswith(self.match[:-1])
        return binding_name == self.match
