"""Layers point down only (DESIGN.md §1), no two modules import each other, and only
moonbox.sandbox imports lupa."""

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
    # Above the engine: shards each hold a game, reached only through the engine's API.
    "cluster": {"engine"},
    # The roof: bench measures the parts, cli drives them all (and bench). No part imports
    # either (see test_no_part_imports_the_roof).
    "bench": {"sandbox", "bindings", "world", "isolation", "engine"},
    "cli": {"sandbox", "bindings", "world", "engine", "store", "mods", "agent", "isolation",
            "fuzz", "bench", "dashboard", "cluster"},
}
ROOF = {"bench", "cli"}
# Single modules that sit on top of their layer. The store's mod API is the store seen
# through the bindings; the rest of the store stands alone.
MODULE_ALLOWED = {
    "store/_mod_api.py": {"sandbox", "bindings"},
}
# Import cycles known and not fixed yet, each exactly as found (its modules); an entry goes
# when its cycle does (the test fails on an entry that is no cycle any more). None is left.
KNOWN_CYCLES: set[frozenset[str]] = set()


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


# -- import cycles ---------------------------------------------------------------------------


def _module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_graph(root: Path) -> dict[str, dict[str, int]]:
    """Each module of the package at ``root``: the modules it imports, with the first line.

    See :func:`test_no_two_modules_import_each_other` for what counts as an edge.
    """
    paths = {_module_name(root, path): path for path in sorted(root.rglob("*.py"))}
    graph: dict[str, dict[str, int]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")
                    up = up[: len(up) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                # A submodule by name is an edge to it; any other name is the module's own
                # (for a package, what its __init__ defines or re-exports).
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths else base
                           for alias in node.names]
            for target in targets:
                if target in paths and target != name:
                    edges[target] = min(edges.get(target, node.lineno), node.lineno)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module, each sorted (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:  # the root of a component: pop it whole
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def _describe(graph: dict[str, dict[str, int]], cycle: list[str]) -> str:
    edges = "; ".join(f"{module}:{line} imports {target}" for module in cycle
                      for target, line in sorted(graph[module].items()) if target in cycle)
    return f"{', '.join(cycle)} ({edges})"


def test_no_two_modules_import_each_other():
    """No import cycle between modules of moonbox, however indirect (DESIGN.md §1).

    The graph has a node per ``.py`` file (a package is its ``__init__.py``) and an edge
    for every ``import`` and ``from ... import`` anywhere in the file: at the top, inside
    functions (a lazy import is still a dependency), under ``if TYPE_CHECKING:`` (an
    annotation is one too). Relative imports are resolved. ``import a.b`` is an edge to
    ``a.b``; ``from a import b`` is an edge to the submodule ``a.b`` if there is one, else
    to ``a`` itself, which for a package means its ``__init__``.

    A package's ``__init__`` imports its submodules to re-export their names, and those are
    edges like any other. So a submodule that imports from its own package (``from . import
    Name``, ``from moonbox.bindings import Binding`` inside ``moonbox/bindings/``) forms a
    cycle with the ``__init__``, as it does in practice: the name exists only once the
    ``__init__`` has run past the import of that submodule. So does a ring through other
    packages' ``__init__`` modules. Submodules import the module that defines a name.

    What is not an edge: the implicit import of the enclosing packages. Importing
    ``moonbox.sandbox._budget`` runs ``moonbox/__init__.py`` first, which imports the
    bindings, which import the sandbox; counted, that would put every module in one cycle
    with the top-level package and the test would say nothing. Python runs a parent before
    its children, so only the module named is a dependency. Imports by a computed name
    (``importlib.import_module``) are not seen.
    """
    graph = _module_graph(PACKAGE)
    cycles = _cycles(graph)
    new = [cycle for cycle in cycles if frozenset(cycle) not in KNOWN_CYCLES]
    gone = sorted(sorted(known) for known in KNOWN_CYCLES if sorted(known) not in cycles)
    lines = [f"  {_describe(graph, cycle)}" for cycle in new]
    known = [f"  {_describe(graph, cycle)} (known, in KNOWN_CYCLES)" for cycle in cycles if cycle not in new]
    assert not new, "\n".join(["modules in an import cycle:", *lines, *known])
    assert not gone, f"no cycle any more, drop it from KNOWN_CYCLES: {gone}"


def test_the_module_graph_sees_every_kind_of_import(tmp_path):
    """Lazy, TYPE_CHECKING, relative and re-exported imports are edges; parent packages not."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from .sub import Thing\n",
        "_base.py": "import os\n",
        "_lazy.py": "def load():\n    from pkg import _base\n",
        "_typed.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                      "    from ._lazy import load\n"),
        "sub/__init__.py": "from ._thing import Thing\n",
        "sub/_thing.py": "from .. import _typed\nimport pkg._base\nThing = 1\n",
        "sub/_user.py": "from . import Thing\n",
    }
    for name, text in files.items():
        (package / name).write_text(text)
    graph = _module_graph(package)
    assert {name: sorted(edges) for name, edges in graph.items()} == {
        "pkg": ["pkg.sub"],
        "pkg._base": [],
        "pkg._lazy": ["pkg._base"],
        "pkg._typed": ["pkg._lazy"],
        "pkg.sub": ["pkg.sub._thing"],
        "pkg.sub._thing": ["pkg._base", "pkg._typed"],
        "pkg.sub._user": ["pkg.sub"],
    }
    assert _cycles(graph) == []
    # _user imports from its package's __init__, which imports _thing, which imports _base.
    (package / "_base.py").write_text("from .sub import _user\n")
    (package / "_lazy.py").write_text("from . import _lazy\n")  # itself: no edge
    graph = _module_graph(package)
    assert graph["pkg._lazy"] == {}
    assert _cycles(graph) == [["pkg._base", "pkg.sub", "pkg.sub._thing", "pkg.sub._user"]]
