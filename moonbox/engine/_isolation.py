"""The glue to isolated games: worker statistics, and a mod built again in a fresh worker
after its worker was lost."""

from __future__ import annotations

import time

from .._errors import MoonboxError
from ..isolation import IsolatedSandbox, WorkerPool, WorkerStats
from ..world import World
from ._mod import Event, Mod


class IsolationGlue:
    """The part of :class:`~moonbox.engine.Game` that tends mods in worker processes."""

    # Set by Game.__init__ (see _game.py); the other parts of the game are its mixins.
    world: World
    pool: WorkerPool | None
    _mods: dict[str, Mod]
    _subscribers: dict[str, list[Mod]]
    _outbox: list[Event]
    _rebuilding: set[str]
    _stats_read: float

    def worker_stats(self) -> list[WorkerStats]:
        """Memory and CPU of each worker process of an isolated game, read now (each mod's
        ``stats.worker`` is brought up to date too); ``[]`` in process."""
        if self.pool is None:
            return []
        self._stats_read = time.monotonic()
        stats = self.pool.stats()
        by_key = {key: s for s in stats for key in s.mods}
        for mod in self._mods.values():
            worker = by_key.get(mod.id)
            if worker is not None:
                mod.stats.worker = worker
        return stats

    def _ready_isolated(self, mod: Mod) -> bool:
        """Make sure an isolated mod's runtime is alive before it is called: a fresh worker
        if its worker was lost, and the mod built again there. Whether it can be called."""
        sandbox: IsolatedSandbox = mod.sandbox  # type: ignore[assignment]
        if not sandbox.lost and sandbox.restores == mod._built:
            return True
        try:
            sandbox.revive()
        except MoonboxError as exc:
            self._lost(mod, f"lost its worker and no fresh one could start ({exc}); unload "
                            "it and load it again")
            return False
        if sandbox.restores == mod._built:
            return True
        return self._rebuild(mod)

    def _rebuild(self, mod: Mod) -> bool:
        """Build a mod again in the fresh worker that took over from its lost one.

        What lived in the lost runtime is gone: its callbacks, waiting tasks, exported
        functions and every Lua value. The engine library, ``prepare`` and the main chunk
        run again, so the mod registers its handlers, timers and exports anew; what that
        main chunk asks of the world and sends to other mods is taken back (they saw it at
        the first load), and the mod's key/value state, kept here in the host, is put back
        as it was: the mod's last data snapshot. Its calls of other mods' exports are
        refused (``rebuilding``): what those would do could not be taken back. Its queued
        events stay queued."""
        sandbox = mod.sandbox
        assert isinstance(sandbox, IsolatedSandbox)
        mod.stats.restores += 1
        self._report.restored.append(mod.id)
        state, state_bytes = dict(mod.state), dict(mod.state_bytes)
        self._forget_runtime(mod)
        world = self.world
        world.rollback(mod.id)  # a transaction the lost runtime left open
        first_command = world.next_command_id
        outbox, events, emits = len(self._outbox), len(self._report.events), mod.emits_this_tick
        # What the main chunk would do through another mod's export is not the mod's to
        # take back (the other mod's Lua state, its events, its commands): such calls are
        # refused while it is built again (_call_export, "rebuilding").
        self._rebuilding.add(mod.id)
        try:
            ok = self._build(mod, mod._source, mod._prepare, again=True)
        finally:
            self._rebuilding.discard(mod.id)
        world.discard(mod.id, first_command)
        self._outbox[outbox:] = [e for e in self._outbox[outbox:] if e.source != mod.id]
        self._report.events[events:] = [e for e in self._report.events[events:]
                                        if e.source != mod.id]
        mod.emits_this_tick = emits
        mod.state.clear()
        mod.state.update(state)
        mod.state_bytes.clear()
        mod.state_bytes.update(state_bytes)
        mod._built = sandbox.restores
        return ok

    def _forget_runtime(self, mod: Mod) -> None:
        """Drop what the engine holds of a lost runtime: the callbacks, tasks, exports and
        dispatcher that lived in it."""
        for event in mod.by_event:
            subs = self._subscribers.get(event, [])
            if mod in subs:
                subs.remove(mod)
        mod.by_event.clear()
        mod.callbacks.clear()
        mod.timers.clear()
        mod._stale_timers = 0
        mod.tasks.clear()
        mod.exports.clear()
        if mod._dispatch is not None:
            mod._dispatch.release()
            mod._dispatch = None
        mod._run = None
        mod._keeper = None
        mod._epoch += 1
