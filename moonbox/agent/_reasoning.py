"""Keeping reasoning apart from the answer: ``<think>`` blocks, whole or streamed.

Backends deliver reasoning three ways: a separate field per message or delta
(``reasoning_content`` or ``reasoning``; the clients read both), inline ``<think>...
</think>`` blocks in the text, or, when the chat template opens the block inside the
prompt, a reply that starts in the middle of the reasoning and shows only the closing
``</think>``. :func:`split_reasoning` handles a whole text; :class:`ThinkSplitter` handles a
stream whose tags may be cut anywhere between chunks.
"""

from __future__ import annotations

__all__ = ["ThinkSplitter", "split_reasoning"]

OPEN = "<think>"
CLOSE = "</think>"


def split_reasoning(text: str) -> tuple[str, str]:
    """``(visible, reasoning)`` of a whole reply.

    Every ``<think>...</think>`` block goes to the reasoning; an unclosed block runs to the
    end; a ``</think>`` with no opening tag before it closes a block that began before the
    text did, so everything before it is reasoning.
    """
    visible: list[str] = []
    thought: list[str] = []
    orphan = text.find(CLOSE)
    first_open = text.find(OPEN)
    if orphan != -1 and (first_open == -1 or orphan < first_open):
        thought.append(text[:orphan])
        text = text[orphan + len(CLOSE):]
    splitter = ThinkSplitter()
    shown, hidden = splitter.feed(text)
    tail_shown, tail_hidden = splitter.flush()
    visible += [shown, tail_shown]
    thought += [hidden, tail_hidden]
    return "".join(visible).strip(), "\n".join(t.strip() for t in thought if t.strip())


class ThinkSplitter:
    """Split streamed text into visible and reasoning parts, tags cut anywhere.

    ``feed`` returns what can be decided now; a suffix that might be the start of a tag is
    held back until the next chunk (or :meth:`flush`) settles it.
    """

    def __init__(self) -> None:
        self._inside = False
        self._held = ""

    def feed(self, chunk: str) -> tuple[str, str]:
        """``(visible, reasoning)`` decided by this chunk."""
        text = self._held + chunk
        self._held = ""
        visible: list[str] = []
        thought: list[str] = []
        while text:
            tag = CLOSE if self._inside else OPEN
            at = text.find(tag)
            if at != -1:
                (thought if self._inside else visible).append(text[:at])
                text = text[at + len(tag):]
                self._inside = not self._inside
                continue
            keep = _partial_suffix(text, tag)
            settled = text[: len(text) - keep]
            (thought if self._inside else visible).append(settled)
            self._held = text[len(text) - keep:]
            break
        return "".join(visible), "".join(thought)

    def flush(self) -> tuple[str, str]:
        """What is held back, at the end of the stream."""
        held, self._held = self._held, ""
        return ("", held) if self._inside else (held, "")


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0
