"""The stable codes a refused or failed call ends in, and the rule for the host's own.

Every refusal a mod meets ends in ``[code]``: ``spawn: not approved for this mod
[not_approved]``. moonbox's own codes are bare ``snake_case`` words, listed here with what
each means. A host that refuses or fails with a code of its own (a query source's
``authorize`` or ``read``, a binding's ``prepare``) writes it ``namespace:name``, as in
``leaderboard:season_closed``: no built-in code has a colon, so a host code can never be
taken for one, neither today's nor one added later. A host code is checked where it is
made or raised; one that breaks the rule is a host bug (logged, and the mod sees
``failed``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["BINDING_CODES", "HOST_CODE", "QUERY_CODES", "Refusal", "check_host_code",
           "is_host_code"]

BINDING_CODES: dict[str, str] = {
    "invalid_arguments": "an argument does not fit the binding's model",
    "denied": "the mod's permissions deny the binding",
    "not_approved": "the approver said no, there is no approver, or an earlier question "
                    "about this binding is still open",
    "approval_timed_out": "no answer came within the approval timeout",
    "approval_cancelled": "the host withdrew the question (it denied every pending "
                          "approval, removed the binding or unloaded the mod)",
    "vetoed": "a hook of the host vetoed the call",
    "refused": "the binding's preparation found nothing it may act on",
    "unavailable": "the binding was removed, or the mod unloaded, before the call",
    "aborted": "the binding was removed, or the mod unloaded, while the call ran: it did "
               "not finish, or its result was dropped",
    "failed": "the host could not serve the call (its log says why)",
}
"""What a binding call may end in, besides the binding's own codes (world, engine...)."""

QUERY_CODES: dict[str, str] = {
    "unknown_source": "no query source has that name",
    "not_declared": "the mod did not declare that source among its queries",
    "too_many_queries": "the mod reads as many distinct sources as it may already",
    "invalid_arguments": "the arguments do not fit the source's model",
    "access_unavailable": "the source checks access and the mod was loaded without any",
    "refused": "the source's authorize step said no",
    "busy": "too many reads in flight (of the source, of the mod, or in all)",
    "failed": "the read raised, or returned what does not fit the source's result",
    "timed_out": "no result within the source's timeout or the resume's time left",
    "result_too_large": "the result is over the source's size cap",
}
"""What a query may end in, besides a source's own host codes."""

HOST_CODE = re.compile(r"^[a-z][a-z0-9_]{0,31}:[a-z][a-z0-9_]{0,31}$")
"""A host's own code: ``namespace:name``, each part a lowercase word of 1-32 characters."""


def is_host_code(code: object) -> bool:
    """Whether ``code`` is written as a host's own code (``namespace:name``)."""
    return isinstance(code, str) and HOST_CODE.match(code) is not None


def check_host_code(code: object) -> str:
    """``code`` if it is a host code.

    Raises:
        ValueError: it is not of the form ``namespace:name`` (a built-in code such as
            ``refused`` is not a host code: leave ``code`` out to use it).
    """
    if not is_host_code(code):
        raise ValueError(
            f"code {code!r}: a host's code is 'namespace:name' (lowercase words, "
            "1-32 characters each), so it never collides with a built-in one"
        )
    return code  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class Refusal:
    """What the host returns to refuse a request, with a sentence and an optional code.

    A binding's ``prepare`` returns one instead of the bound state; a query source's
    ``authorize`` or ``read`` returns one to refuse the read. The mod sees ``reason`` and
    ``[code]``: the host's own code (``namespace:name``) or, without one, ``refused``.

    Raises:
        ValueError: an empty reason, or a code that is not a host code.
    """

    reason: str
    code: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.reason, str) or not self.reason.strip():
            raise ValueError("a refusal needs a reason: one sentence the mod can act on")
        object.__setattr__(self, "reason", " ".join(self.reason.split()))
        if self.code is not None:
            check_host_code(self.code)
