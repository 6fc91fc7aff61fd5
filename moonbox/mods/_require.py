"""``require`` for mod packages: the mod's own files, as text, through the sandbox.

A host function cannot run Lua, so ``require`` lives on the Lua side
(``moonbox/mods/require.lua``). The host prepares it when the engine loads the mod, after
the engine library and before the main chunk (:meth:`Game.load_mod`'s ``prepare``):

1. it runs ``require.lua`` in the mod's environment, which installs ``require`` and a
   definer under a one-off name;
2. it compiles every Lua file of the package through the sandbox's normal
   :meth:`~moonbox.sandbox.Sandbox.load` (source text only, instrumented, budgeted), as the
   chunk ``@mods/<id>/<path>``: first alone (a file must be a valid chunk by itself, so it
   cannot close the wrapper below), then wrapped on its first line so that running it only
   hands its body, a function, to the definer: line numbers stay the file's own;
3. it removes the definer from the environment.

A syntax error in any file is therefore found at load time, with its file and line, even in
a file the main chunk requires only later. The files were read by
:func:`~moonbox.mods.read_package`, which never reads a link out of the folder.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Mapping
from importlib import resources

from .._errors import ScriptError
from ..sandbox import Sandbox
from ._package import ModPackage
from ._withheld import WITHHELD_CHUNK, WITHHELD_LUA

__all__ = ["REQUIRE_CHUNK", "preparer"]

REQUIRE_CHUNK = "@moonbox/mods/require.lua"
_NAMEABLE = re.compile(r"^[A-Za-z0-9_-]+(/[A-Za-z0-9_-]+)*\.lua$")
_REQUIRE = resources.files("moonbox.mods").joinpath("require.lua").read_text("utf-8")


def _wrap(source: str, define: str, path: str) -> str:
    # On the file's first line, so every line keeps its number; a shebang line stays a
    # comment. The trailing newline ends a last-line comment.
    if source.startswith("#"):
        source = "--" + source
    return f"{define}(\"{path}\", function(...) {source}\nend)"


def _check(outcome: object, chunk: str) -> None:
    error = getattr(outcome, "error", None)
    if error is not None:
        raise error
    if getattr(outcome, "status", "done") != "done":
        raise ScriptError("defining the module waited or yielded", chunk=chunk)


def preparer(package: ModPackage,
             withheld: Mapping[str, str] | None = None) -> Callable[[Sandbox], None]:
    """The ``prepare`` callable that gives a mod of ``package`` its ``require``, and
    (with ``withheld``, name -> sentence, see :func:`~moonbox.mods._withheld.withheld`) a
    Lua function under each name its permissions withhold that raises why.

    Raises (when called):
        ScriptError: a file of the package does not compile (kind ``syntax``, with its
            chunk ``@mods/<id>/<path>`` and line) or defining it failed.
    """
    entry = package.manifest.entry
    refused = dict(package.refused)
    modules: dict[str, str] = {}
    for path, text in package.files.items():
        if path == entry:
            continue
        if _NAMEABLE.match(path):
            modules[path] = text
        else:
            refused[path] = "a file name require cannot name (use a-z, 0-9, _, -, /, .)"

    explained = dict(withheld or {})

    def prepare(sandbox: Sandbox) -> None:
        if explained:
            _check(sandbox.run(WITHHELD_LUA, WITHHELD_CHUNK, args=(explained,),
                               max_resumes=1), WITHHELD_CHUNK)
        define = f"__mods_define_{secrets.token_hex(6)}"
        _check(sandbox.run(_REQUIRE, REQUIRE_CHUNK, args=(define, refused), max_resumes=1),
               REQUIRE_CHUNK)
        for path, text in sorted(modules.items()):
            chunk = package.chunk(path)
            # Compiled alone first: a file that is a valid chunk by itself is a function
            # body that cannot close its wrapper, so defining it runs none of its code.
            # (One that tries, `end) ... (function()`, is refused here as the syntax error
            # it is.) It costs one more compile of each file per load.
            alone = sandbox.load(text, chunk)
            unload = getattr(sandbox, "unload", None)
            if unload is not None:  # an isolated sandbox keeps its chunks for its snapshot
                unload(alone)
            _check(sandbox.run(_wrap(text, define, path), chunk, max_resumes=1), chunk)
        _check(sandbox.run(f"{define} = nil", "=(moonbox mods)", max_resumes=1),
               "=(moonbox mods)")

    return prepare
