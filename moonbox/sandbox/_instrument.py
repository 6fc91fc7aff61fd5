"""Source instrumentation: a budget check at every loop body, function entry and ``goto``.

LuaJIT never runs debug hooks inside compiled traces, so a count hook cannot stop a hot
loop with the JIT on. Instead the instrumenter writes the check into the source, where the
JIT compiles it along with the loop:

    N[0]=N[0]-1 if N[0]<0 then S()end

``N`` is a one-slot FFI ``int32_t`` array (the step window) and ``S`` the meter's slow path;
both are parameters of a wrapper function around the mod's chunk, named with a per-sandbox
random suffix, so no mod code can name them (``__mb``-prefixed names are refused outright).

Where the checks go, and why that covers every loop:

- after every ``do`` (``while``/``for`` bodies, and plain blocks, where it is merely one more
  step) and every ``repeat``: each iteration of every loop statement passes one;
- at the start of every ``function`` body (before its first token, so on that token's line):
  recursion, mutual recursion, tail calls and callbacks from C (``sort`` comparators, ``gsub``
  functions, metamethods) pass one;
- before every ``goto``: the back-edge of a goto loop is the ``goto`` itself. A check after
  the *label* would break Lua's rule that a label at the end of a block is outside the scope
  of the block's locals, so the check sits on the jump instead.

Each check charges its body's weight: one step, plus one per :data:`TOKENS_PER_STEP` tokens
of straight-line code in that body, so a huge loop-free function called in a loop cannot run
far more work per step than an ordinary one (the meter reads the clock every K steps).

No newline is ever inserted, so every line number a mod sees in an error is its own.
"""

from __future__ import annotations

import sys
import threading
from array import array
from collections import OrderedDict
from dataclasses import dataclass

from ._tokenizer import Token, TokenKind, tokenize

__all__ = ["RESERVED_PREFIX", "ReservedNameError", "Instrumented", "instrument"]

RESERVED_PREFIX = "__mb"

# A check charges one step per this many tokens of straight-line code in its body (loops and
# nested functions apart, they have checks of their own), at least one: bodies of ordinary
# size cost exactly one step, and a step is never more than a bounded amount of work.
TOKENS_PER_STEP = 64

# Tokens after which a ``goto NAME`` starts a statement (it ends a statement or opens a
# block). After anything else (``=``, ``,``, an operator, ``return``...) ``goto`` is an
# ordinary variable name in LuaJIT.
_STATEMENT_BOUNDARY_OPS = frozenset({";", ")", "]", "}", "::", "..."})
_STATEMENT_BOUNDARY_KEYWORDS = frozenset(
    {"do", "then", "else", "repeat", "end", "break", "nil", "true", "false"}
)


class ReservedNameError(ValueError):
    """The source uses an identifier reserved for the instrumenter."""

    def __init__(self, name: str, line: int) -> None:
        super().__init__(
            f"line {line}: the name '{name}' is reserved by moonbox "
            f"(names starting with '{RESERVED_PREFIX}' cannot be used in mods)"
        )
        self.name = name
        self.line = line


@dataclass(frozen=True, slots=True)
class Instrumented:
    """Instrumented chunk text and how many checks it holds.

    ``source`` is a chunk that returns the mod's main function with two leading parameters:
    call it as ``main(cell, slow, ...)``. One function level is added, no line.
    """

    source: str
    checks: int


def check_text(cell: str, slow: str, weight: int = 1) -> str:
    """The inline check inserted at each metering point, charging ``weight`` steps."""
    return f" {cell}[0]={cell}[0]-{weight} if {cell}[0]<0 then {slow}()end "


def _statement_position(prev: Token | None) -> bool:
    if prev is None:
        return True
    if prev.kind in (TokenKind.NAME, TokenKind.NUMBER, TokenKind.STRING):
        return True
    if prev.kind is TokenKind.KEYWORD:
        return prev.text in _STATEMENT_BOUNDARY_KEYWORDS
    return prev.text in _STATEMENT_BOUNDARY_OPS


def _strip_header(src: str) -> str:
    # LuaJIT skips a UTF-8 byte order mark and a first line starting with '#'. The wrapper
    # puts text before the chunk, so do the same here, keeping the line break.
    if src.startswith("\ufeff"):
        src = src[1:]
    if src.startswith("#"):
        cut = 0
        while cut < len(src) and src[cut] not in "\r\n":
            cut += 1
        src = src[cut:]
    return src


def instrument(src: str, *, cell: str, slow: str) -> Instrumented:
    """Insert budget checks into Lua source and wrap it to receive the meter.

    ``cell`` and ``slow`` are the names the checks use; they must start with
    :data:`RESERVED_PREFIX`.

    Raises:
        LuaTokenError: the source is not lexically valid.
        ReservedNameError: the source names a reserved identifier.
        ValueError: a ``function`` without a parameter list (the source is not valid Lua).
    """
    if not (cell.startswith(RESERVED_PREFIX) and slow.startswith(RESERVED_PREFIX)):
        raise ValueError("meter names must use the reserved prefix")
    src, offsets, weights = _plans.plan(src)
    parts = [f"return function({cell},{slow},...) "]
    last = 0
    for offset, weight in zip(offsets, weights, strict=True):
        parts.append(src[last:offset])
        parts.append(check_text(cell, slow, weight))
        last = offset
    parts.append(src[last:])
    parts.append("\nend")
    return Instrumented("".join(parts), len(offsets))


Plan = tuple[str, "array[int]", "array[int]"]


class _PlanCache:
    """The plans of sources instrumented more than once, least recently used out first.

    Where the checks go depends on the source alone (each sandbox only names the meter its
    own way), and finding them is most of instrumenting: a game instruments the engine's
    runtime chunk for every mod it loads, and a mod again when it is rebuilt or reloaded.
    Sources are mods' text, so the cache must not become a way to grow the host: a plan is
    kept only for a source seen before (one-off texts, such as a package's modules wrapped
    under a one-off name, never take room), and what is kept is bounded in bytes, each
    entry's own overhead included, and in entries.

    Args:
        max_bytes: the most memory the kept plans may hold (their sources included).
        max_entries: the most plans kept.
        max_seen: how many sources seen once are remembered (by hash only).
    """

    ENTRY_BYTES = 512  # a kept plan's own objects: its tuple, arrays, the ordered-dict node

    def __init__(self, max_bytes: int, max_entries: int = 256, max_seen: int = 4096) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.max_seen = max_seen
        self._plans: OrderedDict[str, tuple[Plan, int]] = OrderedDict()
        self._seen: OrderedDict[int, None] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @classmethod
    def bytes_of(cls, src: str, plan: Plan) -> int:
        """What keeping ``plan`` for ``src`` holds in memory."""
        stripped, offsets, weights = plan
        held = sys.getsizeof(src) + cls.ENTRY_BYTES
        if stripped is not src:
            held += sys.getsizeof(stripped)
        return held + (len(offsets) + len(weights)) * offsets.itemsize

    def plan(self, src: str) -> Plan:
        key = hash(src)
        with self._lock:
            kept = self._plans.get(src)
            if kept is not None:
                self._plans.move_to_end(src)
                return kept[0]
            seen = key in self._seen
            if seen:
                del self._seen[key]
            else:
                self._seen[key] = None
                if len(self._seen) > self.max_seen:
                    self._seen.popitem(last=False)
        plan = _plan_of(src)
        if not seen:
            return plan
        held = self.bytes_of(src, plan)
        if held <= self.max_bytes // 4:  # one source never takes most of the room
            with self._lock:
                if src not in self._plans:
                    self._plans[src] = (plan, held)
                    self._bytes += held
                    while self._bytes > self.max_bytes or len(self._plans) > self.max_entries:
                        _, (_, old) = self._plans.popitem(last=False)
                        self._bytes -= old
        return plan

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()
            self._seen.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._plans)

    def __contains__(self, src: object) -> bool:
        return src in self._plans

    @property
    def bytes(self) -> int:
        """What the kept plans hold now, in bytes."""
        return self._bytes


# 8 MiB at most (the engine's runtime chunk is ~9k characters, ~30 KiB kept).
PLAN_CACHE_MAX_BYTES = 8 << 20
_plans = _PlanCache(PLAN_CACHE_MAX_BYTES)


def _plan_of(src: str) -> Plan:
    """The source without its header line, and where its checks go: their offsets and
    weights.

    Raises: as :func:`instrument`.
    """
    src = _strip_header(src)
    tokens = tokenize(src)
    # Each check point opens a region (a function or loop body); each token counts toward
    # the innermost region it is in, nested regions apart. A check charges its region's
    # weight, so a step stays a bounded amount of straight-line work.
    inserts: list[tuple[int, int | None]] = []  # (offset, region; None for a goto check)
    region_tokens = [0]  # region 0: the chunk's top level, which runs once
    stack = [0]  # the region of each open block (`if` blocks share their parent's)
    prev: Token | None = None
    count = len(tokens)
    i = 0
    while i < count:
        tok = tokens[i]
        region_tokens[stack[-1]] += 1
        if tok.kind is TokenKind.NAME:
            if tok.text.startswith(RESERVED_PREFIX):
                raise ReservedNameError(tok.text, tok.line)
            if (
                tok.text == "goto"
                and i + 1 < count
                and tokens[i + 1].kind is TokenKind.NAME
                and _statement_position(prev)
            ):
                inserts.append((tok.start, None))
        elif tok.kind is TokenKind.KEYWORD:
            text = tok.text
            if text in ("do", "repeat"):
                stack.append(len(region_tokens))
                inserts.append((tok.end, len(region_tokens)))
                region_tokens.append(0)
            elif text == "function":
                j = i + 1
                while j < count and not (
                    tokens[j].kind is TokenKind.OP and tokens[j].text == "("
                ):
                    j += 1
                while j < count and not (
                    tokens[j].kind is TokenKind.OP and tokens[j].text == ")"
                ):
                    j += 1
                if j >= count:
                    raise ValueError(f"line {tok.line}: function without a parameter list")
                # On the line of the body's first token: LuaJIT reports a stack overflow at
                # a function's first instruction, which is then the check.
                stack.append(len(region_tokens))
                inserts.append((tokens[j + 1].start if j + 1 < count else tokens[j].end,
                                len(region_tokens)))
                region_tokens.append(0)
            elif text == "if":
                stack.append(stack[-1])
            elif text in ("end", "until") and len(stack) > 1:
                stack.pop()
        prev = tok
        i += 1
    offsets = array("q", [offset for offset, _ in inserts])
    weights = array("q", [1 if region is None else 1 + region_tokens[region] // TOKENS_PER_STEP
                          for _, region in inserts])
    return src, offsets, weights
