"""Mod packages on disk, their manifests, loading by dependencies, and hot reload.

A mod package is a folder with a ``mod.toml`` (:class:`ModManifest`) and Lua files; a mod
may ``require`` its own files only. :class:`ModHost` loads a directory of them into a
:class:`~moonbox.engine.Game`, ordered by their dependencies, each with the permissions
the host's policy grants, and swaps in new versions only after a clean dry run.
:class:`ModWatcher` drives it from file changes (``moonbox dev``). See ``docs/mods.md``.
"""

from ._dev import DevSession
from ._errors import ModError
from ._example import arena_mods, copy_arena_mods, load_packages
from ._host import ACTIVE_KEY, ModHost, ModState, ReloadResult, describe
from ._manifest import MANIFEST_NAME, ModManifest, RequestedPermissions, parse_manifest
from ._order import discover, grant, order_packages
from ._package import ModPackage, read_package
from ._require import REQUIRE_CHUNK, preparer
from ._watch import DEBOUNCE_MS, STEP_MS, ModWatcher

__all__ = [
    "ACTIVE_KEY",
    "DEBOUNCE_MS",
    "MANIFEST_NAME",
    "REQUIRE_CHUNK",
    "STEP_MS",
    "DevSession",
    "ModError",
    "ModHost",
    "ModManifest",
    "ModPackage",
    "ModState",
    "ModWatcher",
    "ReloadResult",
    "RequestedPermissions",
    "arena_mods",
    "copy_arena_mods",
    "describe",
    "discover",
    "grant",
    "load_packages",
    "order_packages",
    "parse_manifest",
    "preparer",
    "read_package",
]
