"""The errors of mod packages: a manifest, a file, an order or a reload that went wrong."""

from __future__ import annotations

from .._errors import MoonboxError

__all__ = ["ModError"]


class ModError(MoonboxError):
    """A mod package that cannot be read, validated, ordered or loaded.

    Attributes:
        code: a stable code: ``invalid_manifest``, ``missing_manifest``, ``missing_entry``,
            ``invalid_path``, ``duplicate_mod``, ``missing_dependency``,
            ``dependency_cycle``, ``unstable_file``, ``unknown_mod``.
        mod: the mod's id (or its folder's name), when known.
        file: the file at fault (``mods/waves/mod.toml``), when known.
        field: the manifest field at fault (``dependencies.0``), when known.
        line: the line in ``file``, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str,
        mod: str | None = None,
        file: str | None = None,
        field: str | None = None,
        line: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.mod = mod
        self.file = file
        self.field = field
        self.line = line

    def __str__(self) -> str:
        where = self.file or self.mod or ""
        if where and self.line:
            where = f"{where}:{self.line}"
        if self.field:
            where = f"{where}: field {self.field!r}" if where else f"field {self.field!r}"
        return f"{where}: {self.message}" if where else self.message
