"""The offline scripted client: replays a list of replies, for demos, tests and evaluation.

It is a real implementation of the client protocol, not a mock: replies go through the
same reasoning split as the HTTP client's, ``stream`` cuts them into pieces, and a
scripted error is raised as the :class:`ClientError` a backend would cause. It remembers
every request, so a test can read what the loop asked.

Replay files are JSON Lines, one reply per line::

    {"content": "```lua\\nreturn 1\\n```"}
    {"task": "waves", "content": "...", "reasoning": "kept apart"}
    {"error": "rate_limited"}

``task`` (optional) selects the lines for one task of an evaluation; a line without it
belongs to every task. A line may also be a bare JSON string (the content).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from .._errors import ConfigError
from ._client import Delta, Message, Reply
from ._errors import ClientError, ClientErrorCode
from ._reasoning import ThinkSplitter, split_reasoning

__all__ = ["ScriptedClient", "ScriptedReply", "load_replies"]

_CODES = frozenset(get_args(ClientErrorCode))


@dataclass(frozen=True, slots=True)
class ScriptedReply:
    """One line of a replay: a reply, or an error the backend would have caused."""

    content: str = ""
    reasoning: str = ""
    error: ClientErrorCode | None = None
    task: str | None = None


def load_replies(path: str | Path, *, task: str | None = None) -> list[ScriptedReply]:
    """The replies of a replay file, for ``task`` (lines with no task, plus its own).

    Raises:
        ConfigError: the file cannot be read, or a line is not a reply.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the replay file {path}: {exc.strerror or exc}") from None
    replies: list[ScriptedReply] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("//"):
            continue
        try:
            reply = _parse_line(json.loads(line))
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{path}:{number}: not a scripted reply ({exc})") from None
        if task is None or reply.task is None or reply.task == task:
            replies.append(reply)
    return replies


def _parse_line(item: Any) -> ScriptedReply:
    if isinstance(item, str):
        return ScriptedReply(item)
    if not isinstance(item, dict):
        raise TypeError("expected an object or a string")
    unknown = set(item) - {"content", "reasoning", "error", "task"}
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)}")
    error = item.get("error")
    if error is not None and error not in _CODES:
        raise ValueError(f"error must be one of {sorted(_CODES)}")
    for name in ("content", "reasoning", "task"):
        if item.get(name) is not None and not isinstance(item[name], str):
            raise TypeError(f"{name} must be a string")
    return ScriptedReply(item.get("content") or "", item.get("reasoning") or "", error,
                         item.get("task"))


class ScriptedClient:
    """Replays replies in order, one per request.

    Args:
        replies: strings (the visible content, which may hold ``<think>`` blocks),
            :class:`ScriptedReply` items, or :class:`Reply` objects.
        model: the name reported as the author of what it writes.
        chunk_chars: ``stream`` cuts each reply into pieces of this many characters.

    Attributes:
        requests: the messages of every request made, in order.
    """

    def __init__(
        self,
        replies: Iterable[str | ScriptedReply | Reply],
        *,
        model: str = "scripted",
        chunk_chars: int = 7,
    ) -> None:
        if chunk_chars < 1:
            raise ConfigError("chunk_chars must be at least 1")
        self.model = model
        self.chunk_chars = chunk_chars
        self._replies: list[ScriptedReply] = []
        for reply in replies:
            if isinstance(reply, str):
                reply = ScriptedReply(reply)
            elif isinstance(reply, Reply):
                reply = ScriptedReply(reply.content, reply.reasoning)
            self._replies.append(reply)
        self._next = 0
        self._lock = threading.Lock()
        self.requests: list[tuple[Message, ...]] = []

    @classmethod
    def from_file(cls, path: str | Path, *, task: str | None = None,
                  model: str = "scripted") -> ScriptedClient:
        """A client replaying a JSON Lines file (see the module docstring)."""
        return cls(load_replies(path, task=task), model=model)

    @property
    def remaining(self) -> int:
        return len(self._replies) - self._next

    def __repr__(self) -> str:
        return f"ScriptedClient({len(self._replies)} replies, {self.remaining} left)"

    def _take(self, messages: Sequence[Message]) -> ScriptedReply:
        with self._lock:
            self.requests.append(tuple(messages))
            if self._next >= len(self._replies):
                raise ClientError(
                    f"the script has no more replies ({len(self._replies)} replayed)",
                    code="backend_unavailable", request="scripted client")
            reply = self._replies[self._next]
            self._next += 1
        if reply.error is not None:
            raise ClientError(f"scripted {reply.error}", code=reply.error,
                              request="scripted client")
        return reply

    def complete(
        self, messages: Sequence[Message], *, max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> Reply:
        """The next reply.

        Raises:
            ClientError: the scripted error, ``empty_response`` for a reply with no
                visible text, ``backend_unavailable`` when the script has run out.
        """
        reply = self._take(messages)
        visible, inline = split_reasoning(reply.content)
        reasoning = "\n".join(r for r in (reply.reasoning, inline) if r)
        if not visible:
            raise ClientError("the reply held no visible text", code="empty_response",
                              request="scripted client")
        return Reply(visible, reasoning, "stop", self.model)

    def stream(
        self, messages: Sequence[Message], *, max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> Iterator[Delta]:
        """The next reply, in pieces of ``chunk_chars`` characters.

        Raises:
            ClientError: as :meth:`complete` (an empty reply after its pieces).
        """
        reply = self._take(messages)
        n = self.chunk_chars
        for i in range(0, len(reply.reasoning), n):
            yield Delta(reasoning=reply.reasoning[i:i + n])
        splitter = ThinkSplitter()
        visible = False
        for i in range(0, len(reply.content), n):
            shown, hidden = splitter.feed(reply.content[i:i + n])
            if shown or hidden:
                visible = visible or bool(shown.strip())
                yield Delta(shown, hidden)
        shown, hidden = splitter.flush()
        if shown or hidden:
            visible = visible or bool(shown.strip())
            yield Delta(shown, hidden)
        if not visible:
            raise ClientError("the reply held no visible text", code="empty_response",
                              request="scripted client")
        yield Delta(finish_reason="stop")
