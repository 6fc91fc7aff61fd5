"""The arena: a small game driven entirely by mods, run headless.

    python examples/arena/arena.py [TICKS] [--isolate]

Four mods play (scoreboard, pickups, players, enemies) and one misbehaves (glitch): it is
quarantined after three budget trips while the game goes on. With ``--isolate`` every mod
runs in a worker process (``Game(isolation="process")``): the same game, the same world.
Everything here uses the public API of moonbox.engine, moonbox.mods and moonbox.world.
"""

from __future__ import annotations

import sys
from typing import Any

from moonbox.engine import Game
from moonbox.mods import arena_mods, load_packages
from moonbox.world import Prefab, World, default_prefabs


def make_world() -> World:
    """An arena of 100 x 100 units with players and enemies besides the default prefabs."""
    prefabs = default_prefabs()
    prefabs.register(Prefab("player", description="A runner controlled by a mod."))
    prefabs.register(Prefab("enemy", description="Chases players.", radius=0.6))
    return World(prefabs, bound=50)


def play(ticks: int = 60, seed: int = 1, **options: Any) -> Game:
    """Load the mods and run ``ticks`` ticks; prints what happens. The caller closes it.
    ``options`` go to :class:`Game` (``isolation="process"``, ``workers``, ...)."""
    game = Game(make_world(), seed=seed, **options)
    # The mods ship with moonbox, one folder each (moonbox demo plays them too; moonbox dev
    # --init DIR copies them to edit). They load as they are, the glitch included, in
    # dependency order: the players import the scoreboard's export.
    with arena_mods() as mods_dir:
        load_packages(game, mods_dir)
    for _ in range(ticks):
        report = game.tick()
        for mod_id, line in report.reports:
            print(f"[{report.tick:3}] {mod_id}: {line}")
        for mod_id in report.quarantined:
            print(f"[{report.tick:3}] QUARANTINED {mod_id}: "
                  f"{game.mod(mod_id).quarantine.reason}")
    return game


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--isolate"]
    ticks = int(args[0]) if args else 60
    options = {"isolation": "process"} if "--isolate" in sys.argv[1:] else {}
    with play(ticks, **options) as game:
        print(f"\n{len(game.world)} entities, world hash {game.world.content_hash()[:16]}")
        for mod in game.mods:
            s = mod.stats
            state = "quarantined" if mod.quarantine else "active"
            print(f"{mod.id:11} {state:11} calls {s.calls:4}  steps {s.steps:8,}  "
                  f"errors {s.errors}  trips {s.trips}  refused {s.commands_refused}")
        for worker in game.worker_stats():
            print(f"worker {worker.pid}: rss {worker.rss_bytes / 2**20:.0f} MiB, "
                  f"mods {', '.join(worker.mods)}")


if __name__ == "__main__":
    main()
