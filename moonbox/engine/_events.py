"""Events: what mods and the host emit, queued per mod and delivered on the next tick, and
the world's results routed back as events."""

from __future__ import annotations

from typing import Any

from .._errors import BindingError
from ..world import CommandResult
from ._errors import EngineError
from ._limits import ModLimits
from ._mod import Event, Mod

RESERVED_EVENTS = ("tick",)
RESERVED_PREFIXES = ("world:", "game:")
# Results whose entities become world:spawned / world:destroyed events.
_ANNOUNCED = frozenset({"spawn", "spawn_batch", "grid", "destroy", "transaction"})


class Events:
    """The part of :class:`~moonbox.engine.Game` that queues and delivers events."""

    # Set by Game.__init__ (see _game.py); the other parts of the game are its mixins.
    limits: ModLimits
    _mods: dict[str, Mod]
    _subscribers: dict[str, list[Mod]]
    _outbox: list[Event]
    _tick: int

    def emit(self, event: str, data: Any = None) -> None:
        """Send a game event to every mod with a handler for it, on the next tick.

        Raises:
            EngineError: ``reserved_event`` for ``tick``; ``invalid_event`` for data that is
                not plain data.
        """
        if event in RESERVED_EVENTS:
            raise EngineError(f"{event!r} is sent by the engine itself", code="reserved_event")
        try:
            data = self._copy(data, self.limits.max_value_bytes * 64)
        except ValueError as exc:
            raise EngineError(str(exc), code="invalid_event") from None
        self._outbox.append(Event(event, data, None, self._tick))

    def _emit_from(self, mod: Mod, event: str, data: Any) -> None:
        if event in RESERVED_EVENTS or event.startswith(RESERVED_PREFIXES):
            raise BindingError(f"{event!r} is sent by the engine only [reserved_event]",
                               reason="reserved_event")
        if mod.emits_this_tick >= self.limits.max_emits_per_tick:
            raise BindingError(f"at most {self.limits.max_emits_per_tick} emits per tick "
                               "[too_many]", reason="too_many")
        data = self._checked_copy(data, "data")
        mod.emits_this_tick += 1
        event_ = Event(event, data, mod.id, self._tick)
        self._outbox.append(event_)
        self._report.events.append(event_)

    def _deliver(self) -> None:
        outbox, self._outbox = self._outbox, []
        for event in outbox:
            for mod in self._subscribers.get(event.name, ()):
                if mod.id != event.source and mod.quarantine is None:
                    self._enqueue(mod, event)

    def _enqueue(self, mod: Mod, event: Event) -> None:
        queue = mod.queue
        if len(queue) >= self.limits.max_queued_events:
            queue.popleft()
            mod.stats.events_dropped += 1
        queue.append(event)

    def _route(self, results: list[CommandResult]) -> None:
        t = self._tick
        mods = self._mods
        for result in results:
            # One result per command of the tick: the status read as it is (the `applied`
            # property would cost a call each).
            applied = result.status == "applied"
            mod = mods.get(result.mod) if result.mod is not None else None
            if mod is not None:
                # (The stats as they are: the tally of calls they take when read is no
                # concern of the counts of commands.)
                if applied:
                    mod._stats.commands_applied += 1
                else:
                    mod._stats.commands_refused += 1
                    if "world:refused" in mod.by_event:
                        self._enqueue(mod, Event("world:refused", result.to_dict(), None, t))
            if applied and result.kind in _ANNOUNCED:
                name = "world:destroyed" if result.kind == "destroy" else "world:spawned"
                for entity in result.names:
                    self._outbox.append(Event(name, {"name": entity, "mod": result.mod}, None, t))
