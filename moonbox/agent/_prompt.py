"""Prompt assembly in layers: a stable prefix, then a volatile tail.

The **prefix** (the system message) holds the universal rules, the role prompt, the host's
additions, the standard library the sandbox allows, the budgets, and the mod API rendered
from the bindings registry for the permissions the script will run with. It is built once
per :class:`PromptBuilder` and is byte-identical across every request of that role, so a
server that caches a shared prompt prefix reuses it on every repair round.

The **tail** (the user message) holds what changes: the world state summary, the task, and
on a repair round the repair context.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, Literal

from ..bindings import Permissions, Registry, render_stubs
from ..sandbox import ALLOWED_GLOBALS, ALLOWED_LIBRARIES, Budget
from ._client import Message

__all__ = ["ApiStyle", "PromptBuilder", "role_prompt", "universal_rules"]

ApiStyle = Literal["compact", "stubs"]

_DEFAULT_SHOWN_CHARS = 40


def universal_rules() -> str:
    """The rules every role's prompt starts with (``prompts/universal.md``)."""
    return _read("universal.md")


def role_prompt(role: str) -> str:
    """The shipped prompt of a role (``prompts/<role>.md``).

    Raises:
        FileNotFoundError: no prompt ships for that role.
    """
    return _read(f"{role}.md")


def _read(name: str) -> str:
    return resources.files(__package__).joinpath("prompts").joinpath(name).read_text("utf-8").strip()


class PromptBuilder:
    """The messages of one role's requests.

    Args:
        registry: the bindings registry the scripts will run against.
        permissions: the permissions the scripts will run with; the mod API shows what
            they grant, and which functions they deny.
        budget: the budget each run gets (shown to the model).
        role: the role; its prompt ships as ``prompts/<role>.md`` unless ``role_text``
            is given.
        role_text: the role prompt, instead of the shipped one.
        host_rules: the host's additions (game lore, naming rules, style), kept in the
            prefix.
        api_style: ``compact`` (one line per function) or ``stubs`` (the LuaLS annotation
            file ``moonbox stubs`` writes).
    """

    def __init__(
        self,
        registry: Registry,
        permissions: Permissions,
        *,
        budget: Budget,
        role: str = "programmer",
        role_text: str | None = None,
        host_rules: str = "",
        api_style: ApiStyle = "compact",
    ) -> None:
        self.registry = registry
        self.permissions = permissions
        self.budget = budget
        self.role = role
        parts = [universal_rules(), (role_text if role_text is not None
                                     else role_prompt(role)).strip()]
        if host_rules.strip():
            parts.append("## Host rules\n\n" + host_rules.strip())
        parts.append(_stdlib())
        parts.append(_budgets(budget))
        parts.append(_api(registry, permissions, api_style))
        self._prefix = "\n\n".join(parts) + "\n"

    @property
    def prefix(self) -> str:
        """The stable prefix: the same bytes for every request of this builder."""
        return self._prefix

    def tail(self, task: str, *, world_summary: str = "", repair: str = "") -> str:
        """The volatile part: world state, task, repair context."""
        parts = []
        if world_summary.strip():
            parts.append("## World state\n\n" + world_summary.strip())
        parts.append("## Task\n\n" + task.strip())
        if repair:
            parts.append(repair.strip())
        return "\n\n".join(parts) + "\n"

    def messages(self, task: str, *, world_summary: str = "", repair: str = "") -> list[Message]:
        """``[system: prefix, user: tail]`` for one request."""
        return [Message("system", self._prefix),
                Message("user", self.tail(task, world_summary=world_summary, repair=repair))]


def _stdlib() -> str:
    lines = ["## Standard library", "", "Globals: " + ", ".join(sorted(ALLOWED_GLOBALS)) + "."]
    for library in sorted(ALLOWED_LIBRARIES):
        names = ", ".join(sorted(ALLOWED_LIBRARIES[library]))
        lines.append(f"{library}: {names}.")
    return "\n".join(lines)


def _budgets(budget: Budget) -> str:
    lines = [
        "## Budgets (each run)",
        "",
        f"- steps: {budget.steps:,} (one per loop iteration, function call or goto, plus "
        "what mod API functions cost)",
        f"- new memory: {_bytes(budget.alloc_bytes)}",
        f"- wall time: {budget.wall_s:g} s",
        f"- heap cap: {_bytes(budget.max_memory)}",
    ]
    return "\n".join(lines)


def _bytes(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size:,} {unit}"
    return f"{n:,} bytes"


_APPROVAL_CODES = ("not_approved", "approval_timed_out", "approval_cancelled")
_REFUSALS = (
    "A refused call fails with one line ending in a stable [code] (pcall catches it). Any "
    "call may meet [invalid_arguments] (an argument does not fit), [vetoed] (a hook of the "
    "host said no), [unavailable] or [aborted] (the function was removed before or while it "
    "ran) and [failed]; codes of the host's own read [namespace:name]."
)


def _api(registry: Registry, permissions: Permissions, style: ApiStyle) -> str:
    if style == "stubs":
        stubs = render_stubs(registry, permissions)
        return "## Mod API (LuaLS annotations)\n\n```lua\n" + stubs.rstrip() + "\n```"
    lines = ["## Mod API", "",
             "Each function also takes its arguments as one table: name{a = 1, b = 2}.", ""]
    denied: list[str] = []
    for binding, decision in registry.granted(permissions):
        if decision == "deny":
            denied.append(binding.name)
            continue
        line = f"- {binding.name}({_signature(binding.args.model_json_schema())})"
        if binding.description:
            line += f": {binding.description}"
        notes = [f"{binding.risk}", f"{binding.cost} step{'s' if binding.cost != 1 else ''}"]
        if decision == "ask":
            notes.append("asks the host first and may be refused: "
                         + ", ".join(f"[{c}]" for c in _APPROVAL_CODES))
        if binding.prepare is not None:
            notes.append("checks its target first: [refused] when there is none")
        if binding.codes:
            notes.append("its own codes: " + ", ".join(f"[{c}]" for c in binding.codes))
        lines.append(f"{line} [{'; '.join(notes)}]")
    if denied:
        lines += ["", "Denied to this script (do not call): " + ", ".join(denied) + "."]
    lines += ["", _REFUSALS]
    return "\n".join(lines)


def _signature(schema: dict[str, Any]) -> str:
    required = set(schema.get("required", ()))
    parts = []
    for name, field in schema.get("properties", {}).items():
        kind = _lua_type(field)
        if name in required:
            parts.append(f"{name}: {kind}")
            continue
        if "|" in kind:  # optional already says it may be nil
            kind = "|".join(k for k in kind.split("|") if k != "nil")
        text = f"{name}?: {kind}"
        default = field.get("default")
        if default is not None:
            shown = json.dumps(default)
            if len(shown) <= _DEFAULT_SHOWN_CHARS:
                text += f" = {shown}"
        parts.append(text)
    return ", ".join(parts)


def _lua_type(field: dict[str, Any]) -> str:
    if "anyOf" in field:
        kinds = dict.fromkeys(_lua_type(option) for option in field["anyOf"])
        return "|".join(kinds)
    kind = field.get("type")
    if kind is None:
        return "table" if "$ref" in field else "any"
    return {"integer": "integer", "number": "number", "string": "string",
            "boolean": "boolean", "null": "nil", "array": "table",
            "object": "table"}.get(kind, "any")
