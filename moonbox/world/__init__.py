"""The world: entities, the prefab whitelist, world commands and the ``coreai_world_*`` bindings.

Mods never change a :class:`World` directly: their ``coreai_world_*`` writes queue
:class:`Command`\\ s, and :meth:`World.apply` (called by the engine at the tick boundary, or
by the host) applies them in order, validating each. A refused command comes back as a
:class:`CommandResult` with a reason code from :data:`REASONS`.
"""

from ._bindings import WORLD_BINDINGS, entity_table, world_bindings
from ._commands import MAX_BATCH, MAX_FIND, Command, CommandKind, CommandResult
from ._errors import REASONS, Reason, WorldError
from ._model import Color, Entity, Prefab, Prefabs, default_prefabs
from ._world import MAX_TRANSACTION, SNAPSHOT_FORMAT, SNAPSHOT_VERSION, World

__all__ = [
    "MAX_BATCH",
    "MAX_FIND",
    "MAX_TRANSACTION",
    "REASONS",
    "SNAPSHOT_FORMAT",
    "SNAPSHOT_VERSION",
    "WORLD_BINDINGS",
    "Color",
    "Command",
    "CommandKind",
    "CommandResult",
    "Entity",
    "Prefab",
    "Prefabs",
    "Reason",
    "World",
    "WorldError",
    "default_prefabs",
    "entity_table",
    "world_bindings",
]
