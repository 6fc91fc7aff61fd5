"""Budgets: what one resume of a mod may spend, validated when made."""

from __future__ import annotations

import math
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["Budget", "parse_size", "MIN_HEAP_BYTES"]

MIN_HEAP_BYTES = 1 << 20  # a runtime and the prelude need a few hundred KiB

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_FACTORS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str | int) -> int:
    """Parse a byte size such as ``65536``, ``64KB``, ``64MB``, ``1.5GiB``.

    Units are binary: ``KB`` and ``KiB`` are both 1024 bytes.

    Raises:
        ValueError: the text is not a size.
    """
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"a size cannot be negative: {text}")
        return text
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 65536, 64KB, 64MB, 1GB)")
    number, unit = m.group(1), (m.group(2) or "").lower()
    prefix = unit[:1] if unit[:1] in "kmgt" else ""
    return int(float(number) * _FACTORS[prefix])


class Budget(BaseModel):
    """What one resume of a mod may spend. Frozen; every field is checked when made.

    Budgets apply per resume: when the mod yields (``coroutine.yield`` at top level or a
    ``wait``-style binding) the host may resume it later with a fresh budget.

    Attributes:
        steps: metering steps per resume. One step is one metering check (one loop
            iteration, one function entry, one ``goto``) plus what host functions charge.
        alloc_bytes: heap growth allowed per resume, in bytes, on top of the heap at the
            start of the resume (enforced by the allocator and sampled by the meter).
        wall_s: wall-clock seconds per resume.
        max_memory: the mod's heap cap in bytes, whatever it keeps between resumes.
        total_steps: optional cap on the steps of a whole run, across all its resumes; with
            preemption this is the hard cap that still trips a computation that keeps
            getting preempted.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    steps: int = Field(default=10_000_000, ge=1, le=1 << 52)
    alloc_bytes: int = Field(default=64 << 20, ge=1)
    wall_s: float = Field(default=1.0, gt=0)
    max_memory: int = Field(default=64 << 20, ge=MIN_HEAP_BYTES)
    total_steps: int | None = Field(default=None, ge=1, le=1 << 52)

    @field_validator("wall_s")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("wall_s must be a finite number of seconds")
        return v

    @field_validator("alloc_bytes", "max_memory", mode="before")
    @classmethod
    def _sizes(cls, v: object) -> object:
        return parse_size(v) if isinstance(v, str) else v

    @model_validator(mode="after")
    def _consistent(self) -> Budget:
        if self.total_steps is not None and self.total_steps < self.steps:
            raise ValueError("total_steps cannot be smaller than steps (the per-resume budget)")
        return self
