"""Handlers and timers a mod registers: the callbacks, the heap of timers, cancelling."""

from __future__ import annotations

import heapq

from .._errors import BindingError
from ._limits import ModLimits
from ._mod import Callback, CallbackKind, Mod


class Timers:
    """The part of :class:`~moonbox.engine.Game` that keeps each mod's handlers and timers."""

    # Set by Game.__init__ (see _game.py); the other parts of the game are its mixins.
    limits: ModLimits
    _subscribers: dict[str, list[Mod]]
    _order: dict[str, int]
    _tick: int

    def _add_callback(self, mod: Mod, kind: CallbackKind, event: str | None, ticks: int,
                      where: str, point: str | None = None) -> int:
        limits = self.limits
        if kind == "on":
            assert event is not None
            if (event.startswith("game:") and event != "game:restored") or (
                    event.startswith("world:") and event not in (
                        "world:refused", "world:spawned", "world:destroyed")):
                raise BindingError(f"no event {event!r} is sent by the engine [unknown_event]",
                                   reason="unknown_event")
            if mod.handler_count >= limits.max_handlers:
                raise BindingError(f"a mod may register at most {limits.max_handlers} "
                                   "handlers [too_many]", reason="too_many")
        elif len(mod.timers) >= limits.max_timers:
            # The heap holds the pending timers and the cancelled ones not yet dropped:
            # both count, so the heap never grows past the limit.
            self._compact_timers(mod)
            if len(mod.timers) >= limits.max_timers:
                raise BindingError(f"a mod may have at most {limits.max_timers} timers "
                                   "[too_many]", reason="too_many")
        cid = mod.next_id
        mod.next_id += 1
        cb = Callback(cid, kind, event, ticks, self._tick + ticks, where, point)
        mod.callbacks[cid] = cb
        if kind == "on":
            assert event is not None
            mod.by_event.setdefault(event, []).append(cb)
            subs = self._subscribers.setdefault(event, [])
            if mod not in subs:
                subs.append(mod)
                subs.sort(key=lambda m: self._order[m.id])
        else:
            heapq.heappush(mod.timers, (cb.due, cid))
        return cid

    def _drop_callback(self, mod: Mod, cid: int) -> bool:
        cb = mod.callbacks.pop(cid, None)
        if cb is None:
            return False
        if cb.kind == "on" and cb.event is not None:
            handlers = mod.by_event.get(cb.event, [])
            if cb in handlers:
                handlers.remove(cb)
            if not handlers:
                mod.by_event.pop(cb.event, None)
                subs = self._subscribers.get(cb.event, [])
                if mod in subs:
                    subs.remove(mod)
        else:
            # Its heap entry stays until popped; once they are most of the heap, rebuild it.
            mod._stale_timers += 1
            if 2 * mod._stale_timers > len(mod.timers):
                self._compact_timers(mod)
        return True

    @staticmethod
    def _compact_timers(mod: Mod) -> None:
        """Drop the heap entries of cancelled timers, in place (dispatch may be walking it)."""
        callbacks = mod.callbacks
        timers = mod.timers
        timers[:] = [(due, cid) for due, cid in timers
                     if (cb := callbacks.get(cid)) is not None and cb.due == due]
        heapq.heapify(timers)
        mod._stale_timers = 0

    def _cancel(self, mod: Mod, cid: int) -> bool:
        return self._drop_callback(mod, cid)
