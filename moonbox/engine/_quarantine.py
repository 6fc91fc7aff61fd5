"""Failures and quarantine: who a failure counts against, and when a mod's dispatch stops."""

from __future__ import annotations

from typing import Any

from .._errors import ScriptError
from ._errors import EngineError
from ._limits import ModLimits
from ._mod import Failure, Mod, Quarantine


class Quarantines:
    """The part of :class:`~moonbox.engine.Game` that records failures and quarantines mods."""

    # Set by Game.__init__ (see _game.py); the other parts of the game are its mixins.
    limits: ModLimits
    _chain: list[str]
    _exporting: list[tuple[Mod, Mod]]
    _tick: int

    def quarantine(self, mod_id: str, reason: str) -> None:
        """Suspend a mod's dispatch (kind ``host``) until :meth:`lift_quarantine`."""
        self._quarantine(self.mod(mod_id), "host", reason, None)

    def lift_quarantine(self, mod_id: str) -> None:
        """Resume a quarantined mod's dispatch; its failure counts start again from 0.

        Its timers and waiting tasks that fell due meanwhile run on the next tick.

        Raises:
            EngineError: ``unknown_mod``; ``not_liftable`` for a mod that never loaded or
                lost its runtime (unload and load it again).
        """
        mod = self.mod(mod_id)
        q = mod.quarantine
        if q is None:
            return
        if q.kind in ("load", "runtime"):
            raise EngineError(f"mod {mod_id!r} {q.reason}; unload it and load it again",
                              code="not_liftable")
        mod.quarantine = None
        mod.failures_in_a_row = mod.trips_in_a_row = 0

    def _fail(self, mod: Mod, label: str, where: str, error: ScriptError) -> None:
        # A failure in an export call happened in the exporter's runtime (its stats say so)
        # but counts toward the caller's quarantine: the caller chose the arguments and the
        # call, and must not be able to shut another mod down (docs/engine.md).
        blamed = mod
        caller = None
        if self._exporting and self._exporting[-1][0] is mod:
            blamed = self._exporting[-1][1]
            caller = blamed.id
        failure = Failure(mod.id, label, where, error, self._tick, caller)
        self._report.failures.append(failure)
        limits = self.limits
        if error.kind == "budget":
            mod.stats.trips += 1
            blamed.trips_in_a_row += 1
            if blamed.trips_in_a_row >= limits.max_trips and blamed.quarantine is None:
                self._quarantine(blamed, "trips", f"tripped its budget "
                                 f"{blamed.trips_in_a_row} times in a row; last: {failure}",
                                 failure)
        else:
            mod.stats.errors += 1
            blamed.failures_in_a_row += 1
            if blamed.failures_in_a_row >= limits.max_failures and blamed.quarantine is None:
                self._quarantine(blamed, "failures", f"failed {blamed.failures_in_a_row} "
                                 f"times in a row; last: {failure}", failure)

    def _quarantine(self, mod: Mod, kind: Any, reason: str, failure: Failure | None) -> None:
        if mod.quarantine is not None and kind != "runtime":
            return
        mod.quarantine = Quarantine(kind, reason, self._tick, failure)
        self._report.quarantined.append(mod.id)

    def _lost(self, mod: Mod, reason: str) -> None:
        mod._run = None
        self._quarantine(mod, "runtime", reason, None)

    def _broken(self, mod: Mod, exc: Exception) -> None:
        # A fault of the engine itself while dispatching this mod: whatever the mod did to
        # cause it, it stops this mod only; the other mods and the world go on.
        self._chain.clear()
        self._lost(mod, f"lost its runtime: the engine failed while dispatching it "
                        f"({type(exc).__name__}: {exc}); unload it and load it again")
