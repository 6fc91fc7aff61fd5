"""What a resume or a whole run ends in: its status, values, error, reports and stats."""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from .._errors import BudgetExceeded, ScriptError

__all__ = ["Outcome", "Stats", "Status"]

Status = Literal["done", "yielded", "preempted", "error", "budget"]

# A run in one of these is over: it cannot be resumed again.
FINISHED = frozenset({"done", "error", "budget"})

# What a resume ended in, as the prelude's host.resume answers (the same numbers in
# runs.lua).
YIELDED, DONE, PREEMPTED, BUDGET, FAILED, BAD_VALUE = 1, 2, 3, 4, 5, 6
FIGURES = 0  # host.call: a yield of nothing, with the figures that changed (see Run.call)


class Stats(NamedTuple):
    """What a resume (or a whole run) spent.

    ``wall_s`` is read on the meter's clock, the one the wall budget runs on (monotonic
    wall time wherever the platform has it).
    """

    steps: int = 0
    memory_peak_bytes: int = 0
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "steps": self.steps,
            "memory_peak_bytes": self.memory_peak_bytes,
            "wall_s": round(self.wall_s, 6),
        }


_NO_STATS = Stats()


class Outcome(NamedTuple):
    """The result of one resume, or of a whole run (:meth:`Sandbox.run`, :meth:`Run.finish`).

    Attributes:
        status: ``done`` (the chunk returned), ``yielded`` (it yielded; resume it again),
            ``preempted`` (its slice ran out and it was paused; resume it again), ``error``
            (a script fault) or ``budget`` (a budget tripped).
        values: what the chunk returned or yielded, as plain data.
        error: the :class:`ScriptError` for ``error`` and ``budget``.
        reports: the ``report()`` lines of this resume (or run).
        stats: steps, peak heap and wall time.
    """

    status: Status
    values: tuple[Any, ...] = ()
    error: ScriptError | None = None
    reports: tuple[str, ...] = ()
    stats: Stats = _NO_STATS

    @property
    def ok(self) -> bool:
        return self.status in ("done", "yielded", "preempted")

    @property
    def value(self) -> Any:
        """The single value returned, ``None`` for none, a list for several."""
        if not self.values:
            return None
        return self.values[0] if len(self.values) == 1 else list(self.values)

    @property
    def budget(self) -> str | None:
        return self.error.budget if isinstance(self.error, BudgetExceeded) else None

    def unwrap(self) -> tuple[Any, ...]:
        """The values, or raise the script's error."""
        if self.error is not None:
            raise self.error
        return self.values
