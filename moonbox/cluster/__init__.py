"""Sharded games: many moonbox games ticked in lockstep as one, in this process or as Ray
actors (``pip install 'moonbox[ray]'``), with checkpoints on disk and recovery from them.
See ``docs/cluster.md``."""

from ._backends import Backend, LocalBackend, RayBackend, ShardsDown, start_local_ray
from ._game import ShardedGame
from ._shard import KEEP_CHECKPOINTS, Shard, atomic_write, entity_digest
from ._spec import ClusterError, ModSpec, place

__all__ = [
    "KEEP_CHECKPOINTS",
    "Backend",
    "ClusterError",
    "LocalBackend",
    "ModSpec",
    "RayBackend",
    "Shard",
    "ShardedGame",
    "ShardsDown",
    "atomic_write",
    "entity_digest",
    "place",
    "start_local_ray",
]
