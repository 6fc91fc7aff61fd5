"""The example arena's mods, shipped with moonbox, and loading a set of packages as it is.

``moonbox demo``, ``examples/arena/arena.py`` and ``moonbox dev`` (its default game, and
``--init``) all use the one copy in ``moonbox/demo_mods/arena``: one folder per mod.
"""

from __future__ import annotations

import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

from ..bindings import Permissions
from ..engine import Game
from ._errors import ModError
from ._order import discover, grant, order_packages
from ._package import ModPackage
from ._require import preparer
from ._withheld import withheld

__all__ = ["arena_mods", "copy_arena_mods", "load_packages"]


@contextmanager
def arena_mods() -> Iterator[Path]:
    """The folder of the example arena's mod packages (a real path while in the block)."""
    with resources.as_file(resources.files("moonbox.demo_mods").joinpath("arena")) as path:
        yield Path(path)


def copy_arena_mods(dest: Path) -> list[str]:
    """Copy the example arena's mods into ``dest`` (created if missing), for a modder to
    edit; the ids copied.

    Raises:
        ModError: ``invalid_path``: ``dest`` is not a directory, or already holds files.
    """
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ModError(f"{dest}: copy the example mods into a new or empty directory",
                       code="invalid_path")
    dest.mkdir(parents=True, exist_ok=True)
    ids = []
    with arena_mods() as source:
        for folder in sorted(source.iterdir()):
            if (folder / "mod.toml").is_file():
                # Contents only, not modes: an install may be read-only, the copy is to edit.
                shutil.copytree(folder, dest / folder.name, copy_function=shutil.copyfile)
                ids.append(folder.name)
    for path in dest.rglob("*"):  # folders took the install's modes: make them the user's
        if path.is_dir():
            path.chmod(path.stat().st_mode | stat.S_IRWXU)
    return ids


def load_packages(game: Game, mods_dir: Path, *,
                  policy: Permissions | None = None) -> list[ModPackage]:
    """Load every mod package of ``mods_dir`` into ``game`` as it is, in dependency order,
    each with its ``require`` and the permissions its manifest asks for, within ``policy``
    (default: mode ``auto``), as :class:`~moonbox.mods.ModHost` grants them. No dry run, no
    versions, no hot reload (that is ``ModHost``): for a fixed set of mods, such as a
    demo's, where a mod that misbehaves is to be seen misbehaving in the game (and
    quarantined there). A mod that fails to load is quarantined by the game, as any.

    Returns:
        The packages, in the order they were loaded.

    Raises:
        ModError: a folder that cannot be read, or a missing or circular dependency (the
            first; nothing is loaded then).
    """
    packages, errors = discover(mods_dir)
    ordered, order_errors = order_packages(packages)
    if errors or order_errors:
        raise (errors + order_errors)[0]
    policy = policy or Permissions(mode="auto")
    for package in ordered:
        entry = package.manifest.entry
        game.load_mod(package.id, package.files[entry], chunk=package.chunk(entry),
                      prepare=preparer(package, withheld(package, game.registry, policy)),
                      permissions=grant(package.manifest.permissions, policy, game.registry))
    return ordered
