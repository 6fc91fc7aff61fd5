"""``moonbox cluster``: run a mods folder as a sharded game and print each shard's figures
and the combined world hash (see docs/cluster.md)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

__all__ = ["cluster", "read_mods"]


def read_mods(folder: Path) -> list[Any]:
    """The mods of ``folder`` as :class:`~moonbox.cluster.ModSpec`: each ``*.lua`` file in
    it (its id is the file's stem), then each mod folder (``mod.toml``) in dependency
    order, its dependencies as its imports. A folder whose mod has Lua files besides its
    entry needs ``require``, which a shard does not provide yet.

    Raises:
        click.ClickException: a mod that cannot be read or ordered.
    """
    from ..cluster import ModSpec
    from ..mods import discover, order_packages

    mods: list[ModSpec] = []
    for path in sorted(folder.glob("*.lua")):
        mods.append(ModSpec(path.stem.lower().replace(".", "_"), path.read_text(),
                            chunk=f"@{folder.name}/{path.name}"))
    packages, errors = discover(folder, folder.name)
    ordered, order_errors = order_packages(packages)
    errors += order_errors
    if errors:
        raise click.ClickException("; ".join(str(e) for e in errors))
    for package in ordered:
        if len(package.files) > 1:
            raise click.ClickException(
                f"{package.label} has Lua files besides its entry: a sharded game loads the "
                "entry alone (no require yet)")
        mods.append(ModSpec(package.id, package.entry_source,
                            chunk=package.chunk(package.manifest.entry),
                            imports=tuple(package.manifest.dependencies)))
    return mods


@click.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--shards", type=click.IntRange(1, 1024), default=2, show_default=True,
              help="Shards to split the mods over.")
@click.option("--ticks", type=click.IntRange(0, 10_000_000), default=100, show_default=True,
              help="Game ticks to run.")
@click.option("--seed", type=int, default=0, show_default=True, help="The game's seed.")
@click.option("--address", default=None,
              help="A running Ray cluster to join (ray.init's address). Without it a one-node "
                   "Ray instance is started on loopback for this run.")
@click.option("--backend", type=click.Choice(["ray", "local"]), default="ray",
              show_default=True, help="local: every shard in this process (no Ray).")
@click.option("--checkpoint-every", type=click.IntRange(0), default=0, show_default=True,
              help="Ticks between checkpoints (0: none).")
@click.option("--checkpoint-dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Where checkpoints go (default: a temporary folder).")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as one JSON object.")
def cluster(folder: Path, shards: int, ticks: int, seed: int, address: str | None,
            backend: str, checkpoint_every: int, checkpoint_dir: Path | None,
            as_json: bool) -> None:
    """Run the mods in FOLDER as a sharded game: per-shard figures and the world hash."""
    from ..cluster import ClusterError, LocalBackend, RayBackend, ShardedGame, start_local_ray

    console = Console(highlight=False, soft_wrap=True)
    mods = read_mods(folder)
    if backend == "local" and address is not None:
        raise click.UsageError("--address is for the ray backend")
    started_ray = False
    ray: Any = None
    if backend == "ray":
        try:
            if address is None:
                start_local_ray(num_cpus=max(2, shards))
                started_ray = True
                import ray
            else:
                os.environ.setdefault("RAY_AUTH_MODE", "token")
                import ray

                ray.init(address=address, log_to_driver=False, configure_logging=False)
        except ImportError:
            raise click.ClickException("the ray backend needs ray: pip install 'moonbox[ray]'"
                                       ) from None
        except ClusterError as exc:
            raise click.ClickException(str(exc)) from None
    scratch = None
    if checkpoint_every and checkpoint_dir is None:
        scratch = tempfile.TemporaryDirectory(prefix="moonbox-cluster-")
        checkpoint_dir = Path(scratch.name)
    try:
        game = ShardedGame(mods, shards, seed=seed,
                           backend=RayBackend() if backend == "ray" else LocalBackend(),
                           checkpoint_dir=checkpoint_dir if checkpoint_every else None,
                           checkpoint_every=checkpoint_every or 1)
        try:
            start = time.perf_counter()
            game.run(ticks)
            wall = time.perf_counter() - start
            doc = _figures(game, backend, ticks, wall)
        finally:
            game.close()
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        if started_ray or address is not None:
            ray.shutdown()
        if scratch is not None:
            scratch.cleanup()
    if as_json:
        print(json.dumps(doc))
    else:
        _print(doc, console)
    sys.exit(0)


def _figures(game: Any, backend: str, ticks: int, wall: float) -> dict[str, Any]:
    shards = []
    for i, f in sorted(game.figures().items()):
        shards.append({"shard": i, "mods": f["mods"],
                       "mod_ids": [m.id for m in game.placed[i]], "ticks": f["tick"],
                       "ms_per_tick": round(f["ms_mean"], 4), "ms_max": round(f["ms_max"], 4),
                       "restarts": f["restarts"], "pid": f["pid"]})
    cms = game.coordinator_ms
    means = [s["ms_per_tick"] for s in shards]
    return {
        "backend": backend, "ticks": ticks, "seconds": round(wall, 4),
        "ticks_per_s": round(ticks / wall, 2) if wall > 0 else None,
        "skew_ms": round(max(means) - min(means), 4) if means else 0.0,
        "coordinator_ms_per_tick": round(sum(cms) / len(cms), 4) if cms else 0.0,
        "checkpoints": game.checkpoints, "recoveries": game.recoveries,
        "lost": {str(k): v for k, v in game.lost.items()},
        "shards": shards, "world_hashes": {str(k): v for k, v in game.world_hashes().items()},
        "combined_hash": game.combined_hash(),
    }


def _print(doc: dict[str, Any], console: Console) -> None:
    table = Table("shard", "mods", "ticks", "ms/tick", "max ms", "restarts", "pid")
    for s in doc["shards"]:
        table.add_row(str(s["shard"]), str(s["mods"]), str(s["ticks"]),
                      f"{s['ms_per_tick']:.3f}", f"{s['ms_max']:.3f}", str(s["restarts"]),
                      str(s["pid"]))
    console.print(table)
    console.print(f"{doc['ticks']} ticks on {len(doc['shards'])} shards ({doc['backend']}) in "
                  f"{doc['seconds']:.2f} s: {doc['ticks_per_s']} ticks/s; skew "
                  f"{doc['skew_ms']:.3f} ms; coordinator {doc['coordinator_ms_per_tick']:.3f} "
                  "ms per tick")
    for cp in doc["checkpoints"][-1:]:
        console.print(f"last checkpoint: tick {cp['tick']}, {cp['bytes']} bytes, "
                      f"{cp['ms']:.1f} ms")
    if doc["lost"]:
        console.print(f"[red]lost shards[/red]: {doc['lost']}")
    console.print(f"world hash: {doc['combined_hash']}")
