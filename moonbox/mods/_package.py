"""A mod package on disk: its folder, its manifest and its Lua files, read whole."""

from __future__ import annotations

import hashlib
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from ._errors import ModError
from ._manifest import MANIFEST_NAME, ModManifest, parse_manifest

__all__ = ["MAX_FILE_BYTES", "MAX_FILES", "ModPackage", "read_package"]

MAX_FILES = 256
"""Lua files a package may hold."""
MAX_FILE_BYTES = 1 << 20
"""The largest Lua file or manifest read, in bytes."""
_STABLE_TRIES = 20
_STABLE_WAIT_S = 0.01


@dataclass(frozen=True)
class ModPackage:
    """One mod folder as read at one moment: the manifest and every Lua file's text.

    Attributes:
        root: the folder, resolved.
        manifest: the validated ``mod.toml``.
        manifest_text: its text, as read.
        files: ``relative/posix/path.lua`` -> source text, for every Lua file inside the
            folder (links that resolve outside it are not read).
        refused: relative path -> why it cannot be required (a link out of the folder,
            not a regular file, not UTF-8).
        label: how errors name the folder (``mods/waves``).
    """

    root: Path
    manifest: ModManifest
    manifest_text: str
    files: dict[str, str]
    refused: dict[str, str] = field(default_factory=dict)
    label: str = ""

    @property
    def id(self) -> str:
        """The mod's id, from its manifest."""
        return self.manifest.id

    @property
    def entry_source(self) -> str:
        """The entry file's source text."""
        return self.files[self.manifest.entry]

    @property
    def version_hash(self) -> str:
        """SHA-256 hex over the manifest and every file: equal hashes, equal packages."""
        h = hashlib.sha256(self.manifest_text.encode())
        for path in sorted(self.files):
            h.update(b"\0" + path.encode() + b"\0" + self.files[path].encode())
        return h.hexdigest()

    def chunk(self, path: str) -> str:
        """The chunk name of one of its files: ``@mods/<id>/<path>``."""
        return f"@mods/{self.id}/{path}"


def _read_stable(path: Path, label: str, mod: str | None) -> bytes:
    """The file's bytes, read when its size and modification time hold still across the
    read: a file an editor is still writing is read again, a little later.

    Only a regular file is read. The file is opened without blocking and without following
    a link, then checked on the open descriptor, so a named pipe, a device or a socket
    swapped in under the name is refused, never waited on.

    Raises:
        ModError: ``unstable_file`` when it never holds still; ``invalid_path`` when too
            large or not a regular file.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    for _ in range(_STABLE_TRIES):
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            raise ModError(f"cannot be opened: {exc.strerror}", code="invalid_path",
                           mod=mod, file=label) from None
        with os.fdopen(fd, "rb") as handle:
            before = os.fstat(fd)
            if not stat.S_ISREG(before.st_mode):
                raise ModError("not a regular file (a pipe, a device or a socket); only "
                               "plain files are read", code="invalid_path", mod=mod,
                               file=label)
            if before.st_size > MAX_FILE_BYTES:
                raise ModError(f"larger than {MAX_FILE_BYTES} bytes", code="invalid_path",
                               mod=mod, file=label)
            data = handle.read(MAX_FILE_BYTES + 1)
        after = path.stat()
        if (before.st_ino, before.st_size, before.st_mtime_ns) \
                == (after.st_ino, after.st_size, after.st_mtime_ns) \
                and len(data) == after.st_size:
            return data
        time.sleep(_STABLE_WAIT_S)
    raise ModError("kept changing while being read; save it again", code="unstable_file",
                   mod=mod, file=label)


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def read_package(folder: Path, label: str | None = None) -> ModPackage:
    """Read a mod folder: validate ``mod.toml``, then read every ``.lua`` file inside.

    Args:
        folder: the mod's folder.
        label: how errors name the folder (default: the path as given).

    Raises:
        ModError: ``missing_manifest``, ``invalid_manifest``, ``missing_entry``,
            ``invalid_path`` (too many files, a file too large, a ``mod.toml`` that is a
            link out of the folder or not a regular file, a file swapped for a pipe while
            being read), ``unstable_file``.

    Only regular files are read, and only inside the folder: a ``.lua`` name that is a link
    resolving outside it, a named pipe, a device or a socket is not read but listed in
    ``refused``, so ``require`` says why (and an entry file like that is
    ``missing_entry``).
    """
    label = label or str(folder)
    root = folder.resolve()
    manifest_label = f"{label}/{MANIFEST_NAME}"
    try:
        manifest_path = (root / MANIFEST_NAME).resolve(strict=True)
    except OSError:
        raise ModError(f"no {MANIFEST_NAME} in the folder", code="missing_manifest",
                       mod=folder.name, file=manifest_label) from None
    if not manifest_path.is_relative_to(root):
        raise ModError("a link to a file outside the mod's folder; the manifest must be "
                       "inside it", code="invalid_path", mod=folder.name, file=manifest_label)
    if not _is_regular(manifest_path):
        raise ModError("not a regular file (a folder, a pipe, a device or a socket)",
                       code="invalid_path", mod=folder.name, file=manifest_label)
    manifest_text = _read_stable(manifest_path, manifest_label, folder.name).decode(
        "utf-8", "replace")
    manifest = parse_manifest(manifest_text, manifest_label)
    files: dict[str, str] = {}
    refused: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if not name.endswith(".lua") or name.startswith("."):
                continue
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            try:
                real = path.resolve(strict=True)
            except OSError:
                refused[rel] = "a broken link"
                continue
            if not real.is_relative_to(root):
                refused[rel] = "a link to a file outside the mod's folder"
                continue
            if not _is_regular(real):
                refused[rel] = "not a regular file (a pipe, a device or a socket)"
                continue
            if len(files) >= MAX_FILES:
                raise ModError(f"more than {MAX_FILES} Lua files", code="invalid_path",
                               mod=manifest.id, file=label)
            data = _read_stable(real, f"{label}/{rel}", manifest.id)
            try:
                files[rel] = data.decode("utf-8")
            except UnicodeDecodeError:
                refused[rel] = "not UTF-8 text"
    entry = manifest.entry
    if entry not in files:
        why = refused.get(entry, "no such file in the folder")
        raise ModError(f"the entry file {entry!r}: {why}", code="missing_entry",
                       mod=manifest.id, file=manifest_label, field="entry")
    return ModPackage(root, manifest, manifest_text, files, refused, label)
