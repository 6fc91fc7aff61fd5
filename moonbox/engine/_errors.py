"""The engine's error type."""

from __future__ import annotations

from .._errors import MoonboxError

__all__ = ["EngineError"]


class EngineError(MoonboxError):
    """A game operation the host asked for that cannot be done as asked.

    ``code`` is stable for programs: ``unknown_mod``, ``duplicate_mod``, ``invalid_mod_id``,
    ``closed``.
    """

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code
