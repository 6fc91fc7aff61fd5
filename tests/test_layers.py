"""Layers point down only (DESIGN.md §1), and only moonbox.sandbox imports lupa."""

from __future__ import annotations

import ast
from pathlib import Path

import moonbox

PACKAGE = Path(moonbox.__file__).parent
# Each layer may import from the layers listed for it (and from moonbox._errors).
ALLOWED = {
    "sandbox": set(),
    "bindings": {"sandbox"},
    "world": {"sandbox", "bindings"},
    "engine": {"sandbox", "bindings", "world", "isolation"},
    "store": set(),
    "mods": {"sandbox", "bindings", "world", "engine", "store", "isolation"},
    "agent": {"sandbox", "bindings", "world", "engine", "store"},
    "isolation": {"sandbox", "bindings"},
    # Above the engine: reads a game (and its mod host, store and workers), never a runtime.
    "dashboard": {"world", "engine", "store", "isolation", "mods"},
    # The roof: bench measures the parts, cli drives them all (and bench). No part imports
    # either (see test_no_part_imports_the_roof).
    "bench": {"sandbox", "bindings", "world", "isolation"},
    "cli": {"sandbox", "bindings", "world", "engine", "store", "mods", "agent", "isolation",
            "fuzz", "bench", "dashboard"},
}
ROOF = {"bench", "cli"}
# Single modules that sit on top of their layer. The store's mod API is the store seen
# through the bindings; the rest of the store stands alone.
MODULE_ALLOWED = {
    "store/_mod_api.py": {"sandbox", "bindings"},
}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = path.relative_to(PACKAGE).parts[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(("moonbox", *parts, base) if base else ("moonbox", *parts))
            names.append(base)
    return names


def test_layers_point_down():
    for layer, allowed in ALLOWED.items():
        folder = PACKAGE / layer
        if not folder.exists():
            continue
        for path in folder.rglob("*.py"):
            module_allowed = allowed | MODULE_ALLOWED.get(path.relative_to(PACKAGE).as_posix(),
                                                          set())
            for name in _imports(path):
                if not name.startswith("moonbox."):
                    continue
                target = name.split(".")[1]
                if target in ALLOWED and target != layer:
                    assert target in module_allowed, f"{path.name} ({layer}) imports {name}"


def test_no_part_imports_the_roof():
    """Only the command's entry point (``python -m moonbox``) reaches up to cli or bench."""
    for path in PACKAGE.rglob("*.py"):
        where = path.relative_to(PACKAGE)
        if where.parts[0] in ROOF or where.as_posix() == "__main__.py":
            continue
        for name in _imports(path):
            parts = name.split(".")
            assert not (parts[0] == "moonbox" and len(parts) > 1 and parts[1] in ROOF), \
                f"{where} imports {name}"


def test_exempt_modules_use_only_public_names():
    """A module let past its layer imports the lower layers' public names, not internals."""
    for module in MODULE_ALLOWED:
        for name in _imports(PACKAGE / module):
            parts = name.split(".")
            if parts[0] == "moonbox" and len(parts) > 1 and parts[1] in MODULE_ALLOWED[module]:
                assert len(parts) == 2, f"{module} imports the internal {name}"


def test_the_store_core_runs_without_bindings():
    """Importing moonbox.store's core does not load the bindings (they load on first use)."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['moonbox'] = type(sys)('moonbox'); "
        f"sys.modules['moonbox'].__path__ = [{str(PACKAGE)!r}]; "
        "import moonbox.store; "
        "assert 'moonbox.bindings' not in sys.modules, 'bindings'; "
        "assert 'moonbox.sandbox' not in sys.modules, 'sandbox'; "
        "assert 'lupa' not in sys.modules, 'lupa'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_only_the_sandbox_imports_lupa():
    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).as_posix() == "bench/_baseline.py":
            continue  # the benchmark's raw-LuaJIT baseline, not a sandbox
        if path.relative_to(PACKAGE).parts[0] == "fuzz":
            continue  # the fuzzer's raw-LuaJIT parser, the oracle of its syntax verdicts
        if "lupa" in {n.split(".")[0] for n in _imports(path)}:
            assert path.relative_to(PACKAGE).parts[0] == "sandbox", path
