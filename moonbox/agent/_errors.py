"""The agent's errors: a backend that failed, a loop that was stopped.

All of them sit under :class:`moonbox.MoonboxError` through :class:`AgentError` and carry
a stable ``code`` for programs. None of them is the script's fault: what the generated Lua
did wrong is a :class:`moonbox.ScriptError` inside an attempt, fed back to the model.
"""

from __future__ import annotations

from typing import Literal

from .._errors import MoonboxError

__all__ = [
    "AgentError",
    "Cancelled",
    "ClientError",
    "ClientErrorCode",
    "GenerationLimited",
    "RETRYABLE_CODES",
]

ClientErrorCode = Literal[
    "rate_limited",
    "auth_failed",
    "backend_unavailable",
    "timeout",
    "empty_response",
    "bad_response",
    "bad_request",
]

# Codes a client retries (with backoff) when no output has reached the caller yet.
RETRYABLE_CODES: frozenset[str] = frozenset({"rate_limited", "backend_unavailable"})


class AgentError(MoonboxError):
    """Base class of the agent's errors.

    Attributes:
        code: a stable code for programs (each subclass documents its own).
    """

    code: str = "agent_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class ClientError(AgentError):
    """An LLM backend could not give a usable reply.

    Codes:

    - ``rate_limited``: the backend said 429 (or an error body saying so), after retries.
    - ``auth_failed``: 401 or 403: the API key is missing, wrong or not allowed.
    - ``backend_unavailable``: 5xx, a refused or dropped connection, after retries.
    - ``timeout``: no byte within the idle timeout, or the whole request took too long.
    - ``empty_response``: the reply held no visible text (reasoning alone counts as empty).
    - ``bad_response``: a body that is not the chat-completions protocol.
    - ``bad_request``: another 4xx: the backend refused the request itself (unknown model,
      context too long); retrying the same request would fail the same way.

    Attributes:
        code: one of the codes above.
        request: ``"POST http://host/v1/chat/completions"`` or the client's own name
            (never headers, never the key).
        status: the HTTP status, when there was one.
        retry_after_s: what the backend asked us to wait, when it said.
        attempts: how many requests were made, retries included.
        finish_reason: for ``empty_response``, why the backend stopped (``length`` means
            the reply ran out of tokens, often all spent on reasoning).
    """

    code: ClientErrorCode = "bad_response"

    def __init__(
        self,
        message: str,
        *,
        code: ClientErrorCode,
        request: str = "",
        status: int | None = None,
        retry_after_s: float | None = None,
        attempts: int = 1,
        finish_reason: str | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.code = code
        self.request = request
        self.status = status
        self.retry_after_s = retry_after_s
        self.attempts = attempts
        self.finish_reason = finish_reason

    @property
    def retryable(self) -> bool:
        return self.code in RETRYABLE_CODES

    def __str__(self) -> str:
        where = f" ({self.request}" + (f", HTTP {self.status}" if self.status else "") + ")"
        return f"{self.args[0]}{where if self.request else ''} [{self.code}]"

    def to_dict(self) -> dict[str, object]:
        return {"code": self.code, "message": str(self), "status": self.status,
                "attempts": self.attempts}


class GenerationLimited(AgentError):
    """A role asked for more generations than its rate limit allows (code ``generation_limit``).

    The loop stops instead of waiting: a generate-fail-repair cycle that runs this fast is
    more likely a runaway than progress.

    Attributes:
        role: the role whose limit tripped.
        limit: generations allowed per window.
        window_s: the window, in seconds.
        retry_in_s: when the oldest generation in the window leaves it.
    """

    code = "generation_limit"

    def __init__(self, role: str, limit: int, window_s: float, retry_in_s: float) -> None:
        super().__init__(
            f"role {role!r} reached its limit of {limit} generations per {window_s:g} s; "
            f"wait {retry_in_s:.1f} s, or raise the limit if this rate is intended"
        )
        self.role = role
        self.limit = limit
        self.window_s = window_s
        self.retry_in_s = retry_in_s


class Cancelled(AgentError):
    """The request was cancelled: explicitly, by the caller, or by a newer request of its scope.

    Attributes:
        reason: ``cancelled`` (explicit or by the caller) or ``superseded`` (latest wins).
    """

    code = "cancelled"

    def __init__(self, reason: str = "cancelled") -> None:
        super().__init__(f"the request was {reason}" if reason != "cancelled"
                         else "the request was cancelled")
        self.reason = reason
