"""Loading and unloading mods: a sandbox each, the engine library, the main chunk."""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Callable
from typing import Any

from .._errors import BindingError, MoonboxError, ScriptError
from ..bindings import Permissions, Registry
from ..isolation import IsolatedSandbox, WorkerPool
from ..sandbox import Budget, FunctionHandle, Outcome, Sandbox, Watchdog
from ..world import World
from ._errors import EngineError
from ._mod import Failure, Mod
from ._protocol import RUNTIME, RUNTIME_CHUNK

_MOD_ID = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")


class Loading:
    """The part of :class:`~moonbox.engine.Game` that loads and unloads mods."""

    # Set by Game.__init__ (see _game.py); the other parts of the game are its mixins.
    world: World
    registry: Registry
    budget: Budget
    permissions: Permissions
    seed: int | None
    jit: bool
    pool: WorkerPool | None
    wall_margin_s: float
    _watchdog: Watchdog | None
    _mods: dict[str, Mod]
    _order: dict[str, int]
    _subscribers: dict[str, list[Mod]]
    _chain: list[str]
    _tick: int

    def load_mod(
        self,
        mod_id: str,
        source: str | bytes,
        *,
        chunk: str | None = None,
        permissions: Permissions | None = None,
        budget: Budget | None = None,
        access: Any = None,
        prepare: Callable[[Any], None] | None = None,
        replacing: bool = False,
    ) -> Mod:
        """Load a mod: a sandbox of its own, the engine library, then its main chunk.

        The main chunk runs once, under the budget, and registers handlers and timers. If
        it fails (or trips, or waits), the mod stays loaded but quarantined (``load``) and
        the failure is in ``mod.quarantine``; the game goes on.

        Args:
            mod_id: lower-case id (``waves``, ``arena-enemies``): a-z, 0-9, ``_``, ``-``.
            source: the main chunk's Lua source text.
            chunk: its chunk name (default ``@mods/<id>/main.lua``).
            permissions: default: the game's.
            budget: default: the game's.
            access: what the host captured about the mod (see :meth:`Registry.mod`).
            prepare: called with the mod's sandbox after the engine library and before the
                main chunk, to run more of the mod's own chunks in its environment (mod
                packages define their ``require`` this way). A :class:`ScriptError` it
                raises is a load failure, like the main chunk's. In an isolated game it
                gets the :class:`~moonbox.isolation.IsolatedSandbox` (``run``, ``load``,
                ``start``), and is called again whenever the mod is built again in a fresh
                worker.
            replacing: unload the loaded mod of that id first, and keep its place in the
                dispatch order (a new version of the same mod).

        Raises:
            EngineError: ``invalid_mod_id``, ``duplicate_mod``, ``closed``.
            ConfigError: (isolated) the mod id is taken in a pool the game was given.
            HostError: (isolated) no worker could be started for the mod.
        """
        self._check_open()
        if not isinstance(mod_id, str) or not _MOD_ID.match(mod_id):
            raise EngineError(f"mod id {mod_id!r}: use 1-64 of a-z 0-9 _ - starting with a "
                              "letter", code="invalid_mod_id")
        place = None
        if replacing and mod_id in self._mods:
            place = list(self._mods).index(mod_id)
            self.unload_mod(mod_id)
        if mod_id in self._mods:
            raise EngineError(f"a mod {mod_id!r} is loaded already", code="duplicate_mod")
        mod = self._open_mod(mod_id, source, chunk, permissions or self.permissions,
                             budget or self.budget, access, prepare)
        self._mods[mod_id] = mod
        if place is not None:  # back at its place in the dispatch order
            ids = list(self._mods)
            ids.insert(place, ids.pop())
            self._mods = {i: self._mods[i] for i in ids}
        else:
            self._order[mod_id] = len(self._order)
        self._build(mod, source, prepare)
        return mod

    def _open_mod(self, mod_id: str, source: str | bytes, chunk: str | None,
                  permissions: Permissions, budget: Budget, access: Any,
                  prepare: Callable[[Any], None] | None) -> Mod:
        """A mod with a sandbox of its own, not built yet and not in the game's tables."""
        api = self.registry.mod(mod_id, permissions, access=access)
        sandbox: Sandbox | IsolatedSandbox
        try:
            if self.pool is not None:
                # The mod's data state is its key/value store, kept here in the host: the
                # worker keeps no state global.
                sandbox = IsolatedSandbox(budget, jit=self.jit, host_functions=api.host_functions,
                                          pool=self.pool, mod_id=mod_id, state_global=None,
                                          wall_margin_s=self.wall_margin_s,
                                          respawn="next_call",
                                          deterministic=self.seed is not None)
            else:
                sandbox = api.sandbox(budget, jit=self.jit, deterministic=self.seed is not None,
                                      watchdog=self._watchdog or False)
        except BaseException:
            api.close()
            raise
        mod = Mod(mod_id, api, sandbox, budget, chunk or f"@mods/{mod_id}/main.lua")
        mod._generation = sandbox.replacements
        mod._source, mod._prepare = source, prepare
        mod.permissions, mod._has_access = permissions, access is not None
        if isinstance(sandbox, IsolatedSandbox):
            mod._isolated = True
            mod.stats.worker = sandbox.worker_stats()
        return mod

    def _build(self, mod: Mod, source: str | bytes, prepare: Callable[[Any], None] | None,
               *, again: bool = False) -> bool:
        """Run the engine library, ``prepare`` and the main chunk in the mod's sandbox;
        whether all of it succeeded. A failure quarantines the mod: ``load``, or
        ``runtime`` when building it ``again`` in a fresh worker.

        What the build registered is kept as the mod's load (its tick, callback ids and
        exported functions): what a restore from a snapshot runs the main chunk again for,
        and checks it registers again."""
        sandbox = mod.sandbox
        self._chain.append(mod.id)
        first_id = mod.next_id
        mod.loaded_tick = self._tick
        try:
            if isinstance(sandbox, IsolatedSandbox):
                # Compiled once into the mod's snapshot: a fresh worker compiles it again.
                if mod._runtime_chunk is None:
                    mod._runtime_chunk = sandbox.load(RUNTIME, RUNTIME_CHUNK)
                keeper: Any = sandbox.start(mod._runtime_chunk)
            else:
                keeper = sandbox.start(RUNTIME, RUNTIME_CHUNK, worker_resume=True)
            outcome = keeper.resume(self._seed_for(mod.id, mod.stats.restores))
            self._account(mod, outcome)
            if outcome.status != "yielded" or mod._dispatch is None:
                self._load_failed(mod, outcome, RUNTIME_CHUNK[1:], again)
                return False
            mod._keeper = keeper
            if prepare is not None:
                prepare(sandbox)
            # The engine library takes back what it lent the preparation (a step or two,
            # not counted as a call of the mod).
            outcome = keeper.resume()
            if outcome.status != "yielded":
                self._load_failed(mod, outcome, RUNTIME_CHUNK[1:], again)
                return False
            outcome = sandbox.run(source, mod.chunk, max_resumes=1)
            self._account(mod, outcome)
            if not outcome.ok or outcome.status != "done":
                self._load_failed(mod, outcome, mod.chunk.lstrip("@="), again)
                return False
        except MoonboxError as exc:
            error = exc if isinstance(exc, ScriptError) else ScriptError(str(exc), chunk=mod.chunk)
            failure = Failure(mod.id, "load", mod.chunk.lstrip("@="), error, self._tick)
            if again:
                self._quarantine(mod, "runtime", f"lost its worker and could not be built "
                                 f"again: {error}; unload it and load it again", failure)
            else:
                self._quarantine(mod, "load", f"failed to load: {error}", failure)
            return False
        finally:
            self._chain.pop()
            mod._load_ids = (first_id, mod.next_id)
            mod._load_signature = tuple(
                (cb.id, cb.kind, cb.event, cb.interval, cb.where)
                for cid, cb in sorted(mod.callbacks.items()) if cid >= first_id)
            mod._load_exports = {name: entry[1] for name, entry in mod.exports.items()
                                 if entry[0] == "function"}
        return True

    def _load_failed(self, mod: Mod, outcome: Outcome, where: str, again: bool = False) -> None:
        error = outcome.error or ScriptError(
            "the main chunk waited or yielded; register handlers and use wait() inside them",
            chunk=mod.chunk)
        failure = Failure(mod.id, "load", where, error, self._tick)
        self._report.failures.append(failure)
        if error.kind == "budget":
            mod.stats.trips += 1
        else:
            mod.stats.errors += 1
        if again:
            self._quarantine(mod, "runtime", f"lost its worker and could not be built again: "
                             f"{error}; unload it and load it again", failure)
        else:
            self._quarantine(mod, "load", f"failed to load: {error}", failure)

    def unload_mod(self, mod_id: str) -> None:
        """Unload a mod: its handlers, timers, tasks and exports go; its entities stay.

        Raises:
            EngineError: ``unknown_mod``.
        """
        mod = self.mod(mod_id)
        self._release(mod)
        del self._mods[mod_id]
        for subs in self._subscribers.values():
            if mod in subs:
                subs.remove(mod)
        self.world.rollback(mod_id)

    def _release(self, mod: Mod) -> None:
        # The dispatcher handle first, while the run it came from is alive.
        if mod._dispatch is not None:
            mod._dispatch.release()
            mod._dispatch = None
        mod._run = None
        mod._keeper = None
        mod.sandbox.close()
        mod.api.close()

    def _ready(self, mod: Mod, handle: FunctionHandle) -> None:
        if mod._dispatch is not None:
            handle.release()
            raise BindingError("is called once, by the engine library [failed]",
                               reason="failed")
        mod._dispatch = handle

    def _seed_for(self, mod_id: str, restores: int = 0) -> int:
        if self.seed is None:
            return secrets.randbelow(1 << 31)
        # A mod built again in a fresh worker draws on from another seed, not the first
        # numbers over again.
        text = f"{self.seed}:{mod_id}" + (f":{restores}" if restores else "")
        digest = hashlib.sha256(text.encode()).digest()
        return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF
