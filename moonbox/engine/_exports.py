"""Cross-mod exports: data by copy, and functions called in the exporter's runtime on the
caller's time."""

from __future__ import annotations

from typing import Any

from .._errors import BindingError
from ..sandbox import HostCall
from ._limits import ModLimits
from ._mod import Mod
from ._protocol import DONE

# The most wall time a caller's resume may have excluded for building a mod again in a
# fresh worker before calling it (starting a worker takes ~0.4 s).
REBUILD_EXCLUDE_S = 30.0


class Exports:
    """The part of :class:`~moonbox.engine.Game` that serves exports and cross-mod calls."""

    # Set by Game.__init__ (see _game.py); the other parts of the game are its mixins.
    limits: ModLimits
    _mods: dict[str, Mod]
    _chain: list[str]
    _exporting: list[tuple[Mod, Mod]]
    _rebuilding: set[str]

    def _export(self, mod: Mod, name: str, kind: str, value: Any, point: str | None) -> None:
        if name not in mod.exports and len(mod.exports) >= self.limits.max_exports:
            raise BindingError(f"a mod may export at most {self.limits.max_exports} names "
                               "[too_many]", reason="too_many")
        if kind == "data":
            value = self._checked_copy(value, "value")
        mod.exports[name] = (kind, value, point)

    def _exported(self, caller: Mod, mod_id: str, name: str) -> tuple[Mod, str, Any]:
        target = self._mods.get(mod_id)
        if target is None:
            raise BindingError(f"no mod {mod_id!r} is loaded [unknown_mod]",
                               reason="unknown_mod")
        if target.quarantine is not None:
            raise BindingError(f"mod {mod_id!r} is quarantined [quarantined]",
                               reason="quarantined")
        entry = target.exports.get(name)
        if entry is None:
            raise BindingError(f"mod {mod_id!r} exports nothing named {name!r} "
                               "[unknown_export]", reason="unknown_export")
        return target, entry[0], entry[1]

    def _import(self, caller: Mod, mod_id: str, name: str) -> tuple[Any, ...]:
        _, kind, value = self._exported(caller, mod_id, name)
        if kind == "function":
            return ("function", None)
        return ("data", self._copy(value, 1 << 62))

    def _call_export(self, caller: Mod, mod_id: str, name: str, arg: Any,
                     call: HostCall) -> Any:
        if caller.id in self._rebuilding:
            # The call ran at the first load already; run again, its effects in the other
            # mod would happen twice, and nothing here can take them back.
            raise BindingError(f"{mod_id}.{name} cannot be called while mod {caller.id!r} "
                               "is built again after losing its worker; call other mods "
                               "from handlers, not the main chunk, or pcall the call "
                               "[rebuilding]", reason="rebuilding")
        target, kind, where = self._exported(caller, mod_id, name)
        if kind != "function":
            raise BindingError(f"{mod_id}.{name} is data, not a function [not_a_function]",
                               reason="not_a_function")
        limit = self.limits.max_call_depth
        if len(self._chain) >= limit:
            raise BindingError(f"cross-mod calls nest at most {limit} mods deep [call_depth]",
                               reason="call_depth")
        if mod_id in self._chain:
            raise BindingError(f"mod {mod_id!r} is already in this call chain ("
                               f"{' -> '.join(self._chain)}) [reentrant]", reason="reentrant")
        arg = self._checked_copy(arg, "argument")
        if target._isolated and (target.sandbox.lost  # type: ignore[union-attr]
                                 or target.sandbox.restores != target._built):  # type: ignore[union-attr]
            # Its worker was lost: a fresh one and the mod built again there first, on the
            # host's time, not the caller's.
            with call.excluded_time(REBUILD_EXCLUDE_S):
                ready = self._ready_isolated(target)
            if not ready:
                raise BindingError(f"{mod_id}.{name} failed: it lost its worker and could not "
                                   "be built again [export_failed]", reason="export_failed")
            target, kind, where = self._exported(caller, mod_id, name)
            if kind != "function":
                raise BindingError(f"{mod_id}.{name} is data, not a function "
                                   "[not_a_function]", reason="not_a_function")
        # Nested work borrows from the caller: no more wall time than it has left.
        left = call.time_left_s()
        if left <= 0:
            raise BindingError("no time left in this call [timed_out]", reason="timed_out")
        budget = target.budget
        if left < budget.wall_s:
            budget = budget.model_copy(update={"wall_s": left})
        self._exporting.append((target, caller))
        try:
            values = self._resume(target, f"export {name!r}", where, budget, name, arg)
        finally:
            self._exporting.pop()
        if values is None or values[0] != DONE:
            failure = self._report.failures[-1] if self._report.failures else None
            why = f": {failure.error.message}" if failure and failure.mod == mod_id else ""
            raise BindingError(f"{mod_id}.{name} failed{why} [export_failed]",
                               reason="export_failed")
        result = values[1] if len(values) > 1 else None
        return self._checked_copy(result, "result")
