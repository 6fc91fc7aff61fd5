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
    "engine": {"sandbox", "bindings", "world"},
    "store": set(),
    "mods": {"sandbox", "bindings", "world", "engine", "store"},
    "agent": {"sandbox", "bindings", "world", "engine", "store"},
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
            for name in _imports(path):
                if not name.startswith("moonbox."):
                    continue
                target = name.split(".")[1]
                if target in ALLOWED and target != layer:
                    assert target in allowed, f"{path.name} ({layer}) imports {name}"


def test_only_the_sandbox_imports_lupa():
    for path in PACKAGE.rglob("*.py"):
        if path.name == "_bench.py":
            continue  # the benchmark's raw-LuaJIT baseline, not a sandbox
        if "lupa" in {n.split(".")[0] for n in _imports(path)}:
            assert path.relative_to(PACKAGE).parts[0] == "sandbox", path
