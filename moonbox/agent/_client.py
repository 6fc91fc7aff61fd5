"""The client protocol every LLM backend implements: ``complete`` and ``stream``.

A request is a list of :class:`Message`. ``complete`` returns one :class:`Reply`;
``stream`` yields :class:`Delta` pieces as they arrive, and :func:`collect` folds them back
into the same :class:`Reply`. Either way the visible answer (``content``) and the model's
reasoning are kept apart: the reasoning is never shown to the Lua extractor, the store or
the loop's history.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from ._reasoning import split_reasoning

__all__ = ["Delta", "LLMClient", "Message", "Reply", "Role", "collect"]

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message."""

    role: Role
    content: str

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True, slots=True)
class Delta:
    """One piece of a streamed reply: visible text, reasoning text, or the finish reason.

    ``usage`` is the token counts when the backend sent them (a stream's last chunk, as a
    rule); ``retries`` the requests that failed before this stream began (on its first
    piece only).
    """

    content: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    retries: int = 0


@dataclass(frozen=True, slots=True)
class Reply:
    """A whole reply.

    Attributes:
        content: the visible answer, reasoning removed (``<think>`` blocks included).
        reasoning: the reasoning, from a separate field or from ``<think>`` blocks.
        finish_reason: ``stop``, ``length``... as the backend said, if it said.
        model: the model that answered, if the backend said.
        usage: token counts, if the backend sent them (``prompt_tokens``,
            ``completion_tokens``, ``total_tokens``...).
        retries: requests that failed (and were retried) before this reply.
    """

    content: str
    reasoning: str = ""
    finish_reason: str | None = None
    model: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    retries: int = 0


@runtime_checkable
class LLMClient(Protocol):
    """What the Programmer loop needs of a backend.

    ``complete`` and ``stream`` take the same arguments and must agree: collecting a
    stream gives the reply ``complete`` would. Both raise :class:`ClientError` with a
    stable code when the backend cannot give a usable reply.

    ``complete`` may also take a keyword ``cancel`` (a
    :class:`~moonbox.agent.CancelToken`): the loop then passes its task's token, and the
    client promises to end the request when it is cancelled, from another thread, closing
    its connection, and to raise :class:`~moonbox.agent.Cancelled`. Without it, a
    cancelled buffered request is given up and left to finish in the background.
    """

    model: str

    def complete(
        self, messages: Sequence[Message], *, max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> Reply: ...

    def stream(
        self, messages: Sequence[Message], *, max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> Iterator[Delta]: ...


def _takes_cancel(method: Callable[..., object]) -> bool:
    """Does this ``complete`` take a ``cancel`` keyword (see :class:`LLMClient`)?"""
    try:
        parameter = inspect.signature(method).parameters.get("cancel")
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.kind in (
        inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def collect(deltas: Iterable[Delta], *, model: str | None = None) -> Reply:
    """Fold streamed pieces into a :class:`Reply`.

    The visible text is split once more as a whole, so a reply whose ``</think>`` came
    without an opening tag (the template opened the block in the prompt) still keeps
    its reasoning apart, even though the pieces were shown as they came.
    """
    content: list[str] = []
    reasoning: list[str] = []
    finish: str | None = None
    usage: dict[str, Any] = {}
    retries = 0
    for delta in deltas:
        content.append(delta.content)
        reasoning.append(delta.reasoning)
        if delta.finish_reason:
            finish = delta.finish_reason
        if delta.usage:
            usage = dict(delta.usage)
        retries = max(retries, delta.retries)
    visible, inline = split_reasoning("".join(content))
    thought = "".join(reasoning)
    if inline:
        thought = f"{thought}\n{inline}" if thought else inline
    return Reply(visible, thought, finish, model, usage, retries)
