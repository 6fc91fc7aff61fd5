"""Writes mod folders for the mod package tests, in a few lines each."""

from __future__ import annotations

from pathlib import Path


def write_mod(root: Path, mod_id: str, main: str, *, deps: tuple[str, ...] = (),
              mode: str = "auto", files: dict[str, str] | None = None,
              extra: str = "") -> Path:
    """A mod folder ``root/mod_id`` with a manifest, ``main.lua`` and ``files``."""
    folder = root / mod_id
    folder.mkdir(parents=True, exist_ok=True)
    dep_list = ", ".join(f'"{d}"' for d in deps)
    (folder / "mod.toml").write_text(
        f'id = "{mod_id}"\nversion = "1.0.0"\ndependencies = [{dep_list}]\n{extra}'
        f'[permissions]\nmode = "{mode}"\n')
    (folder / "main.lua").write_text(main)
    for path, text in (files or {}).items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return folder
