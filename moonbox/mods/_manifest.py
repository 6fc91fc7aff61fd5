"""``mod.toml``: what a mod package says about itself, validated."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from ._errors import ModError

__all__ = ["MANIFEST_NAME", "ModManifest", "RequestedPermissions", "parse_manifest"]

MANIFEST_NAME = "mod.toml"
ModId = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,63}$")]
_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$|^\*$")


class RequestedPermissions(BaseModel):
    """What a mod asks for; the host's policy decides what it gets (never more).

    Attributes:
        mode: ``readonly``, ``ask``, ``auto`` or ``full`` (default ``readonly``).
        rules: binding name or ``prefix*`` -> ``allow``, ``ask`` or ``deny``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Literal["readonly", "ask", "auto", "full"] = "readonly"
    rules: dict[Annotated[str, StringConstraints(pattern=_PATTERN.pattern)],
                Literal["allow", "ask", "deny"]] = {}


class ModManifest(BaseModel):
    """A mod package's ``mod.toml``.

    Attributes:
        id: the mod's id (a-z, 0-9, ``_``, ``-``, starting with a letter).
        name: a human name (default: the id).
        version: the author's version string (``1.2.0``).
        description: one or a few sentences.
        author: who wrote it.
        entry: the main chunk, a ``.lua`` path inside the folder (default ``main.lua``).
        permissions: what the mod asks for (:class:`RequestedPermissions`).
        dependencies: ids of mods that must load before this one.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: ModId
    name: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None
    version: Annotated[str, StringConstraints(min_length=1, max_length=64)] = "0.0.0"
    description: Annotated[str, StringConstraints(max_length=4096)] = ""
    author: Annotated[str, StringConstraints(max_length=256)] = ""
    entry: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_./-]+\.lua$",
                                            max_length=256)] = "main.lua"
    permissions: RequestedPermissions = Field(default_factory=RequestedPermissions)
    dependencies: Annotated[list[ModId], Field(max_length=64)] = []

    @property
    def title(self) -> str:
        """The name, or the id when the manifest gives none."""
        return self.name or self.id


def _line_of(text: str, loc: tuple[int | str, ...]) -> int | None:
    """The line where the top-level key (or table) of ``loc`` is written, if found."""
    if not loc:
        return None
    head = str(loc[0])
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if re.match(rf"^{re.escape(head)}\s*=", stripped) or re.match(
                rf"^\[\s*{re.escape(head)}(\s*\]|\.)", stripped):
            return number
    return None


def parse_manifest(text: str, file: str) -> ModManifest:
    """Parse and validate the text of a ``mod.toml``.

    Args:
        text: the file's content.
        file: its path, as errors should name it (``mods/waves/mod.toml``).

    Raises:
        ModError: ``invalid_manifest``, naming the file, the field and the line; also
            when the text breaks the TOML parser itself (nesting thousands deep).
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise ModError(f"not valid TOML: {exc}", code="invalid_manifest", file=file,
                       line=int(m.group(1)) if m else None) from None
    except (RecursionError, ValueError, MemoryError) as exc:
        # Hostile text can break the parser itself (arrays nested thousands deep raise
        # RecursionError): any failure to parse is this file's fault, never the host's.
        raise ModError(f"not valid TOML: the parser gave up ({type(exc).__name__}); "
                       "nest arrays and tables only a few levels deep",
                       code="invalid_manifest", file=file) from None
    try:
        return ModManifest.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        field = ".".join(str(p) for p in loc) or None
        more = len(exc.errors()) - 1
        message = err["msg"] + (f" (and {more} more problem{'s' * (more > 1)})" if more else "")
        if err["type"] == "extra_forbidden":
            message = f"unknown field; known: {', '.join(ModManifest.model_fields)}" \
                if len(loc) == 1 else "unknown field"
        raise ModError(message, code="invalid_manifest", file=file, field=field,
                       line=_line_of(text, loc)) from None


def read_manifest(path: Path, file: str | None = None) -> ModManifest:
    """Read and validate a ``mod.toml`` file (see :func:`parse_manifest`)."""
    return parse_manifest(path.read_text("utf-8"), file or str(path))
