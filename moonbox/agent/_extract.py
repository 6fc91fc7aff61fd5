"""Finding the Lua in a reply.

The rule, in order:

1. A reply that is, as a whole, a JSON object with a string field ``lua`` (the envelope
   ``{"lua": "..."}``) gives that string.
2. Otherwise the fenced blocks are found (three or more backticks or tildes, closed by a
   fence of the same character at least as long; a fence left open at the end of the reply,
   as when a reply is cut off, runs to the end).
3. Blocks labelled ``lua`` (``lua``, ``luajit``, ``lua5.1``, any label starting with
   ``lua``) win, and among several the **last** one: a reply that shows the broken code
   and then the fix ends with the fix.
4. With no ``lua`` block: the last ``json`` or unlabelled block that holds the envelope;
   then the last unlabelled block.
5. Blocks labelled with another language are never taken. Nothing found is no code, which
   the loop feeds back to the model as a failure of its own kind (``no_code``).

Reasoning never reaches this module: the clients keep it apart, and any ``<think>`` block
still in the text is dropped first. A reasoning tag is one wherever it stands, inside a
fenced block too (the clients' streaming split reads it before any fence is seen): code
that needs the text ``<think>`` writes it in two parts (``'<' .. 'think>'``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

from ._reasoning import split_reasoning

__all__ = ["Extraction", "extract_lua"]

_OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n]*)$")

Origin = Literal["json", "fence", "unlabelled_fence"]


@dataclass(frozen=True, slots=True)
class Extraction:
    """The code found in a reply.

    Attributes:
        code: the Lua source.
        origin: ``json`` (an envelope), ``fence`` (a ``lua`` block) or
            ``unlabelled_fence``.
        blocks: how many fenced blocks the reply held (the loop mentions extra ones).
    """

    code: str
    origin: Origin
    blocks: int


@dataclass(frozen=True, slots=True)
class _Block:
    label: str
    body: str


def extract_lua(text: str) -> Extraction | None:
    """The Lua of a reply by the rule above, or ``None`` when it holds no code."""
    # A reply that is one JSON envelope as a whole is taken as it is, before any reasoning
    # tags are looked for: its code may itself contain "<think>" (found by a property test).
    envelope = _envelope(text)
    if envelope is None and "think>" in text:
        text, _ = split_reasoning(text)
        envelope = _envelope(text)
    if envelope is not None:
        return Extraction(envelope, "json", 0)
    blocks = _blocks(text)
    lua = [b for b in blocks if b.label.startswith("lua")]
    if lua:
        return Extraction(lua[-1].body, "fence", len(blocks))
    for block in reversed(blocks):
        if block.label in ("", "json"):
            envelope = _envelope(block.body)
            if envelope is not None:
                return Extraction(envelope, "json", len(blocks))
    plain = [b for b in blocks if b.label == ""]
    if plain:
        return Extraction(plain[-1].body, "unlabelled_fence", len(blocks))
    return None


def _envelope(text: str) -> str | None:
    stripped = text.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return None
    try:
        payload = json.loads(stripped)
    except ValueError:
        return None
    if isinstance(payload, dict) and isinstance(payload.get("lua"), str):
        return payload["lua"]
    return None


def _blocks(text: str) -> list[_Block]:
    blocks: list[_Block] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        match = _OPEN.match(lines[i].rstrip("\r"))
        if match is None or (match["fence"][0] == "`" and "`" in match["info"]):
            i += 1
            continue
        fence = match["fence"]
        label = match["info"].strip().split(" ")[0].strip("{}.").lower() if match["info"] else ""
        closing = re.compile(r"^ {0,3}" + re.escape(fence[0]) + "{" + str(len(fence))
                             + r",}[ \t]*$")
        body: list[str] = []
        i += 1
        while i < len(lines) and not closing.match(lines[i].rstrip("\r")):
            body.append(lines[i])
            i += 1
        i += 1  # past the closing fence (or the end)
        blocks.append(_Block(label, "\n".join(body)))
    return blocks
