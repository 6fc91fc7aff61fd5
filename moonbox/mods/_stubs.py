"""Editor stubs for the whole API a mod package sees, and the editor settings beside them.

:func:`~moonbox.bindings.render_stubs` renders a registry's bindings. A mod in a game sees
more, and some of it differently: the engine library (``moonbox/engine/mod_runtime.lua``)
takes the raw ``on``, ``after``, ``every``, ``cancel``, ``export``, ``import``,
``engine_ready`` and ``engine_call`` out of the mod's environment and offers Lua functions
in their place (and ``spawn``, ``wait``), and the mod host adds ``require``. So
:func:`mod_stubs` renders the registry without those raw bindings and appends the Lua side
from ``mod_api.lua``, each function only when the permissions grant what it needs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from ..bindings import Binding, Permissions, Registry, render_stubs

__all__ = ["API_STUBS_NAME", "LUARC", "LUARC_NAME", "RAW_ENGINE_BINDINGS", "mod_stubs",
           "write_editor_files"]

RAW_ENGINE_BINDINGS = frozenset({"on", "after", "every", "cancel", "export", "import",
                                 "engine_ready", "engine_call"})
"""What the engine library takes out of a mod's environment (its ``RAW`` list)."""

API_STUBS_NAME = "moonbox-api.lua"
"""The stubs file ``moonbox dev --init`` writes at the top of the mods directory."""
LUARC_NAME = ".luarc.json"

LUARC = {
    "runtime": {
        "version": "LuaJIT",
        # What a mod's environment leaves out (moonbox/sandbox/_environment.py): an editor
        # then flags a use of it, as the sandbox would.
        "builtin": {name: "disable" for name in
                    ("debug", "ffi", "io", "jit", "os", "package", "table.clear",
                     "table.new", "utf8")},
    },
    "workspace": {"library": [API_STUBS_NAME], "checkThirdParty": False},
}
"""The editor settings ``moonbox dev --init`` writes beside the stubs."""

_LIBRARY = resources.files("moonbox.mods").joinpath("mod_api.lua").read_text("utf-8")
_NEEDS = "-- needs: "


def _library_blocks() -> list[tuple[str | None, list[str]]]:
    """The blocks of ``mod_api.lua`` after its header: (the binding it needs, its lines)."""
    blocks: list[tuple[str | None, list[str]]] = []
    for chunk in _LIBRARY.split("\n\n")[1:]:
        lines = chunk.strip("\n").split("\n")
        needs = None
        if lines[0].startswith(_NEEDS):
            needs = lines.pop(0)[len(_NEEDS):].strip()
        blocks.append((needs, lines))
    return blocks


def mod_stubs(registry: Registry | Iterable[Binding], permissions: Permissions, *,
              header: str | None = None) -> str:
    """The LuaLS meta file for what a mod package with ``permissions`` may call.

    With a game's registry (one holding the engine bindings), the raw engine bindings give
    way to the engine library's functions, each shown only when the binding it wraps is
    granted (``spawn`` with ``after``); ``wait`` and ``require`` always. With any other
    registry, its bindings and ``require``.
    """
    bindings = list(registry)
    engine = any(b.name == "engine_ready" for b in bindings)
    if engine:
        bindings = [b for b in bindings if b.name not in RAW_ENGINE_BINDINGS]
    decisions = {b.name: permissions.decide(b.name, b.risk)
                 for b in (registry if isinstance(registry, Registry) else bindings)}
    text = render_stubs(bindings, permissions, header=header)
    shown: list[str] = []
    for needs, lines in _library_blocks():
        if needs is not None and (not engine or decisions.get(needs, "deny") == "deny"):
            continue
        shown += ["", *lines]
    title = "the engine library and require" if engine else "require"
    return text + "\n".join(["", f"-- Group: {title} (Lua functions: no table form)",
                             *shown]) + "\n"


def write_editor_files(mods_dir: Path, registry: Registry, permissions: Permissions,
                       ) -> list[Path]:
    """Write the stubs (:data:`API_STUBS_NAME`) and :data:`LUARC_NAME` at the top of
    ``mods_dir``, where neither the mods' discovery nor the watcher looks; the paths.

    Raises:
        OSError: the directory cannot be written.
    """
    header = (f"For the mods of {mods_dir.name or mods_dir}: what a mod gets with these "
              "permissions, the most the host grants; a mod gets no more than its mod.toml "
              "asks for. Written by moonbox dev --init; moonbox stubs -o writes it again.")
    stubs = mods_dir / API_STUBS_NAME
    stubs.write_text(mod_stubs(registry, permissions, header=header), "utf-8")
    luarc = mods_dir / LUARC_NAME
    luarc.write_text(json.dumps(LUARC, indent=2) + "\n", "utf-8")
    return [stubs, luarc]
