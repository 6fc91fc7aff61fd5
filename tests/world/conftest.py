"""World fixtures: a world, and a mod sandbox with the coreai_world_* bindings over it."""

from __future__ import annotations

import pytest

from moonbox.bindings import Permissions, Registry, default_bindings
from moonbox.world import World, world_bindings


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
def mod_sandbox(world: World):
    """``make(mod_id, mode="auto")`` -> a sandbox whose world bindings act as that mod."""
    registry = Registry(default_bindings())
    for binding in world_bindings(world):
        registry.register(binding)
    made = []

    def make(mod_id: str = "m", mode: str = "auto"):
        api = registry.mod(mod_id, Permissions(mode=mode))
        sb = api.sandbox()
        made.append((api, sb))
        return sb

    yield make
    for api, sb in made:
        sb.close()
        api.close()
    registry.close()
