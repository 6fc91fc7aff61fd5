"""The Programmer in a running game: attempts in a fork, successes through a hot reload.

A :class:`LiveMod` ties one file of one mod package, loaded by a
:class:`~moonbox.mods.ModHost`, to the repair loop. Each attempt runs in a fork of the
game (:meth:`ModHost.fork`: the whole game as of the current tick, restored from its
snapshot, with the live game's bindings and the mod's permissions): the attempt's version
is swapped in there as a reload would swap it (state carried, ``on_reload``, old timers
gone), and the fork ticks. A load failure, a failed call, a trip, a denial, or a world
command the world refused fails the attempt; so does an acceptance check, which sees the
fork's world and the mod's state after those ticks. Nothing of an attempt reaches the live
game. Only a verified version goes live, by :meth:`ModHost.apply` (its dry run, the swap,
the state carried, the record under the mod host's keys ``mods/<id>/<path>``).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from .._errors import ConfigError, MoonboxError, ScriptError
from ..bindings import Permissions
from ..engine import Game
from ..store import Store
from ..world import World
from ._client import LLMClient
from ._loop import Programmer, Published, Script, Task
from ._repair import Check

__all__ = ["GameHost", "GameRun", "LiveMod", "world_summary"]

_SUMMARY_ENTITIES = 20


@dataclass(frozen=True)
class GameRun:
    """How an attempt went in the fork: the result the acceptance checks see.

    Attributes:
        status: ``done`` or ``error``.
        values: always empty (a mod's main chunk returns nothing the game keeps).
        error: the first failure of the mod (load, ``on_reload`` or a call in a tick).
        reports: the mod's ``report()`` lines during the fork's ticks.
        refused: the world commands of the mod that the world refused, as
            ``CommandResult``.
        world: the fork's world after its ticks (a copy; the live world is untouched).
        state: the mod's state in the fork after its ticks.
        ticks: the fork's tick reports.
    """

    status: str
    values: tuple[Any, ...] = ()
    error: ScriptError | None = None
    reports: tuple[str, ...] = ()
    refused: tuple[Any, ...] = ()
    world: World | None = None
    state: dict[str, Any] = field(default_factory=dict)
    ticks: tuple[Any, ...] = ()


def world_summary(world: World, *, limit: int = _SUMMARY_ENTITIES) -> str:
    """A few lines on ``world``: its prefabs and its entities (name, prefab, position)."""
    entities = world.entities()
    prefabs = ", ".join(p.name for p in world.prefabs)
    lines = [f"Prefabs that may be spawned: {prefabs}.",
             f"{len(entities)} entities" + (":" if entities else ".")]
    for e in entities[:limit]:
        owner = f", owner {e.owner}" if e.owner else ""
        lines.append(f"- {e.name} ({e.prefab}) at ({e.x:g}, {e.y:g}, {e.z:g}){owner}")
    if len(entities) > limit:
        lines.append(f"- ... {len(entities) - limit} more")
    return "\n".join(lines)


class GameHost(Protocol):
    """What :class:`LiveMod` needs of the host of a running game: what
    :class:`moonbox.mods.ModHost` offers (the agent does not depend on it)."""

    game: Game
    store: Store | None
    mods: dict[str, Any]

    def permissions_for(self, package: Any, registry: Any = None) -> Permissions: ...

    def fork(self) -> AbstractContextManager[Game]: ...

    def try_version(self, game: Game, package: Any) -> tuple[Any, str | None]: ...

    def apply(self, package: Any, *, author: str | None = None, role: str = "modder",
              trace_id: str | None = None) -> Any: ...


class LiveMod:
    """One file of a mod the host runs, as the target of the Programmer.

    Args:
        host: the mod host of the running game (a :class:`moonbox.mods.ModHost`).
        mod_id: a mod the host has loaded.
        path: the file the Programmer writes (default: the manifest's entry).
        ticks: how many ticks the fork runs after the swap (at least one: the tick that
            applies the commands the main chunk issued).

    Raises:
        ConfigError: the host has no version of ``mod_id``.
    """

    def __init__(self, host: GameHost, mod_id: str, path: str | None = None, *,
                 ticks: int = 1) -> None:
        state = host.mods.get(mod_id)
        if state is None or state.package is None:
            raise ConfigError(f"no version of mod {mod_id!r} is loaded")
        self.host = host
        self.mod_id = mod_id
        self.path = path or state.package.manifest.entry
        self.ticks = max(1, ticks)
        self.author: str | None = None

    @property
    def package(self) -> Any:
        state = self.host.mods[self.mod_id]
        assert state.package is not None
        return state.package

    @property
    def key(self) -> str:
        """The file's key in the versions store (the mod host's)."""
        return f"mods/{self.mod_id}/{self.path}"

    @property
    def permissions(self) -> Permissions:
        return self.host.permissions_for(self.package)

    @property
    def source(self) -> str | None:
        """The live version of the file."""
        return self.package.files.get(self.path)

    def task(self, text: str, *, checks: tuple[Check, ...] = ()) -> Task:
        """A task on this file: its key, the mod's permissions and the game's budget."""
        return Task(text, key=self.key, permissions=self.permissions, checks=checks,
                    world_summary=self.world_summary(), budget=self.host.game.budget)

    def programmer(self, client: LLMClient, **options: Any) -> Programmer:
        """A :class:`Programmer` whose attempts run in forks and whose success goes live."""
        options.setdefault("store", self.host.store)
        options.setdefault("budget", self.host.game.budget)
        self.author = options.get("author") or getattr(client, "model", None)
        return Programmer(client, self.host.game.registry, dry_run=self.dry_run,
                          go_live=self.go_live, world_summary=self.world_summary,
                          **options)

    def world_summary(self) -> str:
        """The live world as of now (which is the world every fork starts from)."""
        return world_summary(self.host.game.world)

    def _version(self, source: str) -> Any:
        package = self.package
        return replace(package, files={**package.files, self.path: source})

    def dry_run(self, script: Script) -> GameRun:
        """Run ``script`` as the mod's new version in a fork of the game."""
        package = self._version(script.source)
        host = self.host
        with host.fork() as fork:
            mod, problem = host.try_version(fork, package)
            if problem is not None:
                error = mod.quarantine.failure.error if (
                    mod.quarantine is not None and mod.quarantine.failure is not None) \
                    else ScriptError(problem, kind="runtime")
                return GameRun("error", error=error, world=World.load(
                    fork.world.snapshot(), fork.world.prefabs))
            reports: list[str] = []
            refused: list[Any] = []
            ticks = []
            error = None
            for _ in range(self.ticks):
                report = fork.tick()
                ticks.append(report)
                reports += [line for mod_id, line in report.reports if mod_id == self.mod_id]
                refused += [r for r in report.results
                            if r.mod == self.mod_id and r.status == "refused"]
                failure = next((f for f in report.failures if f.mod == self.mod_id), None)
                if failure is not None:
                    error = failure.error
                    break
            state = dict(fork.mod(self.mod_id).state)
            world = fork.world
            return GameRun("error" if error else "done", error=error,
                           reports=tuple(reports), refused=tuple(refused), world=world,
                           state=state, ticks=tuple(ticks))

    def go_live(self, script: Script) -> Published:
        """Swap the verified script into the running game (the hot reload path) and
        return the revision recorded for the file."""
        result = self.host.apply(self._version(script.source),
                                 author=self.author, role="programmer", trace_id=script.trace_id)
        if not result.ok:
            return Published(error=result.error or "refused")
        store = self.host.store
        revision = None
        if store is not None and self.key in store.scripts:
            try:
                revision = store.scripts.current(self.key).rev
            except MoonboxError:
                revision = None
        return Published(revision)
