"""Discovering mod folders, ordering mods by their dependencies, granting permissions."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..bindings import Permissions, Registry
from ._errors import ModError
from ._manifest import MANIFEST_NAME, RequestedPermissions
from ._package import ModPackage, read_package

__all__ = ["discover", "grant", "order_packages"]

_RANK = {"deny": 0, "ask": 1, "allow": 2}


def discover(mods_dir: Path, label: str = "mods") -> tuple[list[ModPackage], list[ModError]]:
    """Read every mod folder (a folder holding ``mod.toml``) directly inside ``mods_dir``.

    Args:
        mods_dir: the mods directory.
        label: how errors name it (``mods``: a file is named ``mods/waves/main.lua``).

    Returns:
        The packages read, sorted by id, and one error per folder that could not be read
        or whose id another folder already took.
    """
    packages: dict[str, ModPackage] = {}
    errors: list[ModError] = []
    for folder in sorted(p for p in Path(mods_dir).iterdir()
                         if p.is_dir() and not p.name.startswith(".")):
        if not (folder / MANIFEST_NAME).exists():
            continue
        try:
            package = read_package(folder, f"{label}/{folder.name}")
        except ModError as exc:
            errors.append(exc)
            continue
        if package.id in packages:
            errors.append(ModError(
                f"mod id {package.id!r} is taken already by {packages[package.id].label}",
                code="duplicate_mod", mod=package.id, file=f"{package.label}/{MANIFEST_NAME}",
                field="id"))
            continue
        packages[package.id] = package
    return sorted(packages.values(), key=lambda p: p.id), errors


def order_packages(
    packages: Iterable[ModPackage], available: Iterable[str] = (),
) -> tuple[list[ModPackage], list[ModError]]:
    """Order packages so that each comes after its dependencies (ties by id).

    Args:
        packages: the packages to order.
        available: ids of mods loaded already, which satisfy a dependency too.

    Returns:
        The packages that can load, in order, and an error for each that cannot: a
        ``missing_dependency`` (also when a dependency itself cannot load) or a
        ``dependency_cycle`` naming the cycle.
    """
    by_id = {p.id: p for p in packages}
    ready = set(available)
    errors: list[ModError] = []
    ordered: list[ModPackage] = []
    state: dict[str, str] = {}  # id -> "visiting" | "done" | "failed"

    def fail(package: ModPackage, message: str, code: str) -> None:
        state[package.id] = "failed"
        errors.append(ModError(message, code=code, mod=package.id,
                               file=f"{package.label}/{MANIFEST_NAME}", field="dependencies"))

    def visit(package: ModPackage, path: list[str]) -> bool:
        s = state.get(package.id)
        if s == "done":
            return True
        if s == "failed":
            return False
        if s == "visiting":
            cycle = path[path.index(package.id):] + [package.id]
            for mod_id in cycle[:-1]:
                if state.get(mod_id) != "failed":
                    fail(by_id[mod_id], f"dependency cycle: {' -> '.join(cycle)}",
                         "dependency_cycle")
            return False
        state[package.id] = "visiting"
        for dep in package.manifest.dependencies:
            if dep in by_id:
                if not visit(by_id[dep], [*path, package.id]):
                    if state.get(package.id) != "failed":
                        fail(package, f"depends on {dep!r}, which cannot load",
                             "missing_dependency")
                    return False
            elif dep not in ready:
                fail(package, f"depends on {dep!r}, which is not in the mods directory",
                     "missing_dependency")
                return False
        state[package.id] = "done"
        ordered.append(package)
        return True

    for package in sorted(by_id.values(), key=lambda p: p.id):
        visit(package, [])
    return ordered, errors


def grant(requested: RequestedPermissions, policy: Permissions, registry: Registry) -> Permissions:
    """The permissions a mod gets: for each binding of ``registry``, the stricter of what
    the mod asked for and what the host's ``policy`` allows. Never more than the policy.

    The result names every binding of the registry exactly; a binding registered later
    falls to ``readonly`` (and is not in an environment made earlier anyway).
    """
    asked = Permissions(mode=requested.mode, rules=dict(requested.rules))
    rules: dict[str, str] = {}
    for binding in registry:
        a = asked.decide(binding.name, binding.risk)
        b = policy.decide(binding.name, binding.risk)
        rules[binding.name] = a if _RANK[a] <= _RANK[b] else b
    return Permissions(mode="readonly", rules=rules)  # type: ignore[arg-type]
