"""Permissions: which bindings a mod may call, may call after asking, or never sees.

A mod's :class:`Permissions` is a mode plus per-binding rules. The mode gives the decision
for each risk level; a rule overrides it for one binding (an exact name) or a family
(``prefix*``). An exact name beats every prefix rule, and among prefix rules the longest
prefix wins, so ``{"coreai_world_*": "ask", "coreai_world_pos": "allow"}`` reads the way
it is written.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

__all__ = ["Decision", "MODES", "Mode", "Permissions", "Risk"]

Risk = Literal["read", "write", "danger"]
Mode = Literal["readonly", "ask", "auto", "full"]
Decision = Literal["allow", "ask", "deny"]

# What each mode decides for each risk level, before any rule.
MODES: dict[str, dict[str, Decision]] = {
    "readonly": {"read": "allow", "write": "deny", "danger": "deny"},
    "ask": {"read": "allow", "write": "ask", "danger": "ask"},
    "auto": {"read": "allow", "write": "allow", "danger": "ask"},
    "full": {"read": "allow", "write": "allow", "danger": "allow"},
}

_PATTERN = re.compile(r"^[A-Za-z0-9_]{0,64}\*$|^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class Permissions(BaseModel):
    """A mod's permissions: a mode and per-binding rules.

    Attributes:
        mode: ``readonly`` (read allowed; write and danger denied), ``ask`` (read allowed;
            write and danger ask), ``auto`` (read and write allowed; danger asks) or
            ``full`` (everything allowed).
        rules: binding name or ``prefix*`` -> ``allow``, ``ask`` or ``deny``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Mode = "auto"
    rules: dict[str, Decision] = {}

    @field_validator("rules")
    @classmethod
    def _check_patterns(cls, rules: dict[str, Decision]) -> dict[str, Decision]:
        for pattern in rules:
            if not _PATTERN.match(pattern):
                raise ValueError(
                    f"rule {pattern!r}: use a binding name or a name prefix ending in '*'"
                )
        return rules

    def decide(self, name: str, risk: Risk) -> Decision:
        """The decision for binding ``name`` of the given risk level."""
        rules = self.rules
        exact = rules.get(name)
        if exact is not None:
            return exact
        best: Decision | None = None
        best_len = -1
        for pattern, decision in rules.items():
            if pattern[-1] == "*" and len(pattern) > best_len and name.startswith(pattern[:-1]):
                best, best_len = decision, len(pattern)
        if best is not None:
            return best
        return MODES[self.mode][risk]

    def with_rules(self, **rules: Decision) -> Permissions:
        """A copy with these rules added (``prefix*`` rules: pass them in a dict with ``**``)."""
        return Permissions(mode=self.mode, rules={**self.rules, **rules})
