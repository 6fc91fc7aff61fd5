"""What one mod may hold and how many failures it gets: explicit, frozen, validated."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ModLimits"]


class ModLimits(BaseModel):
    """Per-mod limits of the engine. Frozen; every field is checked when made.

    Attributes:
        max_handlers: ``on`` handlers registered at once.
        max_timers: ``after``/``every``/``spawn`` timers pending at once; the host's heap
            of timers never holds more entries (cancelled ones are dropped to make room).
        max_tasks: handlers paused in ``wait`` at once; one more fails the call that waited.
        max_queued_events: events waiting for the mod's next dispatch; past it the oldest
            is dropped and counted (``ModStats.events_dropped``).
        max_emits_per_tick: ``emit`` calls per tick.
        max_exports: names a mod may export.
        max_export_depth: nesting of a value crossing between mods (exports, arguments and
            results of exported functions).
        max_call_depth: mods in one chain of cross-mod calls (A calls B calls C: 3).
        max_state_keys: keys of the mod's key/value state.
        max_state_bytes: the state's packed size in all.
        max_value_bytes: packed size of one state value, event payload or export.
        max_failures: consecutive failed calls (errors) that quarantine the mod.
        max_trips: consecutive budget trips that quarantine the mod.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_handlers: int = Field(default=64, ge=1)
    max_timers: int = Field(default=256, ge=1)
    max_tasks: int = Field(default=64, ge=1)
    max_queued_events: int = Field(default=256, ge=1)
    max_emits_per_tick: int = Field(default=64, ge=1)
    max_exports: int = Field(default=32, ge=1)
    max_export_depth: int = Field(default=8, ge=1, le=32)
    max_call_depth: int = Field(default=4, ge=1, le=32)
    max_state_keys: int = Field(default=256, ge=1)
    max_state_bytes: int = Field(default=256 << 10, ge=1)
    max_value_bytes: int = Field(default=16 << 10, ge=1)
    max_failures: int = Field(default=5, ge=1)
    max_trips: int = Field(default=3, ge=1)
