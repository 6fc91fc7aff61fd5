"""Source instrumentation: a budget check at every loop body, function entry and ``goto``,
and through long straight-line code.

LuaJIT never runs debug hooks inside compiled traces, so a count hook cannot stop a hot
loop with the JIT on. Instead the instrumenter writes the check into the source, where the
JIT compiles it along with the loop:

    N[0]=N[0]-1 if N[0]<P[0] then S()end

``N`` is an FFI ``int32_t`` array whose slot 0 is the step window, ``P`` a pointer to its
slot 1, the poll flag (0, or far above any window when the host's alarm asks for a poll
now), and ``S`` the meter's slow path. The JIT cannot prove ``P[0]`` distinct from
``N[0]``, so a compiled loop loads the flag again after every store to the window, and
stops at its next check once the alarm sets it (docs/metering.md). All three are
parameters of a wrapper function around the mod's chunk, named with a per-sandbox random
suffix, so no mod code can name them (``__mb``-prefixed names are refused outright).

Where the checks go, and why that covers every loop:

- after every ``do`` (``while``/``for`` bodies, and plain blocks, where it is merely one more
  step) and every ``repeat``: each iteration of every loop statement passes one. A ``while``
  or ``for`` body of one statement that calls something (and holds no loop, function, label,
  ``goto``, ``return`` or ``break``) has it after that statement instead, where every
  iteration that goes on passes it too (see ``loop_check`` in :func:`_plan_of`);
- at the start of every ``function`` body (before its first token, so on that token's line):
  recursion, mutual recursion, tail calls and callbacks from C (``sort`` comparators, ``gsub``
  functions, metamethods) pass one. The entry of a function that calls nothing (its nested
  functions apart) charges without testing the window: the next full check comes within a
  bounded amount of work (see :func:`_plan_of`). A body that begins with ``if <condition>
  then return <values> end`` calling nothing, at most :data:`TOKENS_PER_STEP` tokens, has
  its check after that statement: only the calls that go on pass it (see ``clause_end`` in
  :func:`_plan_of`);
- before every ``goto``: the back-edge of a goto loop is the ``goto`` itself. A check right
  after the *label* would break Lua's rule that a label at the end of a block is outside the
  scope of the block's locals, so the check sits on the jump instead;
- at a statement start inside any block, the main chunk's top level included, once the
  straight-line code since the block's last check holds :data:`SEGMENT_TOKENS` tokens, and
  at the first statement after a label (where a ``goto`` lands; a label that ends its block
  has no statement after it, and no check): code that runs once but is long, or that a goto
  loop repeats, passes checks as often as a loop does.

Each check charges the code it stands before, so a step is a bounded amount of work (the
meter reads the clock every K steps): one step per :data:`TOKENS_PER_STEP` tokens of
straight-line code up to the next check (loops and nested functions apart, they have checks
of their own), plus one step for a loop iteration, a function entry or a ``goto``. A loop's
check also charges what the loop repeats before its body: a ``while`` condition, a
``repeat ... until`` condition (a numeric ``for``'s limits and a generic ``for``'s explist run
once, in the code around the loop). A check that would charge nothing (the top level of a
short chunk) is left out.

The planner is one pass over the tokens, never looking further ahead than the next one: its
work is linear in the source, valid or not, so no text can make loading a mod stall the
host. No newline is ever inserted, so every line number a mod sees in an error is its own.
"""

from __future__ import annotations

import sys
import threading
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ._parser_limits import check_parser_limits
from ._tokenizer import Token, TokenKind, tokenize

__all__ = [
    "RESERVED_PREFIX", "SEGMENT_TOKENS", "TOKENS_PER_STEP", "ReservedNameError", "Instrumented",
    "instrument",
]

RESERVED_PREFIX = "__mb"

# A check charges one step per this many tokens of the straight-line code it stands before
# (loops and nested functions apart, they have checks of their own), plus one for a loop
# iteration, a function entry or a goto: bodies of ordinary size cost exactly one step, and
# a step is never more than a bounded amount of work.
TOKENS_PER_STEP = 64

# A block's straight-line code passes a check at least every this many tokens (or one
# statement, where a statement is longer): the next statement start after a segment this
# long gets a check of its own, so code that runs once but is long (a main chunk of
# thousands of lines) lets the meter poll the clock as a loop does.
SEGMENT_TOKENS = 4 * TOKENS_PER_STEP

# The most a single check charges: the cell is a 32-bit integer and a check's weight stays
# far below 2^24 (see prelude.lua); no source that fits in memory comes near it.
MAX_WEIGHT = (1 << 24) - 1


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

    ``source`` is a chunk that returns the mod's main function with three leading
    parameters: call it as ``main(cell, poll, slow, ...)``. One function level is added, no line.
    """

    source: str
    checks: int


def check_text(cell: str, poll: str, slow: str, weight: int = 1) -> str:
    """The inline check inserted at each metering point, charging ``weight`` steps; a
    negative weight is the entry of a function that calls nothing (see :func:`_plan_of`):
    it charges ``-weight`` steps and leaves the test of the window to the next check."""
    if weight < 0:
        return f" {cell}[0]={cell}[0]-{-weight} "
    return f" {cell}[0]={cell}[0]-{weight} if {cell}[0]<{poll}[0] then {slow}()end "


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


def instrument(src: str, *, cell: str, poll: str, slow: str) -> Instrumented:
    """Insert budget checks into Lua source and wrap it to receive the meter.

    ``cell``, ``poll`` and ``slow`` are the names the checks use; they must start with
    :data:`RESERVED_PREFIX`.

    Raises:
        LuaTokenError: the source is not lexically valid.
        ReservedNameError: the source names a reserved identifier.
        ValueError: a ``function`` without a parameter list (the source is not valid Lua).
    """
    if not all(name.startswith(RESERVED_PREFIX) for name in (cell, poll, slow)):
        raise ValueError("meter names must use the reserved prefix")
    src, offsets, weights = _plans.plan(src)
    parts = [f"return function({cell},{poll},{slow},...) "]
    last = 0
    for offset, weight in zip(offsets, weights, strict=True):
        parts.append(src[last:offset])
        parts.append(check_text(cell, poll, slow, weight))
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


# -- the plan: one pass over the tokens ----------------------------------------------------
#
# The planner follows Lua's statement structure with a stack of frames and a little state,
# one step per token, never looking further ahead than the next token: its work is linear
# in the source, valid or not (a mod controls its text, and a pass that rescans would let it
# stall the host before it runs). It does not check the grammar: the source is compiled
# unchanged first, so for invalid Lua it only has to stop, with a ValueError when it loses
# its way. For valid Lua it must find every loop body, function body and `goto`, and the
# statement starts where a check may go; where it cannot tell, it inserts nothing.

# Frame kinds. A block holds statements; the other frames sit inside one statement.
_CHUNK, _FUNCTION, _LOOP, _DO, _REPEAT, _IF = range(6)  # blocks (_IF: a branch's body)
_IF_HEAD, _WHILE_HEAD, _FOR_HEAD, _UNTIL = range(6, 10)  # a condition or a loop header
_PAREN, _BRACKET, _BRACE = range(10, 13)
_FUNCTION_NAME, _PARAMETERS = range(13, 15)  # `function a.b:c` and its `(...)`

# Where the scan is within a statement.
_OPERAND = 0  # an operand comes next (after an operator, `=`, `,`, `(`, `return`, ...)
_PREFIX = 1  # after a name, call, index or parenthesis: `(`, a string or `{` calls it
_DONE = 2  # after a literal, an `end`, a label...: `(` here starts the next statement
_LOCAL = 3  # after `local`
_GOTO = 4  # after the `goto` of a goto statement
_LABEL = 5  # after a label's opening `::`
_LABEL_NAME = 6  # after a label's name

_STATEMENT_KEYWORDS = frozenset(
    {"local", "if", "while", "for", "repeat", "return", "break", "do", "function"}
)
_CLOSERS = frozenset({"end", "else", "elseif", "until"})
_BINARY_OPS = frozenset({"+", "-", "*", "/", "%", "^", "..", "==", "~=", "<", "<=", ">", ">=",
                         "=", ",", ".", ":"})  # fmt: skip
_CLOSE_OF = {")": _PAREN, "]": _BRACKET, "}": _BRACE}


class _Frame:
    """One open construct. ``cur`` is the accumulator its tokens count toward (a block's
    current segment), ``extra`` a second one or -1 (a ``while`` condition's: the loop
    repeats it), ``dom`` the accumulator of a check that every path through the construct
    passes (an ``if``'s segment before the statement, which charges every branch until a
    branch needs checks of its own; a ``repeat``'s own check, which charges the ``until``
    condition), ``flag`` a block's pending split (after a label) or a brace's being a call's
    argument or a function's having a name."""

    __slots__ = ("kind", "cur", "extra", "dom", "flag", "loop", "lead")

    def __init__(self, kind: int, cur: int, extra: int = -1, flag: bool = False) -> None:
        self.kind = kind
        self.cur = cur
        self.extra = extra
        self.dom = cur
        self.flag = flag
        # A while or for body's: [its check's index, its statements so far, whether they
        # call anything, whether they hold what keeps the check at the start] (see
        # loop_check).
        self.loop: list[Any] | None = None
        # A function body's: whether its next statement may still be a leading clause (see
        # clause_end); an `if` statement's that may be one: [its function's frame, the
        # function bodies opened before it, whether its branch has begun its `return`].
        self.lead: Any = None


def _plan_of(src: str) -> Plan:
    """The source without its header line, and where its checks go: their offsets and
    weights.

    Each check charges the code it stands before: a region check (a loop body's, with the
    loop's `while` or `until` condition, a function body's, a `do` block's) one step plus
    one per :data:`TOKENS_PER_STEP` tokens; a segment check (a long block's, the chunk's top
    level) one step per :data:`TOKENS_PER_STEP` tokens; a ``goto`` check one step. Checks
    that would charge nothing are left out.

    Raises: as :func:`instrument`.
    """
    src = _strip_header(src)
    tokens = tokenize(src)
    check_parser_limits(tokens)
    count = len(tokens)
    NAME, KEYWORD, OP = TokenKind.NAME, TokenKind.KEYWORD, TokenKind.OP
    seg_limit = SEGMENT_TOKENS

    offsets: list[int] = []  # of each check
    loops: list[_Frame] = []  # the while and for bodies open around the scan
    unsorted = False
    # The entry checks of the functions open around the scan, each with whether its body
    # (its nested functions apart) has called anything so far and where the check was
    # first put; call_free: the entry checks of the bodies that call nothing (see the
    # weights below).
    entries: list[list[Any]] = []
    opened = 0  # function bodies opened so far
    call_free: list[int] = []
    bases: list[int] = []  # steps a check charges whatever its tokens
    owners: list[int] = []  # the accumulator each check charges for
    acc = [0]  # token counts; 0: tokens before the chunk's first check (none in valid Lua)

    def add_check(offset: int, base: int, initial: int = 0) -> int:
        offsets.append(offset)
        bases.append(base)
        owners.append(len(acc))
        acc.append(initial)
        return len(acc) - 1

    def clause_end(clause: list[Any], closer: Token) -> None:
        # A function body that begins with `if <condition> then return <values> end` holds
        # its entry check after that statement (after each of several, in turn), when the
        # statement calls nothing, makes no function and is at most TOKENS_PER_STEP tokens
        # long: the path that returns there starts no recursion and no chain of calls (a
        # metamethod it triggers has an entry of its own; a chain of them ends in a stack
        # overflow), and is a bounded piece of straight-line code of its caller's step. A
        # recursion's every call that goes on passes the check. LuaJIT compiles a
        # recursion whose base case is tested before anything else 1.5-2x faster than one
        # whose entry holds a guard of the meter's first (docs/metering.md).
        func, opened_before, returned = clause
        entry = entries[-1]
        index = entry[0]
        if (returned and not entry[1] and opened == opened_before
                and index == len(offsets) - 1 and acc[owners[index]] <= TOKENS_PER_STEP):
            offsets[index] = closer.end
            func.lead = True

    def loop_check(frame: _Frame, closer: Token) -> None:
        # A while or for body's own check goes after `do`, but for a body of one statement
        # that calls something and holds no loop, function, label, goto, return or break:
        # there it goes after that statement. A check before a loop's first call of a
        # closure made anew for each run of the loop makes LuaJIT's side trace for the
        # next closure start mid-body, and every iteration then leaves compiled code
        # (docs/metering.md); after the call, the closure's guard is the loop's first.
        # Made after `do`, it is moved when it goes after the statement: the list of checks
        # then needs sorting only if a check inside the statement came after it.
        nonlocal unsorted
        index, statements, called, kept_first = frame.loop  # type: ignore[misc]
        if statements == 1 and called and not kept_first:
            offsets[index] = closer.start
            if index != len(offsets) - 1:
                unsorted = True
        loops.pop()

    chunk = _Frame(_CHUNK, 0, flag=True)  # the first statement opens the chunk's segment
    stack = [chunk]
    top = chunk
    state = _DONE

    def fail(tok: Token) -> ValueError:
        return ValueError(f"line {tok.line}: unexpected {tok.text[:40]!r}")

    i = 0
    while i < count:
        tok = tokens[i]
        i += 1
        kind = tok.kind
        text = tok.text
        if kind is NAME and text.startswith(RESERVED_PREFIX):
            raise ReservedNameError(text, tok.line)
        k = top.kind
        # Can this token start a statement, were the scan at a block's level?
        start = False
        if 0 < state < 3:  # _PREFIX or _DONE
            if kind is NAME:
                start = True
            elif kind is KEYWORD:
                start = text in _STATEMENT_KEYWORDS
            elif kind is OP:
                start = text == "::" or (text == "(" and state == _DONE)
            if k == _UNTIL and (start or text in _CLOSERS or text == ";"):
                # The `until` condition ends here; the token belongs to the block around.
                stack.pop()
                top = stack[-1]
                k = top.kind
        if k <= _IF:  # a block
            if start:
                clause = None
                if top.lead is not None:  # a function body's first statements
                    if k == _FUNCTION:
                        if top.lead and text == "if":
                            clause = [top, opened, False]
                        top.lead = False
                    elif text == "return" and not top.lead[2]:  # a clause's branch
                        top.lead[2] = True
                    else:
                        top.lead = None
                if text != "::" and (top.flag or acc[top.cur] >= seg_limit):
                    top.cur = add_check(tok.start, 0)
                    top.flag = False
                if k == _LOOP:
                    top.loop[1] += 1  # type: ignore[index]
                    if text in ("return", "break", "goto", "::"):
                        top.loop[3] = True  # type: ignore[index]
                elif loops and text in ("goto", "::"):
                    loops[-1].loop[3] = True  # type: ignore[index]
                acc[top.cur] += 1
                if kind is NAME:
                    if text == "goto" and i < count and tokens[i].kind is NAME:
                        add_check(tok.start, 1)  # the back-edge of a goto loop
                        state = _GOTO
                    else:
                        state = _PREFIX
                elif kind is OP:
                    if text == "::":
                        state = _LABEL
                    else:  # "(": a parenthesised call or assignment
                        top = _Frame(_PAREN, top.cur)
                        stack.append(top)
                        state = _OPERAND
                elif text == "local":
                    state = _LOCAL
                elif text == "if":
                    top = _Frame(_IF_HEAD, top.cur)
                    top.lead = clause
                    stack.append(top)
                    state = _OPERAND
                elif text == "while":
                    if loops:
                        loops[-1].loop[3] = True  # type: ignore[index]
                    acc.append(0)
                    top = _Frame(_WHILE_HEAD, top.cur, len(acc) - 1)
                    stack.append(top)
                    state = _OPERAND
                elif text == "for":
                    if loops:
                        loops[-1].loop[3] = True  # type: ignore[index]
                    top = _Frame(_FOR_HEAD, top.cur)
                    stack.append(top)
                    state = _OPERAND
                elif text in ("repeat", "do"):
                    if loops:
                        loops[-1].loop[3] = True  # type: ignore[index]
                    top = _Frame(_REPEAT if text == "repeat" else _DO, add_check(tok.end, 1))
                    stack.append(top)
                    state = _DONE
                elif text == "function":
                    if loops:
                        loops[-1].loop[3] = True  # type: ignore[index]
                    top = _Frame(_FUNCTION_NAME, top.cur, flag=True)
                    stack.append(top)
                elif text == "return":
                    state = _OPERAND
                else:  # break
                    state = _DONE
                continue
            acc[top.cur] += 1
            if state > _DONE:  # inside `local`, `goto` or a label
                if state == _LOCAL:
                    if kind is NAME:
                        state = _DONE
                    elif text == "function" and kind is KEYWORD:
                        if loops:
                            loops[-1].loop[3] = True  # type: ignore[index]
                        top = _Frame(_FUNCTION_NAME, top.cur, flag=True)
                        stack.append(top)
                    else:
                        raise fail(tok)
                elif state == _LABEL_NAME:
                    if text != "::" or kind is not OP:
                        raise fail(tok)
                    top.flag = True  # a goto may land here: what follows needs its own check
                    state = _DONE
                else:
                    if kind is not NAME:
                        raise fail(tok)
                    state = _DONE if state == _GOTO else _LABEL_NAME
                continue
            if kind is KEYWORD and text in _CLOSERS:
                if text == "end":
                    if k == _CHUNK or k == _REPEAT:
                        raise fail(tok)
                    if k == _FUNCTION:
                        entry, called, first = entries.pop()
                        if not called:
                            call_free.append(entry)
                            # Charged at the entry after all: no path skips the charge.
                            offsets[entry] = first
                    elif k == _LOOP:
                        loop_check(top, tok)
                    elif k == _IF and top.lead is not None:
                        clause_end(top.lead, tok)
                    stack.pop()
                    top = stack[-1]
                    state = _DONE
                elif k == _IF and text == "else":
                    top.lead = None
                    top.cur = top.dom
                    top.flag = False
                    state = _DONE
                elif k == _IF and text == "elseif":
                    top.lead = None
                    top.kind = _IF_HEAD
                    top.cur = top.dom
                    state = _OPERAND
                elif k == _REPEAT and text == "until":
                    # The loop's own check charges the condition: every iteration passes it,
                    # where a goto to a label before `until` skips the body's later ones.
                    top.kind = _UNTIL
                    top.cur = top.dom
                    state = _OPERAND
                else:
                    raise fail(tok)
                continue
            if text == ";":  # (a string's text holds its quotes)
                state = _DONE
                continue
        elif k == _FUNCTION_NAME:
            acc[top.cur] += 1
            if kind is OP and text == "(":
                top.kind = _PARAMETERS
            elif not (top.flag and (kind is NAME or (kind is OP and text in (".", ":")))):
                raise ValueError(f"line {tok.line}: function without a parameter list")
            continue
        elif k == _PARAMETERS:
            acc[top.cur] += 1
            if kind is OP and text == ")":
                if i == count:
                    raise ValueError(f"line {tok.line}: function without a body")
                # On the line of the body's first token: LuaJIT reports a stack overflow at
                # a function's first instruction, which is then the check.
                top.kind = _FUNCTION
                top.cur = add_check(tokens[i].start, 1)
                entries.append([len(offsets) - 1, False, tokens[i].start])
                opened += 1
                top.lead = True  # its first statements may be clauses (see clause_end)
                top.flag = False
                state = _DONE
            elif not (kind is NAME or (kind is OP and text in (",", "..."))):
                raise ValueError(f"line {tok.line}: function without a parameter list")
            continue
        else:
            acc[top.cur] += 1
            if top.extra >= 0:
                acc[top.extra] += 1
        # An expression's token, in a block's statement or inside a frame of one.
        if state == _OPERAND:
            if kind is NAME:
                state = _PREFIX
            elif kind is KEYWORD:
                if text in ("nil", "true", "false"):
                    state = _DONE
                elif text == "function":
                    if loops:
                        loops[-1].loop[3] = True  # type: ignore[index]
                    top = _Frame(_FUNCTION_NAME, top.cur)
                    stack.append(top)
                elif text != "not":
                    raise fail(tok)
            elif kind is OP:
                if text == "(" or text == "[" or text == "{":
                    top = _Frame(_PAREN if text == "(" else _BRACKET if text == "[" else _BRACE,
                                 top.cur, top.extra)
                    stack.append(top)
                elif text == "...":
                    state = _DONE
                elif text in _CLOSE_OF:  # `f()`, `{}`, `{1,}`
                    if _CLOSE_OF[text] != top.kind:
                        raise fail(tok)
                    state = _DONE if text == "}" and not top.flag else _PREFIX
                    stack.pop()
                    top = stack[-1]
                elif text != "-" and text != "#":
                    raise fail(tok)
            else:  # a number or a string
                state = _DONE
            continue
        # After a complete expression (_PREFIX or _DONE): an operator, a call, an index, a
        # closing bracket, or a header's keyword.
        if kind is OP:
            if text in _BINARY_OPS:
                state = _OPERAND
            elif text in _CLOSE_OF:
                if _CLOSE_OF[text] != top.kind:
                    raise fail(tok)
                state = _DONE if text == "}" and not top.flag else _PREFIX
                stack.pop()
                top = stack[-1]
            elif text == "[" or (state == _PREFIX and (text == "(" or text == "{")):
                if text != "[" and entries:
                    entries[-1][1] = True  # a call
                if text != "[" and loops:
                    loops[-1].loop[2] = True  # type: ignore[index]
                top = _Frame(_PAREN if text == "(" else _BRACKET if text == "[" else _BRACE,
                             top.cur, top.extra, flag=text == "{")
                stack.append(top)
                state = _OPERAND
            elif text == ";" and k == _BRACE:
                state = _OPERAND
            else:
                raise fail(tok)
        elif kind is KEYWORD:
            if text == "and" or text == "or":
                state = _OPERAND
            elif text == "do" and (k == _WHILE_HEAD or k == _FOR_HEAD):
                # The body's check charges the body, and a `while` condition, which each
                # iteration evaluates again.
                initial = acc[top.extra] if k == _WHILE_HEAD else 0
                top.kind = _LOOP
                top.cur = top.dom = add_check(tok.end, 1, initial)  # see loop_check
                top.loop = [len(offsets) - 1, 0, False, False]
                loops.append(top)
                top.extra = -1
                top.flag = False
                state = _DONE
            elif text == "then" and k == _IF_HEAD:
                top.kind = _IF
                top.cur = top.dom
                top.flag = False
                state = _DONE
            elif text == "in" and k == _FOR_HEAD:
                state = _OPERAND
            else:
                raise fail(tok)
        elif kind is TokenKind.STRING and state == _PREFIX:
            if entries:
                entries[-1][1] = True  # a call with a string argument
            if loops:
                loops[-1].loop[2] = True  # type: ignore[index]
        else:
            raise fail(tok)
    if top.kind == _UNTIL:
        stack.pop()
    if len(stack) != 1:
        raise ValueError("the source ends inside a block or an expression")
    weights = array("q", [min(MAX_WEIGHT, base + acc[owner] // TOKENS_PER_STEP)
                          for base, owner in zip(bases, owners, strict=True)])
    # The entry of a function that calls nothing (its nested functions apart) charges its
    # steps without testing the window (a negative weight here): such a function starts no
    # recursion and no chain of calls, its loops and gotos have checks of their own, so the
    # next full check (one of its loops', or its caller's next) comes after a bounded amount
    # of work, and sees the charge. A metamethod it triggers is a function with an entry
    # check of its own; a chain of call-free metamethods ends in a stack overflow. In
    # compiled code the entry is one subtraction the JIT folds into the next check.
    for entry in call_free:
        weights[entry] = -weights[entry]
    if unsorted:  # a loop's check placed after checks inside its statement
        order = sorted(range(len(offsets)), key=offsets.__getitem__)
        offsets = [offsets[j] for j in order]
        weights = array("q", [weights[j] for j in order])
    # Several checks at one offset (a goto's and a segment's) become one, a full one if
    # either is; a check that charges nothing is left out.
    kept_offsets = array("q")
    kept_weights = array("q")
    for offset, weight in zip(offsets, weights, strict=True):
        if weight == 0:
            continue
        if kept_offsets and kept_offsets[-1] == offset:
            full = kept_weights[-1] > 0 or weight > 0
            merged = min(MAX_WEIGHT, abs(kept_weights[-1]) + abs(weight))
            kept_weights[-1] = merged if full else -merged
        else:
            kept_offsets.append(offset)
            kept_weights.append(weight)
    return src, kept_offsets, kept_weights
