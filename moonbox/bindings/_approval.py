"""Approvals: what an approver is asked, what it may answer, and how one question settles.

A question settles once, by the first of: the approver's answer, the approver raising,
the approval timeout, or the host withdrawing it (denying every pending approval,
removing the binding, unloading the mod, closing the registry). Whatever comes later is
ignored: a late ``ALLOW_ALWAYS`` neither runs the call nor is remembered.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ._permissions import Risk

__all__ = ["Answer", "ApprovalRequest", "ApprovalState", "Approver", "PendingApproval",
           "settle_from"]

log = logging.getLogger("moonbox.bindings")


class Answer(enum.Enum):
    """An approver's answer; ``True``/``False`` mean ``ALLOW``/``DENY``."""

    ALLOW = "allow"
    DENY = "deny"
    ALLOW_ALWAYS = "allow_always"  # for the rest of this mod's life (until ModApi.close)
    DENY_ALWAYS = "deny_always"


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What an approver is asked: may ``mod`` call ``binding`` with ``args``?

    Attributes:
        mod: the id of the mod asking.
        binding: the binding's name.
        risk: its risk level.
        args: the validated arguments, as JSON-ready data.
        call_id: the call waiting for the answer (the id its hooks and result carry).
        prepared: what the binding's ``prepare`` step bound (the concrete target), or
            ``None`` for a binding without one.
        trace_id: the trace the mod's calls run under, or ``None``.
    """

    mod: str
    binding: str
    risk: Risk
    args: dict[str, Any]
    call_id: int = 0
    prepared: Any = None
    trace_id: str | None = None


Approver = Callable[[ApprovalRequest], "bool | Answer"]

ApprovalState = Literal["pending", "allowed", "denied", "failed", "timed_out", "cancelled"]
"""``pending`` until it settles; then ``allowed`` or ``denied`` (the answer), ``failed``
(the approver raised), ``timed_out`` or ``cancelled`` (the host withdrew it)."""

_ALLOWING = (Answer.ALLOW, Answer.ALLOW_ALWAYS)


class PendingApproval:
    """One question to an approver, from asking until it settles, exactly once.

    Each transition returns whether it settled the question; only the first one does.

    Attributes:
        request: what the approver was asked.
        binding: the :class:`~moonbox.bindings.Binding` asked about (the object, so that
            removing it finds its questions).
        owner: the :class:`~moonbox.bindings.ModApi` asking.
        state: see :data:`ApprovalState`.
        why: for ``cancelled``, the sentence the mod sees.
    """

    __slots__ = ("request", "binding", "owner", "state", "answer", "why", "_settled", "_lock")

    def __init__(self, request: ApprovalRequest, binding: Any = None, owner: Any = None) -> None:
        self.request = request
        self.binding = binding
        self.owner = owner
        self.state: ApprovalState = "pending"
        self.answer: bool | Answer | None = None
        self.why = ""
        self._settled = threading.Event()
        self._lock = threading.Lock()

    def _settle(self, state: ApprovalState, answer: bool | Answer | None = None,
                why: str = "") -> bool:
        with self._lock:
            if self.state != "pending":
                return False
            self.state, self.answer, self.why = state, answer, why
        self._settled.set()
        return True

    def answered(self, answer: Any) -> bool:
        """The approver answered: ``True`` or an allowing :class:`Answer` allows, anything
        else denies."""
        allowed = answer is True or answer in _ALLOWING
        return self._settle("allowed" if allowed else "denied", answer)

    def failed(self) -> bool:
        """The approver raised: the question is denied (the caller logs it)."""
        return self._settle("failed")

    def time_out(self) -> bool:
        """No answer within the timeout."""
        return self._settle("timed_out")

    def cancel(self, why: str) -> bool:
        """The host withdraws the question; ``why`` is what the mod sees."""
        return self._settle("cancelled", why=why)

    @property
    def settled(self) -> bool:
        return self.state != "pending"

    @property
    def remember(self) -> bool | None:
        """What to remember for the rest of the mod's life: ``True`` after
        ``ALLOW_ALWAYS``, ``False`` after ``DENY_ALWAYS``, else ``None`` (a timeout or a
        cancellation never leaves a rule behind)."""
        if self.answer is Answer.ALLOW_ALWAYS and self.state == "allowed":
            return True
        if self.answer is Answer.DENY_ALWAYS and self.state == "denied":
            return False
        return None

    def wait(self, timeout_s: float) -> ApprovalState:
        """Wait up to ``timeout_s`` for the question to settle; time it out if it has not."""
        if not self._settled.wait(max(0.0, timeout_s)):
            self.time_out()
        return self.state

    def __repr__(self) -> str:
        r = self.request
        return f"<PendingApproval call {r.call_id} {r.mod}:{r.binding} {self.state}>"


def settle_from(approval: PendingApproval, future: Any) -> None:
    """A done-callback: settle ``approval`` from the approver's finished future."""
    if future.cancelled():
        return
    exc = future.exception()
    if exc is not None:
        if approval.failed():
            log.error("approver of mod %r failed on %r (call %d)", approval.request.mod,
                      approval.request.binding, approval.request.call_id,
                      exc_info=(type(exc), exc, exc.__traceback__))
        return
    answer = future.result()
    if not approval.answered(answer):
        log.info("approver of mod %r answered %r on %r (call %d) after the question was %s; "
                 "ignored", approval.request.mod, answer, approval.request.binding,
                 approval.request.call_id, approval.state)

