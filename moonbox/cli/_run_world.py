"""The world of ``moonbox run``: a scratch world (or a snapshot), its bindings, its results.

Each file runs as its own mod with the ``coreai_world_*`` bindings; its commands are
applied after its run, so the next file sees them. The JSON record of a file gains
``commands`` (each applied or refused, with its reason code) and ``events`` (what a mod
with handlers would have received).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..bindings import Permissions, Registry, default_bindings
from ..world import CommandResult, World, WorldError, world_bindings

__all__ = ["apply_file_commands", "load_world", "save_world", "world_registry"]


def load_world(path: Path | None) -> World:
    """A scratch world with the default prefabs, or the snapshot at ``path``.

    Raises:
        click.UsageError: the file cannot be read or is not a world snapshot (exit 2).
    """
    if path is None:
        return World()
    try:
        return World.load(path.read_bytes())
    except OSError as exc:
        raise click.UsageError(f"cannot read --world {path}: {exc.strerror or exc}") from None
    except WorldError as exc:
        raise click.UsageError(f"--world {path}: {exc}") from None


def save_world(world: World, path: Path) -> None:
    """Write the world's snapshot to ``path`` (replacing it whole).

    Raises:
        click.UsageError: the file cannot be written (exit 2).
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(world.snapshot())
        tmp.replace(path)
    except OSError as exc:
        raise click.UsageError(f"cannot write --save-world {path}: {exc.strerror or exc}") \
            from None


def world_registry(world: World) -> Registry:
    """The default bindings plus the ``coreai_world_*`` bindings over ``world``."""
    registry = Registry(default_bindings())
    for binding in world_bindings(world):
        registry.register(binding)
    return registry


def mod_permissions() -> Permissions:
    return Permissions(mode="auto")


def apply_file_commands(world: World, mod_id: str) -> tuple[list[CommandResult],
                                                            list[dict[str, Any]]]:
    """Apply what a file queued (an open transaction is dropped); its results and events."""
    world.rollback(mod_id)
    results = world.apply()
    events: list[dict[str, Any]] = []
    for result in results:
        if not result.applied:
            events.append({"event": "world:refused", "data": result.to_dict()})
        elif result.kind == "destroy":
            events += [{"event": "world:destroyed", "data": {"name": n, "mod": result.mod}}
                       for n in result.names]
        else:
            events += [{"event": "world:spawned", "data": {"name": n, "mod": result.mod}}
                       for n in result.names if result.kind in
                       ("spawn", "spawn_batch", "grid", "transaction")]
    return results, events
