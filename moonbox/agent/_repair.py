"""What went wrong with an attempt, and the repair context that tells the model.

A :class:`Failure` is built from the run's outcome (or from a reply with no code, or from
failed acceptance checks) and keeps the facts as fields; :func:`render_repair` writes them
for the model: attempt number, error kind, chunk:line, the mod's own traceback frames, the
failing code with line numbers, the budget or permission that tripped with its limit, the
``report()`` output and the acceptance checks' output.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from .._errors import BudgetExceeded, Frame, ScriptError
from ..bindings import Permissions, Registry

__all__ = [
    "Check",
    "CheckResult",
    "Failure",
    "FailureKind",
    "RunResult",
    "render_repair",
    "run_checks",
]

FailureKind = Literal["syntax", "runtime", "budget", "denied", "check", "no_code", "refused",
                      "swap"]

_MAX_REPORT_LINES = 20
_MAX_REFUSALS = 20
_MAX_VALUE_CHARS = 400
_WHOLE_SCRIPT_LINES = 200
"""A script up to this long is shown whole; a longer one as an outline and a window."""
_WINDOW = 40
"""Lines shown either side of the failing line of a long script."""
_FRESH_START_AFTER = 3
"""After this many failed attempts (two failed repairs), the model may start afresh."""
_OUTLINE = re.compile(r"^\s*(?:local\s+)?function\b|^\s*(?:local\s+)?[A-Za-z_][\w.:]*\s*=\s*"
                      r"function\b|^\s*on\s*\(|^\s*every\s*\(|^\s*after\s*\(")
_NIL_CALL = re.compile(r"attempt to call (?:global|field|method) '([A-Za-z_][A-Za-z0-9_]*)'"
                       r" \(a nil value\)")


class RunResult(Protocol):
    """What a dry run gives back: a :class:`moonbox.Outcome`, or a host's object like it."""

    @property
    def status(self) -> str: ...

    @property
    def values(self) -> tuple[Any, ...]: ...

    @property
    def error(self) -> ScriptError | None: ...

    @property
    def reports(self) -> tuple[str, ...]: ...


Check = Callable[[Any], "bool | str | None"]
"""An acceptance check: called with the run's result after a clean run.

``None`` or ``True`` passes; ``False`` fails; a string fails and is the explanation shown
to the model. Its name (``name`` attribute, else ``__name__``) is shown too.
"""


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One acceptance check's verdict."""

    name: str
    passed: bool
    message: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "passed": self.passed, "message": self.message}


def check_name(check: Check) -> str:
    return str(getattr(check, "name", None) or getattr(check, "__name__", None) or "check")


def run_checks(checks: Sequence[Check], result: Any) -> tuple[CheckResult, ...]:
    """Every check's verdict on ``result`` (a check that raises fails, with the reason)."""
    verdicts = []
    for check in checks:
        name = check_name(check)
        try:
            verdict = check(result)
        except Exception as exc:  # a broken check fails the attempt; it must not pass it
            verdicts.append(CheckResult(name, False, f"the check raised {type(exc).__name__}: "
                                                     f"{exc}"))
            continue
        if verdict is None or verdict is True:
            verdicts.append(CheckResult(name, True))
        elif verdict is False:
            verdicts.append(CheckResult(name, False, "not met"))
        else:
            verdicts.append(CheckResult(name, False, str(verdict)))
    return tuple(verdicts)


@dataclass(frozen=True, slots=True)
class Failure:
    """Why an attempt failed.

    Attributes:
        kind: ``syntax``, ``runtime``, ``budget``, ``denied`` (a binding the permissions
            refuse), ``check`` (ran cleanly, an acceptance check failed), ``refused`` (the
            world refused commands the script issued), ``swap`` (the live game refused
            the version that passed) or ``no_code``.
        message: the error without its position.
        chunk, line: where, when known.
        traceback: the script's own frames, innermost first.
        budget, limit, used: for ``budget``: which budget, its limit and what was used.
        binding: for ``denied``: the binding refused.
        reports: the script's ``report()`` lines before it stopped.
        checks: the acceptance checks' verdicts (``check``; all of them, passed ones too).
        hint: one sentence from the host on where to look, when it has one.
        refused: the world commands refused, each ``{kind, reason, message}``.
        values: what the script returned.
    """

    kind: FailureKind
    message: str
    chunk: str | None = None
    line: int | None = None
    traceback: tuple[Frame, ...] = ()
    budget: str | None = None
    limit: float | None = None
    used: float | None = None
    binding: str | None = None
    reports: tuple[str, ...] = ()
    checks: tuple[CheckResult, ...] = ()
    hint: str | None = None
    refused: tuple[Any, ...] = ()
    values: tuple[Any, ...] = ()

    @property
    def where(self) -> str:
        if self.chunk is None:
            return "?"
        name = self.chunk[1:] if self.chunk[:1] in "@=" else self.chunk
        return f"{name}:{self.line}" if self.line else name

    def summary(self) -> str:
        """One line: kind, place and message."""
        kind = f"budget ({self.budget})" if self.kind == "budget" and self.budget else self.kind
        where = f" at {self.where}" if self.chunk else ""
        return f"{kind}{where}: {self.message}"

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind, "message": self.message, "chunk": self.chunk,
            "line": self.line, "traceback": [f.to_dict() for f in self.traceback],
            "budget": self.budget, "limit": self.limit, "used": self.used,
            "binding": self.binding, "reports": list(self.reports),
            "checks": [c.to_dict() for c in self.checks], "hint": self.hint,
            "refused": [_refusal(r) for r in self.refused],
        }

    @classmethod
    def refusals(cls, refused: Sequence[Any], reports: Sequence[str] = (),
                 values: Sequence[Any] = ()) -> Failure:
        """The world refused commands the script issued (each a ``CommandResult`` or a
        dict with ``kind``, ``reason`` and ``message``)."""
        first = _refusal(refused[0])
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        return cls("refused", f"the world refused {first['kind']}: [{first['reason']}] "
                              f"{first['message']}{more}", reports=tuple(reports),
                   refused=tuple(refused), values=tuple(values),
                   hint="issue only commands the world accepts: check names, prefabs and "
                        "bounds with the read functions first")

    @classmethod
    def no_code(cls, reason: str) -> Failure:
        return cls("no_code", reason, hint="answer with the whole script in one ```lua block")

    @classmethod
    def from_error(
        cls,
        error: ScriptError,
        chunk: str,
        reports: Sequence[str],
        registry: Registry | None = None,
        permissions: Permissions | None = None,
    ) -> Failure:
        """The failure of a run that ended with ``error`` (its own frames kept)."""
        frames = tuple(f for f in error.traceback if f.chunk == chunk)
        line = error.line
        if line is None:
            line = next((f.line for f in frames if f.line), None)
        common: dict[str, Any] = {
            "chunk": error.chunk or chunk, "line": line, "traceback": frames,
            "reports": tuple(reports),
        }
        if isinstance(error, BudgetExceeded):
            return cls("budget", error.message, budget=error.budget, limit=error.limit,
                       used=error.used, hint=_BUDGET_HINTS.get(error.budget), **common)
        if error.kind == "denied":
            name = error.message.split(":", 1)[0].strip() or None
            return cls("denied", error.message, binding=name,
                       hint=_denied_hint(name, permissions), **common)
        match = _NIL_CALL.search(error.message)
        if error.kind == "runtime" and match and registry is not None:
            name = match.group(1)
            if name in registry:
                return cls("denied", error.message, binding=name,
                           hint=_denied_hint(name, permissions), **common)
            return cls("runtime", error.message, hint=(
                f"{name!r} does not exist here: only the standard library and the mod API "
                "listed above do"), **common)
        kind: FailureKind = "syntax" if error.kind == "syntax" else "runtime"
        return cls(kind, error.message, **common)


_BUDGET_HINTS = {
    "steps": "the script ran too many steps: bound every loop and do less work per run",
    "memory": "the script allocated too much: build less data, and no huge strings or tables",
    "time": "the script ran too long: bound every loop and do less work per run",
}


def _denied_hint(name: str | None, permissions: Permissions | None) -> str:
    mode = f" (mode {permissions.mode})" if permissions is not None else ""
    subject = f"{name!r} is" if name else "this function is"
    return (f"{subject} denied by this script's permissions{mode}: do the task without it, "
            "using only the functions the mod API lists")


def _refusal(item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        return {"kind": item.get("kind", "?"), "reason": item.get("reason"),
                "message": item.get("message", "")}
    return {"kind": getattr(item, "kind", "?"), "reason": getattr(item, "reason", None),
            "message": getattr(item, "message", "")}


def render_repair(attempt: int, attempts_allowed: int, code: str | None,
                  failure: Failure, *, earlier: Sequence[Failure] = ()) -> str:
    """The repair context for the next request, after attempt ``attempt`` failed.

    ``earlier``: the failures of the attempts before it, oldest first (one line each).
    """
    out = [f"## Attempt {attempt} of {attempts_allowed} failed", ""]
    out.append(f"Error kind: {failure.kind}")
    if failure.kind == "budget" and failure.budget:
        out.append(f"Budget that ran out: {failure.budget} (limit {_figure(failure.limit)}, "
                   f"used {_figure(failure.used)})")
    if failure.kind == "denied" and failure.binding:
        out.append(f"Permission that refused it: {failure.binding} is denied")
    if failure.chunk:
        out.append(f"Where: {failure.where}")
    out.append(f"Error: {failure.message}")
    if failure.hint:
        out.append(f"Hint: {failure.hint}")
    if failure.traceback:
        out += ["", "Traceback (innermost first):"]
        out += [f"  {frame}" for frame in failure.traceback]
    if failure.refused:
        out += ["", "World commands refused (kind [reason] message):"]
        shown_r = [_refusal(r) for r in failure.refused[:_MAX_REFUSALS]]
        out += [f"  - {r['kind']} [{r['reason']}] {r['message']}" for r in shown_r]
        if len(failure.refused) > len(shown_r):
            out.append(f"  ... {len(failure.refused) - len(shown_r)} more")
    failed_checks = [c for c in failure.checks if not c.passed]
    if failed_checks:
        out += ["", "Acceptance checks that failed:"]
        out += [f"  - {c.name}: {c.message}" for c in failed_checks]
    if failure.reports:
        out += ["", "report() output:"]
        shown = failure.reports[:_MAX_REPORT_LINES]
        out += [f"  {line}" for line in shown]
        if len(failure.reports) > len(shown):
            out.append(f"  ... {len(failure.reports) - len(shown)} more lines")
    if failure.kind in ("check", "refused") or failure.values:
        shown_v = repr(list(failure.values))
        if len(shown_v) > _MAX_VALUE_CHARS:
            shown_v = shown_v[:_MAX_VALUE_CHARS] + " ..."
        out += ["", f"What the script returned: {shown_v}"]
    if earlier:
        out += ["", "Earlier attempts:"]
        out += [f"  {n}. {f.summary()}" for n, f in enumerate(earlier, 1)]
    if code is not None:
        out += ["", "The script that failed:", "", "```lua", numbered(code, failure.line),
                "```"]
    if attempt >= _FRESH_START_AFTER:
        out += ["", "Repairs have failed twice: if the approach itself is wrong, you may "
                    "start afresh with a different, simpler script instead of patching."]
    out += ["", "Answer with the whole corrected script in one ```lua block."]
    return "\n".join(out)


def numbered(code: str, mark_line: int | None = None) -> str:
    """The code with line numbers, the line ``mark_line`` marked with ``>>``.

    A script of up to 200 lines is shown whole. A longer one is shown as an outline (its
    function definitions and registrations, numbered) and, whole, the 40 lines either
    side of ``mark_line`` (or its first 80 lines when no line is known).
    """
    lines = code.split("\n")
    width = len(str(len(lines)))

    def row(n: int) -> str:
        return f"{'>>' if n == mark_line else '  '} {n:>{width}} | {lines[n - 1]}"

    if len(lines) <= _WHOLE_SCRIPT_LINES:
        return "\n".join(row(n) for n in range(1, len(lines) + 1))
    if mark_line is not None and 1 <= mark_line <= len(lines):
        first, last = max(1, mark_line - _WINDOW), min(len(lines), mark_line + _WINDOW)
    else:
        first, last = 1, min(len(lines), 2 * _WINDOW)
    out = [f"-- outline of all {len(lines)} lines:"]
    out += [row(n) for n in range(1, len(lines) + 1)
            if _OUTLINE.search(lines[n - 1]) and not first <= n <= last]
    out.append(f"-- lines {first} to {last}:")
    out += [row(n) for n in range(first, last + 1)]
    if last < len(lines):
        out.append(f"   ... lines {last + 1} to {len(lines)} not shown")
    return "\n".join(out)


def _figure(value: float | None) -> str:
    if value is None:
        return "?"
    if isinstance(value, float):
        return f"{value:g}"
    return f"{value:,}"
